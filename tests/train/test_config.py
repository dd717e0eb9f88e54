"""Trainer settings: defaults are the pilot's, bad values fail with the value and the fix, plan() counts right."""

import pytest

from kernelflow.config_dicts import config_from_dict
from kernelflow.train import LoraSettings, PolicyConfig, TinyModelConfig, TrainerConfig, plan
from kernelflow.train.config import PILOT_MODEL, PILOT_REVISION


def test_defaults_are_the_pilot_protocol():
    c = TrainerConfig()
    assert (c.policy.model, c.policy.revision, c.policy.source) == (PILOT_MODEL, PILOT_REVISION, "hub")
    assert (c.lora.r, c.lora.alpha) == (16, 32)
    assert (c.estimator, c.epochs, c.group_size, c.temperature) == ("dr_grpo", 4, 4, 0.8)
    assert (c.max_new_tokens, c.max_turns, c.seed, c.kl_weight) == (2048, 2, 42, 0.0)
    assert c.normalizer == 2 * 2048


def test_plan_gives_the_pilot_numbers_from_configuration_alone():
    p = plan(TrainerConfig(), n_train_tasks=4, n_eval_tasks=10)
    assert (p["episodes"], p["submissions"], p["updates"], p["seed"]) == (64, 128, 16, 42)
    assert p["generated_tokens_max"] == 128 * 2048
    assert p["eval_submissions_max"] == 20


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"estimator": "ppo"}, "estimator='ppo'"),
        ({"group_size": 1}, "group_size=1"),
        ({"temperature": 0.0}, "temperature=0.0"),
        ({"lr_scheduler": "step"}, "lr_scheduler='step'"),
        ({"env_shape": "huge"}, "env_shape='huge'"),
        ({"loss_normalizer": 0}, "loss_normalizer=0"),
        ({"policy": {"revision": "main"}}, "not a 40-hex commit"),
        ({"policy": {"source": "s3"}}, "source='s3'"),
        ({"lora": {"r": 0}}, "r=0"),
        ({"policy": {"source": "tiny", "tiny": {"hidden_size": 30, "num_heads": 4}}}, "not divisible"),
        ({"credit": "step"}, "credit='step'"),
        ({"importance_sampling": "sequence"}, "importance_sampling='sequence'"),
        ({"importance_sampling_cap": 0.5}, "importance_sampling_cap=0.5"),
        ({"rollout_groups": 0}, "rollout_groups=0"),
        ({"rollout_groups": 2, "data_parallel": {"num_processes": 2}}, "single-process only"),
        ({"generation": {"backend": "sglang"}}, "backend='sglang'"),
        ({"generation": {"backend": "static_compiled", "merge_adapter": False}}, "needs merge_adapter=true"),
        ({"generation": {"length_bucket": 0}}, "length_bucket=0"),
    ],
)
def test_invalid_settings_name_the_value(kwargs, fragment):
    with pytest.raises(ValueError, match="invalid") as err:
        config_from_dict(TrainerConfig, kwargs)  # nested settings as mappings, as YAML or JSON gives them
    assert fragment in str(err.value)


def test_dicts_from_yaml_become_dataclasses_in_one_place():
    c = config_from_dict(TrainerConfig, {"policy": {"source": "tiny", "tiny": {"num_layers": 1}},
                                         "lora": {"target_modules": ["q_proj"]}})
    assert isinstance(c.policy, PolicyConfig) and isinstance(c.policy.tiny, TinyModelConfig)
    assert c.policy.tiny.num_layers == 1
    assert isinstance(c.lora, LoraSettings) and c.lora.target_modules == ("q_proj",)


def test_eval_attempts_cannot_exceed_the_turns_of_an_episode():
    # a cross-field invariant of the trainer's own config (it used to be checked only in flows/config.py)
    with pytest.raises(ValueError, match=r"invalid TrainerConfig: eval_attempts=3 > max_turns=2 \(an episode cannot "
                                         r"hold more attempts than turns; lower eval_attempts or raise max_turns"):
        TrainerConfig(eval_attempts=3)
    assert TrainerConfig(eval_attempts=3, max_turns=3).eval_attempts == 3


def test_local_and_tiny_sources_need_no_revision():
    PolicyConfig(source="local", model="/some/dir", revision=None)
    PolicyConfig(source="tiny", revision=None)
