"""A real update against a live environment server (interpreter backend, small shapes), tiny model.

The server runs as a subprocess on 127.0.0.1 and is driven over its WebSocket protocol by the real
client, exactly as in training. A random tiny model writes no code, so every verdict would be
`no_code` with reward 0 and the update would carry no signal; to exercise the reward path, the
first rollout of each group submits the honest ReLU solution on its first turn instead of its own
answer (a test device: the trained tokens are still the model's own). The environment then judges
a correct kernel, and the test checks that its reward and returns reach the advantages and move the
LoRA weights, and only them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import torch

from kernelflow.env.client import KernelEnvSession
from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.launch import start_local_server
from kernelflow.eval import EvalConfig
from kernelflow.train.policy import load_policy
from kernelflow.train.trainer import GRPOLoop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOLUTION = (Path(__file__).parents[1] / "fixtures" / "solutions" / "19_ReLU.py").read_text()
EVAL = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, max_workers=2, timeout_s=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("live-env") / "server.log"
    srv = start_local_server(EnvServerConfig(eval=EVAL, max_sessions=8), log_path=log, startup_timeout_s=120)
    yield srv
    srv.stop()
    assert not srv.alive()


class FirstTurnSolution:
    """Wraps a real session: its first submission is the honest solution instead of the model's answer."""

    def __init__(self, inner: KernelEnvSession):
        self.inner, self.steps = inner, 0

    def reset(self, task_id, seed=0, shape=None):
        return self.inner.reset(task_id, seed=seed, shape=shape)

    def step(self, code):
        self.steps += 1
        return self.inner.step(f"```python\n{SOLUTION}```" if self.steps == 1 else code)

    def close(self):
        self.inner.close()


def test_real_update_against_a_live_server(server, tiny_trainer_config):
    cfg = dataclasses.replace(tiny_trainer_config, max_new_tokens=32, group_size=2, env_shape="small")
    counter = itertools.count()

    def factory():
        inner = KernelEnvSession(server.url, token=server.token, message_timeout_s=300)
        return FirstTurnSolution(inner) if next(counter) % cfg.group_size == 0 else inner

    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    loop = GRPOLoop(cfg, policy, session_factory=factory)
    lora_before = {n: p.detach().clone() for n, p in policy.trainable_parameters()}
    base_before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if not p.requires_grad}

    [m] = loop.train_epoch(1, ["19_ReLU"])

    assert m.status_counts.get("ok") == 1, m.status_counts  # the substituted first turn
    assert sum(m.status_counts.values()) == 4 and m.group_size_per_turn == (2, 2)
    assert m.correct_rate_per_turn[0] == 0.5
    assert m.reward_mean > 0 and math.isfinite(m.loss) and m.grad_norm > 0 and m.trained_tokens > 0
    assert m.advantage_abs_mean > 0
    assert any(not torch.equal(p, lora_before[n]) for n, p in policy.trainable_parameters())
    assert all(torch.equal(p, base_before[n]) for n, p in policy.model.named_parameters() if n in base_before)


def test_rollouts_carry_the_environments_rewards_and_returns(server, tiny_trainer_config):
    from kernelflow.train.generation import SamplingSettings
    from kernelflow.train.rollout import collect_group

    cfg = dataclasses.replace(tiny_trainer_config, max_new_tokens=16)
    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    made = []

    def factory():
        s = FirstTurnSolution(KernelEnvSession(server.url, token=server.token, message_timeout_s=300))
        made.append(s)
        return s

    group = collect_group(policy, factory, "19_ReLU", 2, SamplingSettings(16, temperature=0.8), 2, 0, "small")
    gamma = server.info()["gamma"]
    for ep in group.episodes:
        assert [t.status for t in ep.turns][0] == "ok" and ep.turns[0].reward > 0
        assert ep.rewards == tuple(t.reward for t in ep.turns)
        assert ep.returns[1] == pytest.approx(ep.rewards[1])
        assert ep.episode_return == pytest.approx(ep.rewards[0] + gamma * ep.rewards[1])
        assert ep.turns[0].verdict.get("status") == "ok" and ep.turns[0].feedback
        assert ep.turns[0].feedback_ids and not ep.turns[1].feedback_ids
    assert group.evaluation_seconds > 0 and group.generation_tokens > 0
    assert all(s.steps == 2 for s in made)


def test_greedy_evaluation_against_a_live_server(server, tiny_trainer_config):
    cfg = dataclasses.replace(tiny_trainer_config, max_new_tokens=16, env_shape="small")
    policy = load_policy(cfg.policy, cfg.lora, seed=cfg.seed)
    loop = GRPOLoop(cfg, policy, server.url, server.token)
    results = loop.greedy_evaluate(["19_ReLU", "23_Softmax"])
    assert [r.task_id for r in results] == ["19_ReLU", "23_Softmax"]
    for r in results:
        assert len(r.turns) == 2 and not r.correct  # a random model writes no kernel: two attempts
        assert all(t.status == "no_code" and t.verdict.get("status") == "no_code" for t in r.turns)


def test_loop_checks_the_server_before_any_rollout(server, tiny_trainer_config):
    policy = load_policy(tiny_trainer_config.policy, tiny_trainer_config.lora, seed=0)
    with pytest.raises(ValueError, match="runs 2-turn episodes but trainer.max_turns=3"):
        GRPOLoop(dataclasses.replace(tiny_trainer_config, max_turns=3), policy, server.url, server.token)
    with pytest.raises(ValueError, match="allows 8 concurrent sessions but a group needs 9"):
        GRPOLoop(dataclasses.replace(tiny_trainer_config, group_size=9), policy, server.url, server.token)
    loop = GRPOLoop(tiny_trainer_config, policy, server.url, server.token)
    assert loop.server_info["backend"] == "interpret"
