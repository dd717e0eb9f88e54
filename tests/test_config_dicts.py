"""Dicts become configs in one place (kernelflow/config_dicts.py): the layers' dataclasses refuse a dict
for a nested config, and `config_from_dict` builds them from JSON/YAML mappings, naming the path of
whatever is wrong."""

import ast
from pathlib import Path

import pytest

from kernelflow.config_dicts import config_from_dict
from kernelflow.env.config import EnvServerConfig
from kernelflow.eval import EvalConfig, RayConfig, RewardConfig
from kernelflow.train.config import (
    DataParallelSettings,
    LoraSettings,
    PolicyConfig,
    SFTSettings,
    TinyModelConfig,
    TrainerConfig,
)
from kernelflow.train.decoding import GenerationSettings

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("cls", "field", "nested"), [
    (EvalConfig, "reward", RewardConfig),
    (EnvServerConfig, "eval", EvalConfig),
    (EnvServerConfig, "ray", RayConfig),
    (PolicyConfig, "tiny", TinyModelConfig),
    (PolicyConfig, "sft", SFTSettings),
    (TrainerConfig, "policy", PolicyConfig),
    (TrainerConfig, "lora", LoraSettings),
    (TrainerConfig, "data_parallel", DataParallelSettings),
    (TrainerConfig, "generation", GenerationSettings),
])
def test_a_dataclass_refuses_a_dict_for_a_nested_config(cls, field, nested):
    with pytest.raises(TypeError, match=rf"invalid {cls.__name__}: {field}=\{{\}} \(must be a {nested.__name__}; "
                                        rf"build from a mapping with kernelflow.config_dicts.config_from_dict"):
        cls(**{field: {}})
    built = config_from_dict(cls, {field: {}})  # the one way from a mapping: the nested default, rebuilt
    assert isinstance(getattr(built, field), nested)


def test_no_post_init_converts_dicts():
    # a regression guard: `isinstance(self.x, dict)` in a __post_init__ is the second path this module replaced
    offenders = []
    for path in [*sorted((ROOT / "kernelflow").rglob("*.py")), *sorted((ROOT / "flows").glob("*.py"))]:
        if "kernelbench" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "__post_init__":
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "isinstance"
                            and len(call.args) == 2 and getattr(call.args[1], "id", None) in ("dict", "Mapping")):
                        offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert offenders == []


def test_nested_mappings_tuples_and_a_partial_eval_keeps_the_served_defaults():
    c = config_from_dict(TrainerConfig, {"policy": {"source": "tiny", "tiny": {"num_layers": 1}},
                                         "lora": {"target_modules": ["q_proj"]}, "data_parallel": {"num_processes": 2}})
    assert c.policy.tiny.num_layers == 1 and c.lora.target_modules == ("q_proj",)
    assert c.data_parallel == DataParallelSettings(num_processes=2)
    server = EnvServerConfig.from_dict({"eval": {"shape": "full"}, "ray": {"num_actors": 2}})
    assert server.eval == EvalConfig.served(shape="full") and server.eval.prewarm_workers == "auto"
    assert server.ray == RayConfig(num_actors=2)
    assert EnvServerConfig.from_dict(server.to_dict(include_token=True)) == server  # the JSON round trip


def test_errors_name_the_path_the_class_and_the_known_keys():
    with pytest.raises(ValueError, match=r"trainer.policy.tiny: unknown key\(s\) \['layers'\] for TinyModelConfig; "
                                         r"known keys: \[.*'num_layers'"):
        config_from_dict(TrainerConfig, {"policy": {"tiny": {"layers": 1}}}, "trainer")
    with pytest.raises(ValueError, match=r"trainer.lora: invalid LoraSettings: r=0"):
        config_from_dict(TrainerConfig, {"lora": {"r": 0}}, "trainer")
    with pytest.raises(ValueError, match=r"eval: expected a mapping of EvalConfig fields, got list"):
        config_from_dict(EvalConfig, [], "eval")


def test_fixed_fields_are_set_by_the_caller():
    policy = PolicyConfig(source="tiny")
    c = config_from_dict(TrainerConfig, {"epochs": 1}, "trainer", policy=policy, max_turns=3)
    assert (c.policy, c.epochs, c.max_turns) == (policy, 1, 3)
