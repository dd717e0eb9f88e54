"""The stage table: which stages an experiment runs, in which order, and when each runs.

    provenance -> policy -> baseline_eval [-> baseline_sampled] -> epoch-1 .. epoch-N -> trained_eval
        [-> trained_sampled] [-> seed_validation] -> report

`STAGES` is the one place the order is written. Each row names a stage, the Prefect task that runs it
(stages.py), the condition under which the experiment has it (`when`: sampled evaluations only with
`evaluation.samples > 0`, seed validation only with extra seeds) and, for the epoch, how many times it
repeats (`repeat`: `trainer.epochs`; its runs are named `epoch-1` ..). `stage_runs(config)` expands the
table for one config; the flow (experiment.py) runs exactly those, and the dry-run plan (plan.py) and
the "is the run complete" check list exactly their names, so a row added or removed here changes all
three. The table is read when called (not copied at import), so a test may replace it.

This module holds no stage's work (stages.py) and no names' spelling (stage_names.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flows import stage_names as names
from flows.config import ExperimentConfig
from flows.stages import (
    epoch_stage,
    eval_stage,
    policy_stage,
    provenance_stage,
    report_stage,
    sampled_eval_stage,
    validation_stage,
)


def always(config: ExperimentConfig) -> bool:
    return True


def sampled(config: ExperimentConfig) -> bool:
    return config.evaluation.enabled


def validated(config: ExperimentConfig) -> bool:
    return bool(config.validation.extra_seeds)


def epochs(config: ExperimentConfig) -> int:
    return config.trainer.epochs


@dataclass(frozen=True)
class StageRun:
    """One stage of one experiment: `run(ctx)` calls its task as `task(ctx, *args)`."""

    name: str
    task: Callable[..., Any]
    args: tuple = ()

    def run(self, ctx: Any) -> Any:
        return self.task(ctx, *self.args)


@dataclass(frozen=True)
class Stage:
    """A row of the table: `task(ctx, *args)` runs it when `when(config)`; `repeat(config)` times if set,
    the k-th run named `<name>-<k>` and given k as its last argument."""

    name: str
    task: Callable[..., Any]
    when: Callable[[ExperimentConfig], bool] = always
    args: tuple = ()
    repeat: Callable[[ExperimentConfig], int] | None = None

    def runs(self, config: ExperimentConfig) -> list[StageRun]:
        if not self.when(config):
            return []
        if self.repeat is None:
            return [StageRun(self.name, self.task, self.args)]
        return [StageRun(f"{self.name}-{k}", self.task, (*self.args, k)) for k in range(1, self.repeat(config) + 1)]


STAGES: tuple[Stage, ...] = (
    Stage(names.PROVENANCE, provenance_stage),
    Stage(names.POLICY, policy_stage),
    Stage(names.BASELINE_EVAL, eval_stage, args=(names.BASELINE_EVAL,)),
    Stage(names.BASELINE_SAMPLED, sampled_eval_stage, when=sampled, args=(names.BASELINE_SAMPLED,)),
    Stage(names.EPOCH_PREFIX.rstrip("-"), epoch_stage, repeat=epochs),
    Stage(names.TRAINED_EVAL, eval_stage, args=(names.TRAINED_EVAL,)),
    Stage(names.TRAINED_SAMPLED, sampled_eval_stage, when=sampled, args=(names.TRAINED_SAMPLED,)),
    Stage(names.SEED_VALIDATION, validation_stage, when=validated),
    Stage(names.REPORT, report_stage),
)


def stage_runs(config: ExperimentConfig) -> list[StageRun]:
    """The stages `config`'s experiment runs, in order (from the table as it is now)."""
    return [r for stage in STAGES for r in stage.runs(config)]


def stage_names(config: ExperimentConfig) -> list[str]:
    return [r.name for r in stage_runs(config)]
