"""The experiment's typed config: one schema composed from the layers' dataclasses, registered with Hydra.

`conf/config.yaml` lists the schema `experiment_schema` first in its defaults, so every YAML file and
CLI override merges onto typed nodes: an unknown key or a value of the wrong type fails while Hydra
composes. `to_experiment_config(cfg)` then builds the layers' own dataclasses, whose `__post_init__`
checks run before anything starts. Library code receives those dataclasses, never a DictConfig.

Groups and what they become:

    model      -> kernelflow.train.PolicyConfig        which causal LM, dtype, device
    lora       -> kernelflow.train.LoraSettings
    trainer    -> kernelflow.train.TrainerConfig       (policy, lora, max_turns and env_shape are filled in here)
    eval       -> kernelflow.eval.EvalConfig           how a submission is judged, incl. the reward constants
    env        -> EnvAccess: embedded server settings (kernelflow.env.EnvServerConfig) or a remote url + token
    tasks      -> TaskGroups                           train / reserved / held-out (+ families) task ids, by role
    evaluation -> kernelflow.train.SampledEvalSettings sampled evaluation (n per task at temperature T); off by default
    validation -> ValidationConfig                     extra-seed re-judging of solved tasks
    tracking   -> TrackingConfig                       MLflow store and where runs live

One value has one home: the episode length is `env.max_turns` (the trainer's must equal the server's)
and the shape profile is `eval.shape` (the trainer resets episodes at it).

This module holds `ExperimentConfig` (with the invariants across layers), the schema and the way
between a composed config and the dataclasses (`to_experiment_config`, `to_container`,
`from_parameters`, `flatten`). The sub-configs the flows layer owns (`TaskGroups`, `EnvAccess`,
`ValidationConfig`, `TrackingConfig`) live in sub_configs.py and are re-exported here, so
`flows.config` stays the one place to import the experiment's configs from. This module does not run
anything, hash runs (`run_dir.py`) or print plans (`plan.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from flows.schema import ConfigError, build, mirror
from flows.sub_configs import ALL_FAMILIES, ROLES, EnvAccess, TaskGroups, TrackingConfig, ValidationConfig
from kernelflow.env.config import EnvServerConfig
from kernelflow.eval import EvalConfig
from kernelflow.eval.config import SERVE_DEFAULTS
from kernelflow.train import LoraSettings, PolicyConfig, SampledEvalSettings, TrainerConfig

# The names this module defines and those it re-exports from sub_configs.py, so that
# `from flows.config import TaskGroups` (and the rest) keeps working after the split.
__all__ = [
    "ALL_FAMILIES", "REDACTED", "ROLES", "SCHEMA_NAME", "TRAINER_FIXED", "EnvAccess", "EnvNode", "EvalNode",
    "EvaluationNode", "ExperimentConfig", "ExperimentSchema", "LoraNode", "PolicyNode", "TaskGroups", "TasksNode",
    "TrackingConfig", "TrackingNode", "TrainerNode", "ValidationConfig", "ValidationNode", "flatten", "from_parameters",
    "register", "to_container", "to_experiment_config",
]

SCHEMA_NAME = "experiment_schema"
# Trainer fields that are not set in the trainer group: the policy and adapter have their own
# groups, the episode length belongs to the environment and the shape profile to the evaluator.
TRAINER_FIXED = ("policy", "lora", "max_turns", "env_shape")
REDACTED = "<redacted>"


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything one experiment needs, as the layers' own dataclasses."""

    name: str
    trainer: TrainerConfig  # holds the policy (model group) and the adapter (lora group)
    eval: EvalConfig
    env: EnvAccess
    tasks: TaskGroups
    validation: ValidationConfig
    tracking: TrackingConfig
    dry_run: bool = False
    evaluation: SampledEvalSettings = field(default_factory=SampledEvalSettings)

    def __post_init__(self) -> None:
        """The invariants across layers (each layer's own are in its dataclass): errors name both values."""
        p = []
        if not self.name:
            p.append("name is empty: name the experiment (it names the run directory)")
        turns = self.env.server.max_turns
        if self.trainer.max_turns != turns:
            p.append(f"trainer.max_turns={self.trainer.max_turns} != env.max_turns={turns} (the trainer's episodes "
                     "are the server's; build the trainer with max_turns=env.max_turns, as to_experiment_config does)")
        if self.trainer.env_shape != self.eval.shape:
            p.append(f"trainer.env_shape={self.trainer.env_shape!r} != eval.shape={self.eval.shape!r} (set eval.shape; "
                     "the trainer takes it)")
        if self.evaluation.attempts is not None and self.evaluation.attempts > turns:
            p.append(f"evaluation.attempts={self.evaluation.attempts} > env.max_turns={turns}: an episode cannot hold "
                     "more attempts than turns; lower evaluation.attempts (or null for trainer.eval_attempts)")
        if p:
            raise ConfigError("; ".join(p))

    @property
    def model(self) -> PolicyConfig:
        return self.trainer.policy

    @property
    def lora(self) -> LoraSettings:
        return self.trainer.lora

    @property
    def is_tiny(self) -> bool:
        """A policy built here, not a real model (the tiny random one, or the synthetic SFT policy of the
        smoke and learnability presets): its numbers say nothing about any real model."""
        return self.model.source in ("tiny", "sft")

    @property
    def policy_note(self) -> str | None:
        """What a policy built here is, for the log, the plan and the report; None for a real model."""
        from flows.analysis.render import policy_note  # the note's one wording, shared with report and comparison

        return policy_note(self.model.source)


# env.url has no default in the schema: every env option says it (embedded: null), and env=remote
# leaves it for the command line, so forgetting it fails as a missing value, not as "embedded".
_ENV_EXTRA = (("url", Optional[str], MISSING), ("startup_timeout_s", float, 120.0))  # noqa: UP045
# The schema's node types (the layers' dataclasses mirrored as mutable, OmegaConf-typed nodes).
PolicyNode = mirror(PolicyConfig)
LoraNode = mirror(LoraSettings)
TrainerNode = mirror(TrainerConfig, exclude=TRAINER_FIXED)
# The eval group's defaults are the served ones (SERVE_DEFAULTS, the one home shared with `kernelflow serve`
# and `kernelflow eval`): conf/eval/*.yaml do not repeat them. The flow's evaluator is its environment server.
EvalNode = mirror(EvalConfig, defaults=tuple(SERVE_DEFAULTS.items()))
EnvNode = mirror(EnvServerConfig, exclude=("eval",), extra=_ENV_EXTRA)
TasksNode = mirror(TaskGroups)
ValidationNode = mirror(ValidationConfig)
TrackingNode = mirror(TrackingConfig)
EvaluationNode = mirror(SampledEvalSettings)


@dataclass
class ExperimentSchema:
    """The Hydra schema (`experiment_schema`): the groups' typed nodes plus the top-level keys."""

    name: str = "experiment"  # names the run directory (with the config hash) and the MLflow run
    dry_run: bool = False  # print the plan (stages, counts, token budget) and exit without loading a model
    seed: int | None = None  # when set, the experiment's seed (overrides trainer.seed): `-m seed=42,43,44`
    model: PolicyNode = field(default_factory=PolicyNode)
    lora: LoraNode = field(default_factory=LoraNode)
    trainer: TrainerNode = field(default_factory=TrainerNode)
    eval: EvalNode = field(default_factory=EvalNode)
    env: EnvNode = field(default_factory=EnvNode)
    tasks: TasksNode = field(default_factory=TasksNode)
    validation: ValidationNode = field(default_factory=ValidationNode)
    tracking: TrackingNode = field(default_factory=TrackingNode)
    # Sampled evaluation after each greedy one (stages baseline_sampled / trained_sampled); samples: 0 = off.
    evaluation: EvaluationNode = field(default_factory=EvaluationNode)


def register() -> None:
    """Store the schema in Hydra's ConfigStore (idempotent); `conf/config.yaml` lists it first."""
    ConfigStore.instance().store(name=SCHEMA_NAME, node=ExperimentSchema)


def to_experiment_config(cfg: DictConfig | dict) -> ExperimentConfig:
    """The typed experiment from a composed config (or its resolved container). Raises ConfigError."""
    if isinstance(cfg, DictConfig):
        try:
            data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as exc:
            key = exc.full_key or "a key"
            raise ConfigError(f"{key} has no value; set it on the command line ({key}=...)") from None
        except OmegaConfBaseException as exc:  # e.g. an interpolation that does not resolve
            raise ConfigError(f"cannot resolve the config: {exc}") from None
    else:
        data = dict(cfg)
    known = {f.name for f in dataclasses.fields(ExperimentSchema)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown}; known keys: {sorted(known)}")
    policy = build(PolicyConfig, data.get("model", {}), "model")
    lora = build(LoraSettings, data.get("lora", {}), "lora")
    evaluation = build(EvalConfig, data.get("eval", {}), "eval")
    env = dict(data.get("env", {}))
    url, startup = env.pop("url", None), env.pop("startup_timeout_s", 120.0)
    server = build(EnvServerConfig, env, "env", eval=evaluation)
    trainer_data = dict(data.get("trainer", {}))
    if data.get("seed") is not None:
        trainer_data["seed"] = data["seed"]
    trainer = build(
        TrainerConfig, trainer_data, "trainer",
        policy=policy, lora=lora, max_turns=server.max_turns, env_shape=evaluation.shape,
    )
    # Each dataclass checks its own invariants (a trainer's eval_attempts against its max_turns, env.url, ...),
    # ExperimentConfig those across layers; nothing is checked here beyond the container's own shape.
    return ExperimentConfig(
        name=str(data.get("name") or ""),
        trainer=trainer,
        eval=evaluation,
        env=EnvAccess(server=server, url=url,
                      startup_timeout_s=float(startup) if isinstance(startup, (int, float)) else startup),
        tasks=build(TaskGroups, data.get("tasks", {}), "tasks"),
        validation=build(ValidationConfig, data.get("validation", {}), "validation"),
        tracking=build(TrackingConfig, data.get("tracking", {}), "tracking"),
        dry_run=bool(data.get("dry_run", False)),
        evaluation=build(SampledEvalSettings, data.get("evaluation", {}), "evaluation"),
    )


def from_parameters(container: dict[str, Any]) -> ExperimentConfig:
    """The config from `to_container` output (a flow's parameters): a redacted token is read from
    $KERNELFLOW_ENV_TOKEN, where the entry point put it, so it never reaches Prefect's database."""
    data = copy.deepcopy(dict(container))
    env = data.get("env") or {}
    if env.get("token") == REDACTED:
        from kernelflow.env.models import TOKEN_ENV_VAR  # lazily: openenv is slow to import (see the module docstring)

        env["token"] = os.environ.get(TOKEN_ENV_VAR)
    return to_experiment_config(data)


def to_container(config: ExperimentConfig, redact: bool = True) -> dict[str, Any]:
    """The resolved config as nested dicts in the YAML layout (the env token redacted unless asked)."""
    trainer = dataclasses.asdict(config.trainer)
    for key in TRAINER_FIXED:
        trainer.pop(key)
    env = config.env.server.to_dict(include_token=True)
    env.pop("eval")
    if redact and env.get("token") is not None:
        env["token"] = REDACTED
    env.update(url=config.env.url, startup_timeout_s=config.env.startup_timeout_s)
    out = {
        "name": config.name,
        "dry_run": config.dry_run,
        "model": dataclasses.asdict(config.model),
        "lora": dataclasses.asdict(config.lora),
        "trainer": trainer,
        "eval": dataclasses.asdict(config.eval),
        "env": env,
        "tasks": dataclasses.asdict(config.tasks),
        "validation": dataclasses.asdict(config.validation),
        "tracking": dataclasses.asdict(config.tracking),
        "evaluation": dataclasses.asdict(config.evaluation),
    }
    return _lists(out)


def _lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def flatten(container: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}` (lists stay values): the MLflow params."""
    out: dict[str, Any] = {}
    for key, value in container.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out
