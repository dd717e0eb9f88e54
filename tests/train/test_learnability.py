"""The learnability check, reduced to what a CPU test affords: the smoke preset's SFT policy
(conf/model/sft_small.yaml) built from scratch with TRL, then sampled and trained against a live
environment server (interpreter backend, small shapes).

It asserts what the experiment rests on: the SFT policy writes real kernels and starts neither always
right nor always wrong on the training tasks (so GRPO groups carry a signal), the build is hashed,
cached and loads through the hub path, and one epoch of the project's trainer turns the verdicts into
a non-zero reward and a LoRA update. Whether the loop *improves* the policy is measured by the
experiment itself over seeds (docs/learnability.md), not asserted here: a few updates are noise.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from kernelflow.config_dicts import config_from_dict
from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.launch import start_local_server
from kernelflow.eval import EvalConfig
from kernelflow.train.config import LoraSettings, PolicyConfig, TrainerConfig
from kernelflow.train.generation import SamplingSettings
from kernelflow.train.policy import load_policy
from kernelflow.train.rollout import collect_group, env_session_factory
from kernelflow.train.sft import META_FILE, build_sft_model, sft_model_hash, verify_sft_model
from kernelflow.train.trainer import GRPOLoop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

CONF = Path(__file__).parents[2] / "conf" / "model" / "sft_small.yaml"
EVAL = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=2, timeout_s=120)
TRAIN = ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh")


@pytest.fixture(scope="module")
def policy_config(model_cache) -> PolicyConfig:
    data = OmegaConf.to_container(OmegaConf.load(CONF), resolve=True)
    data["cache_dir"] = str(model_cache)
    return config_from_dict(PolicyConfig, data, "model")


@pytest.fixture(scope="module")
def built(policy_config) -> Path:
    return build_sft_model(policy_config.tiny, policy_config.sft, policy_config.cache_dir)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("learnability-env") / "server.log"
    srv = start_local_server(EnvServerConfig(eval=EVAL, max_sessions=8), log_path=log, startup_timeout_s=120)
    yield srv
    srv.stop()


def test_the_build_is_hashed_cached_and_carded(built, policy_config):
    meta = verify_sft_model(built)  # every recorded sha256 matches its file
    assert built.name == f"sft-{sft_model_hash(policy_config.tiny, policy_config.sft)[:16]}"
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(meta["sha256"])
    assert meta["loss_curve"][-1]["loss"] < meta["loss_curve"][0]["loss"]  # SFT learnt something
    card = (built / "README.md").read_text()
    assert meta["sha256"]["model.safetensors"] in card
    stamp = (built / "model.safetensors").stat().st_mtime_ns
    assert build_sft_model(policy_config.tiny, policy_config.sft, policy_config.cache_dir) == built
    assert (built / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt
    tampered = json.loads((built / META_FILE).read_text())
    tampered["sha256"]["model.safetensors"] = "0" * 64
    copy = built.parent / "tampered"
    copy.mkdir()
    for p in built.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    (copy / META_FILE).write_text(json.dumps(tampered))
    with pytest.raises(ValueError, match="differ from their recorded sha256"):
        verify_sft_model(copy)


def test_the_sft_policy_starts_neither_always_right_nor_always_wrong(built, policy_config, server):
    policy = load_policy(policy_config, LoraSettings(r=4, alpha=8), seed=0)
    factory = env_session_factory(server.url, server.token, 300)
    sampling = SamplingSettings(320, do_sample=True, temperature=0.8, top_p=1.0)
    torch.manual_seed(0)
    statuses: dict[str, list[str]] = {}
    for task_id in TRAIN:
        group = collect_group(policy, factory, task_id, 4, sampling, 2, 0, "small")
        statuses[task_id] = [ep.turns[0].status for ep in group.episodes]
    flat = [s for v in statuses.values() for s in v]
    correct = flat.count("ok")
    assert 0 < correct < len(flat), statuses
    assert "no_code" not in flat, statuses  # it writes code, not prose


def test_one_epoch_of_grpo_turns_verdicts_into_an_update(built, policy_config, server):
    cfg = TrainerConfig(
        policy=policy_config, lora=LoraSettings(r=4, alpha=8), epochs=1, group_size=4, max_new_tokens=320,
        max_turns=2, learning_rate=2e-3, env_shape="small", seed=1, samples_per_update=0,
    )
    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    loop = GRPOLoop(cfg, policy, server.url, server.token, total_updates=len(TRAIN))
    before = {n: p.detach().clone() for n, p in policy.trainable_parameters()}
    metrics = loop.train_epoch(1, list(TRAIN))
    assert len(metrics) == len(TRAIN)
    assert sum(m.reward_mean for m in metrics) > 0
    assert all(math.isfinite(m.loss) for m in metrics)
    moved = [m for m in metrics if m.advantage_abs_mean > 0]
    assert moved, [m.status_counts for m in metrics]  # at least one group held right and wrong answers
    assert any(not torch.equal(p, before[n]) for n, p in policy.trainable_parameters())
    assert dataclasses.asdict(loop.config)["policy"]["source"] == "sft"
