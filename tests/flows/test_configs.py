"""Every config option and preset composes into the layers' dataclasses; mistakes fail early and clearly.

Typos and wrong types must fail while Hydra composes (the schema), bad values before anything runs
(the layers' own checks), each naming the key. The schema mirrors the layers' dataclasses, so a field
added to a layer must appear in the schema (checked here), and the config hash must separate results
from placement (where a run executes or is tracked).
"""

from __future__ import annotations

import dataclasses

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from flows.config import (
    TRAINER_FIXED,
    EnvAccess,
    EnvNode,
    EvalNode,
    EvaluationNode,
    LoraNode,
    PolicyNode,
    TaskGroups,
    TasksNode,
    TrainerNode,
    from_parameters,
    to_container,
    to_experiment_config,
)
from flows.run_dir import config_hash, run_name
from flows.schema import ConfigError
from kernelflow.env.config import EnvServerConfig
from kernelflow.eval import EvalConfig
from kernelflow.train import LoraSettings, PolicyConfig, TrainerConfig
from kernelflow.train.evaluation import SampledEvalSettings
from tests.flows.conftest import CONF_DIR, compose_config

GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF_DIR / g).glob("*.yaml"))]
# An option that needs a value from the command line to be complete.
NEEDS = {("env", "remote"): ["env.url=http://127.0.0.1:9"]}


def experiment(*overrides: str):
    return to_experiment_config(compose_config(*overrides))


def test_every_group_has_options():
    assert set(GROUPS) == {"model", "lora", "trainer", "eval", "env", "tasks", "validation", "tracking", "experiment"}


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_option_composes(group, option):
    config = experiment(f"{group}={option}", *NEEDS.get((group, option), []))
    assert isinstance(config.trainer, TrainerConfig) and isinstance(config.eval, EvalConfig)
    assert isinstance(config.env.server, EnvServerConfig) and config.env.server.eval == config.eval
    # one home per value: the trainer's episode length and shape come from env and eval
    assert config.trainer.max_turns == config.env.server.max_turns
    assert config.trainer.env_shape == config.eval.shape


def test_smoke_is_the_default_and_runs_here():
    config = experiment()
    assert config.name == "smoke" and config.is_tiny
    assert config.model.device == "cpu" and config.eval.backend == "interpret" and config.eval.shape == "small"
    assert config.trainer.epochs == 1 and config.env.url is None
    assert len(config.tasks.all) == 10


def test_pilot_preset_is_the_published_protocol():
    c = experiment("experiment=pilot")
    assert (c.model.source, c.model.model) == ("hub", "Qwen/Qwen2.5-Coder-7B-Instruct")
    assert c.model.revision == "c03e6d358207e414f1eca0bb1891e29f1db0e242"
    assert (c.lora.r, c.lora.alpha) == (16, 32)
    t = c.trainer
    assert (t.estimator, t.epochs, t.group_size, t.temperature, t.max_new_tokens, t.seed) == ("dr_grpo", 4, 4, 0.8, 2048, 42)
    assert (c.env.server.max_turns, c.env.server.gamma) == (2, 0.4)
    assert (t.eval_attempts, c.validation.extra_seeds) == (2, 5)
    assert (c.eval.backend, c.eval.shape, c.eval.distribution) == ("cuda", "full", None)
    assert (c.eval.reward.correct_bonus, c.eval.reward.speed_weight) == (0.3, 2.7)
    assert c.tasks.train == ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh")
    assert c.tasks.heldout == ("23_Softmax", "24_LogSoftmax", "88_MinGPTNewGelu")
    assert c.tasks.kernelbench_revision == "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"


def test_a_typo_fails_at_compose_time_naming_the_key():
    with pytest.raises(ConfigCompositionException, match="trainer.epoch"):
        compose_config("trainer.epoch=3")
    with pytest.raises(ConfigCompositionException, match="learning_rat"):
        compose_config("experiment=pilot", "trainer.learning_rat=1e-4")


def test_a_wrong_type_fails_at_compose_time():
    with pytest.raises(ConfigCompositionException, match="trainer.epochs"):
        compose_config("trainer.epochs=four")
    with pytest.raises(ConfigCompositionException, match="lora.target_modules"):
        compose_config("lora.target_modules=q_proj")


def test_an_unknown_option_fails_at_compose_time():
    with pytest.raises(MissingConfigException, match="model/huge"):
        compose_config("model=huge")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lora.r=0", r"lora: invalid LoraSettings: r=0"),
        ("trainer.group_size=1", r"trainer: invalid TrainerConfig: group_size=1"),
        ("eval.backend=tpu", r"eval: invalid EvalConfig: backend='tpu'"),
        ("env.gamma=2.0", r"env: invalid EnvServerConfig: gamma=2.0"),
        ("tasks.train=[19_ReLU,nope]", r"tasks: invalid TaskGroups: train: unknown task id 'nope'"),
        ("tasks.reserved=[19_ReLU]", r"19_ReLU is in both train and reserved"),
        ("model.revision=main", r"model: invalid PolicyConfig: revision='main'"),
        ("trainer.eval_attempts=3", r"trainer: invalid TrainerConfig: eval_attempts=3 > max_turns=2 .*env.max_turns"),
        ("env.url=gpu-host:8000", r"env.url='gpu-host:8000' is not a URL"),
        ("validation.extra_seeds=-1", r"extra_seeds=-1"),
        ("tasks.kernelbench_revision=main", r"the installed task suite is KernelBench 423217d"),
        ("tasks.families=[reductions]", r"tasks: invalid TaskGroups: families: unknown name 'reductions'"),
        ("tasks.train=[19_ReLU,89_cumsum]", r"train: unknown task id '89_cumsum' \(a family task belongs in `families`"),
        ("evaluation.samples=-1", r"evaluation: invalid SampledEvalSettings: samples=-1"),
        ("evaluation.temperature=0", r"evaluation: invalid SampledEvalSettings: temperature=0"),
        ("evaluation.attempts=3", r"evaluation.attempts=3 > env.max_turns=2"),
    ],
)
def test_a_bad_value_fails_before_anything_runs(override, message):
    base = ["experiment=pilot"] if override.startswith("model.revision") else []
    with pytest.raises(ConfigError, match=message):
        experiment(*base, override)


def test_the_dataclasses_check_their_cross_field_invariants_themselves():
    # not only to_experiment_config: a config built any other way is checked the same
    server = EnvServerConfig()
    with pytest.raises(ConfigError, match=r"env.url='gpu-host:8000' is not a URL; give e.g. http://gpu-host:8000"):
        EnvAccess(server=server, url="gpu-host:8000")
    with pytest.raises(ConfigError, match=r"env.startup_timeout_s=0 \(must be > 0\)"):
        EnvAccess(server=server, startup_timeout_s=0)
    config = experiment()
    with pytest.raises(ConfigError, match=r"evaluation.attempts=3 > env.max_turns=2: .*lower evaluation.attempts"):
        dataclasses.replace(config, evaluation=SampledEvalSettings(samples=2, attempts=3))
    three = EnvAccess(server=dataclasses.replace(config.env.server, max_turns=3))
    with pytest.raises(ConfigError, match=r"trainer.max_turns=2 != env.max_turns=3"):
        dataclasses.replace(config, env=three)
    with pytest.raises(ConfigError, match=r"name is empty: name the experiment"):
        dataclasses.replace(config, name="")


def test_families_train_on_the_pilot_group_and_evaluate_every_family_task():
    from kernelflow.tasks import FAMILY_TASKS, family_task_ids, task_ids

    config = experiment("tasks=families")
    pilot = experiment()
    t = config.tasks
    assert (t.train, t.reserved, t.heldout) == (pilot.tasks.train, pilot.tasks.reserved, pilot.tasks.heldout)
    assert t.train == tuple(task_ids("train"))
    # resolved in code from the suite, so a task added there joins without a YAML edit
    assert t.families == tuple(family_task_ids()) and set(t.families) == set(FAMILY_TASKS)
    assert list(t.groups) == ["train", "reserved", "heldout", "families"]
    assert t.all == pilot.tasks.all + t.families and t.group_of(t.families[0]) == "families"
    assert set(t.roles) == set(t.groups) and "trained on" in t.roles["train"]
    assert all("evaluated only" in t.roles[g] for g in ("heldout", "families"))
    # the resolved ids are what the flow's parameters carry, so a resumed run rebuilds the same groups
    assert from_parameters(to_container(config)).tasks == t
    assert config_hash(config) != config_hash(pilot)
    assert "families" not in pilot.tasks.groups and pilot.tasks.families == ()
    # a family group name or single ids select fewer
    norm = experiment("tasks=families", "tasks.families=[normalization,89_cumsum]").tasks.families
    assert norm == (*family_task_ids("normalization"), "89_cumsum")


def test_sampled_evaluation_settings():
    assert not experiment().evaluation.enabled and not experiment("experiment=pilot").evaluation.enabled
    s = experiment("evaluation.samples=8", "evaluation.temperature=1.0", "evaluation.attempts=1").evaluation
    assert (s.samples, s.temperature, s.attempts, s.enabled) == (8, 1.0, 1, True)
    assert config_hash(experiment("evaluation.samples=8")) != config_hash(experiment())
    with pytest.raises(ConfigCompositionException, match="evaluation.samples"):
        compose_config("evaluation.samples=many")


def test_remote_env_needs_a_url():
    with pytest.raises(ConfigError, match=r"env.url has no value"):
        experiment("env=remote")


@pytest.mark.parametrize(
    ("node", "cls", "exclude"),
    [(PolicyNode, PolicyConfig, ()), (LoraNode, LoraSettings, ()), (EvalNode, EvalConfig, ()),
     (TrainerNode, TrainerConfig, TRAINER_FIXED), (EnvNode, EnvServerConfig, ("eval",)),
     (EvaluationNode, SampledEvalSettings, ()), (TasksNode, TaskGroups, ())],
)
def test_the_schema_mirrors_every_layer_field(node, cls, exclude):
    layer = {f.name for f in dataclasses.fields(cls)} - set(exclude)
    schema = {f.name for f in dataclasses.fields(node)} - {"url", "startup_timeout_s"}
    assert schema == layer


def test_flow_parameters_round_trip_and_hide_the_token(monkeypatch):
    token = "t" * 32
    config = experiment("env=remote", "env.url=http://127.0.0.1:9", f"env.token={token}")
    params = to_container(config)
    assert params["env"]["token"] == "<redacted>" and token not in repr(params)
    monkeypatch.setenv("KERNELFLOW_ENV_TOKEN", token)
    assert from_parameters(params) == config


def test_the_run_is_named_by_config_hash_not_by_placement():
    base = experiment()
    assert run_name(base) == f"smoke-{config_hash(base)[:12]}"
    same = [experiment("tracking.runs_root=/elsewhere"), experiment("env=remote", "env.url=http://h:1"),
            experiment("eval.max_workers=1"), experiment("tracking=server")]
    assert {config_hash(c) for c in same} == {config_hash(base)}
    different = [experiment("trainer.seed=1"), experiment("eval.seeds=2"), experiment("lora.r=8")]
    assert len({config_hash(c) for c in different} | {config_hash(base)}) == 4


def test_top_level_seed_sets_the_trainer_seed_for_multirun_sweeps():
    """`python -m flows.experiment -m seed=42,43,44` must give one run per seed."""
    seeded = experiment("seed=43")
    assert seeded.trainer.seed == 43
    assert config_hash(seeded) == config_hash(experiment("trainer.seed=43"))
    assert config_hash(seeded) != config_hash(experiment("seed=44"))


def test_issue_18_trainer_keys_compose_and_fail_by_name():
    """credit, importance sampling and the generation path are trainer keys with the pilot's defaults."""
    t = experiment("experiment=pilot").trainer
    assert (t.credit, t.importance_sampling, t.generation.backend, t.generation.merge_adapter) == (
        "episode", "off", "eager", True)
    t = experiment("trainer.credit=turn", "trainer.importance_sampling=token_truncate",
                   "trainer.generation.backend=static_compiled", "trainer.generation.max_context=6144").trainer
    assert (t.credit, t.importance_sampling, t.generation.backend, t.generation.max_context) == (
        "turn", "token_truncate", "static_compiled", 6144)
    with pytest.raises(ConfigError, match="credit='step'"):
        experiment("trainer.credit=step")
    with pytest.raises(ConfigError, match="needs merge_adapter=true"):
        experiment("trainer.generation.backend=static_compiled", "trainer.generation.merge_adapter=false")


@pytest.mark.parametrize("option", ["interpret", "gpu"])
def test_eval_speed_defaults_come_from_their_one_home(option):
    """Issue #19: the conf's speed settings are SERVE_DEFAULTS over EvalConfig's defaults (the values
    `kernelflow serve` and `kernelflow eval` use), not literals repeated in conf/eval/*.yaml."""
    import yaml

    from kernelflow.eval.config import SERVE_DEFAULTS

    config = experiment(f"eval={option}")
    served = EvalConfig.served()
    for key in ("prewarm_workers", "max_workers", "gpu_lock"):
        assert getattr(config.eval, key) == getattr(served, key), key
    assert config.eval.prewarm_workers == SERVE_DEFAULTS["prewarm_workers"] == "auto"
    assert config.env.server.eval == config.eval  # the embedded server judges with the same
    text = yaml.safe_load((CONF_DIR / "eval" / f"{option}.yaml").read_text())
    assert not {"prewarm_workers", "max_workers", "gpu_lock"} & set(text)
    assert experiment(f"eval={option}", "eval.prewarm_workers=0").eval.prewarm_workers == 0
