"""The seed comparison's input: every seed's parent run of one MLflow experiment, read back, and its numbers.

Every parent run of the experiment (one per seed, e.g. from `python -m flows.experiment -m
seed=42,43,44 tracking.experiment=NAME`) has nested runs of both greedy evaluations that carry
per-task metrics, read back as `baseline_eval/<task>/<key>` and `trained_eval/<task>/<key>` (keys:
`results.OUTCOME_KEYS`, logged by `stages.eval_stage` through `Tracker.log_stage_metrics`; runs logged
before that carry the same names on the parent), of the sampled evaluations when the run made them
(`baseline_sampled/<task>/samples`, `samples_correct`, ...: `results.SAMPLE_KEYS`, logged by
`stages.sampled_eval_stage`), and its config as params (`tasks.train`, ..., `tasks.families`,
`trainer.seed`).

`load_runs` reads them (`SeedRun`), `task_groups` and `config_differences` read the runs' params,
`per_seed` turns each run into one value per metric (the unit the bootstrap resamples) and `summarise`
gives every metric's before, after and paired difference with its interval (`flows/analysis/statistics.py`).
This module reads MLflow and computes; it writes nothing (`flows/analysis/comparison.py` renders the
numbers, `flows/compare.py` is the command).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flows.analysis import statistics
from flows.analysis.results import FAST_P, OUTCOME_KEYS, SAMPLE_KEYS, sampled_rates
from flows.stage_names import BASELINE_EVAL, GREEDY_EVALS, RUN_TAG, SAMPLED_STAGES, STAGE_TAG, TRAINED_EVAL

STAGES = GREEDY_EVALS
GROUPS = ("train", "reserved", "heldout")
OPTIONAL_GROUPS = ("families",)  # read when a run's params name tasks in them
COMPILE_KEY = "speedup_vs_compile"  # per task, when the evaluator timed torch.compile (not yet: issue 9)
SEED_PARAM = "trainer.seed"
SUCCESS = (("turn1_correct", "first attempt"), ("turn2_correct", "by 2nd attempt"))


@dataclass
class SeedRun:
    """One parent run as read back: its seed, params and latest metric values."""

    run_id: str
    name: str
    status: str
    seed: int | None
    params: dict[str, str]
    metrics: dict[str, float]

    def outcomes(self, stage: str, tasks: Sequence[str]) -> dict[str, dict[str, float | None]]:
        """Per task the stage's logged numbers (None where the run has no such metric, or logged NaN)."""
        out = {}
        for tid in tasks:
            row: dict[str, float | None] = {}
            keys = [(stage, k) for k in (*OUTCOME_KEYS, COMPILE_KEY)] + [(SAMPLED_STAGES[stage], k) for k in SAMPLE_KEYS]
            for prefix, key in keys:
                v = self.metrics.get(f"{prefix}/{tid}/{key}")
                row[key] = None if v is None or math.isnan(v) else float(v)
            out[tid] = row
        return out

    def has_stage(self, stage: str) -> bool:
        return any(k.startswith(f"{stage}/") and k.endswith("/turn2_correct") for k in self.metrics)




def load_runs(experiment: str, tracking_uri: str, name: str | None = None) -> list[SeedRun]:
    """Every parent run of `experiment` (optionally only those whose param `name` equals `name`), by seed."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        known = sorted(e.name for e in client.search_experiments())
        raise LookupError(f"no MLflow experiment {experiment!r} in {tracking_uri} (known: {', '.join(known) or 'none'})")
    runs: list[SeedRun] = []
    # Per-task values live on the evaluation stages' nested runs (`19_ReLU/turn2_correct`; the parent
    # holds only the summaries, see Tracker.log_stage_metrics); runs logged before that also carry them
    # on the parent (`baseline_eval/19_ReLU/turn2_correct`). Both are read, the parent's value first.
    stage_metrics: dict[str, dict[str, float]] = {}
    read_stages = (*STAGES, *(SAMPLED_STAGES[s] for s in STAGES))
    token = None
    while True:
        page = client.search_runs([exp.experiment_id], run_view_type=ViewType.ACTIVE_ONLY, max_results=1000,
                                  page_token=token)
        for r in page:
            tags = r.data.tags
            if tags.get(STAGE_TAG) in read_stages and "mlflow.parentRunId" in tags:
                into = stage_metrics.setdefault(tags["mlflow.parentRunId"], {})
                into.update({f"{tags[STAGE_TAG]}/{k}": v for k, v in r.data.metrics.items()})
            if "mlflow.parentRunId" in tags or RUN_TAG not in tags:  # stage runs, or runs not made by the flow
                continue
            if name is not None and r.data.params.get("name") != name:
                continue
            seed = r.data.params.get(SEED_PARAM)
            runs.append(SeedRun(r.info.run_id, r.info.run_name or tags.get(RUN_TAG, ""), r.info.status,
                                int(seed) if seed is not None else None, dict(r.data.params), dict(r.data.metrics)))
        token = page.token
        if not token:
            break
    for run in runs:
        run.metrics = {**stage_metrics.get(run.run_id, {}), **run.metrics}
    runs.sort(key=lambda s: (s.seed is None, s.seed if s.seed is not None else 0, s.name))
    return runs


def task_groups(runs: Sequence[SeedRun]) -> dict[str, tuple[str, ...]]:
    """Task ids by group from the runs' params (the first run that has them); else every task in the metrics."""
    for run in runs:
        if all(f"tasks.{g}" in run.params for g in GROUPS):
            groups = {g: tuple(ast.literal_eval(run.params[f"tasks.{g}"])) for g in GROUPS}
            for g in OPTIONAL_GROUPS:
                ids = tuple(ast.literal_eval(run.params.get(f"tasks.{g}", "[]")))
                if ids:
                    groups[g] = ids
            return groups
    tasks = sorted({k.split("/")[1] for r in runs for k in r.metrics
                    if k.startswith(STAGES) and k.endswith("/turn2_correct") and k.count("/") == 2})
    return {"all": tuple(tasks)}


def config_differences(runs: Sequence[SeedRun]) -> list[str]:
    """Params (other than the seed) whose values differ between runs: a comparison across them mixes configs."""
    keys = sorted({k for r in runs for k in r.params} - {SEED_PARAM})
    return [k for k in keys if len({r.params.get(k) for r in runs}) > 1]


def _mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def per_seed(runs: Sequence[SeedRun], groups: Mapping[str, Sequence[str]]) -> dict[str, dict[str, list[float | None]]]:
    """stage -> metric -> one value per run (None where a run lacks it): the units the bootstrap resamples."""
    tasks = [t for ids in groups.values() for t in ids]
    out: dict[str, dict[str, list[float | None]]] = {}
    # Only correct kernels carry a speedup, so a run counts as timing torch.compile when either of its
    # evaluations logged any `speedup_vs_compile`; fast_p against compile is None for the other runs.
    compile_timed = {r.run_id: any(k.endswith(f"/{COMPILE_KEY}") and not math.isnan(v) for k, v in r.metrics.items())
                     for r in runs}
    for stage in STAGES:
        rows: list[dict[str, float | None]] = []
        for run in runs:
            row: dict[str, float | None] = {}
            outs = run.outcomes(stage, tasks)
            for tid, o in outs.items():
                for key, _ in SUCCESS:
                    row[f"task/{tid}/{key}"] = o[key]
            for group, ids in {**groups, "overall": tuple(tasks)}.items():
                for key, _ in SUCCESS:
                    row[f"group/{group}/{key}"] = _mean([outs[t][key] for t in ids])
            present = [o for o in outs.values() if o["turn2_correct"] is not None]
            compiled = compile_timed[run.run_id]
            for p in FAST_P:
                row[f"fast_{p:g}/eager"] = statistics.fast_p(present, p, "speedup_vs_eager")
                row[f"fast_{p:g}/compile"] = statistics.fast_p(present, p, COMPILE_KEY) if compiled else None
            row["roofline_fraction"] = _mean([o["roofline_fraction"] for o in present if o["turn2_correct"]])
            for group, ids in {**groups, "overall": tuple(tasks)}.items():
                for key, value in sampled_rates(outs, ids).items():  # pass_at_<k>, avg_at_n (and /by_2nd)
                    row[f"sampled/{group}/{key}"] = value
            rows.append(row)
        keys = sorted({k for row in rows for k in row})
        out[stage] = {k: [row.get(k) for row in rows] for k in keys}  # a run without a metric: None
    return out


def summarise(series: Mapping[str, Mapping[str, list[float | None]]], resamples: int, level: float,
              seed: int) -> dict[str, dict[str, Any]]:
    """metric -> before/after/difference intervals (paired by seed) and the per-seed values."""
    out: dict[str, dict[str, Any]] = {}
    keys = sorted(set(series[BASELINE_EVAL]) | set(series[TRAINED_EVAL]))
    for key in keys:
        b = series[BASELINE_EVAL].get(key, [])
        a = series[TRAINED_EVAL].get(key, [])
        b, a = (b or [None] * len(a)), (a or [None] * len(b))  # a metric only one stage has: None on the other
        out[key] = {
            "before": statistics.bootstrap_mean(b, resamples, level, seed).to_dict(),
            "after": statistics.bootstrap_mean(a, resamples, level, seed).to_dict(),
            "difference": statistics.bootstrap_difference(b, a, True, resamples, level, seed).to_dict(),
            "per_seed": {"before": b, "after": a},
        }
    return out
