"""Per-task outcomes of a greedy evaluation and their summaries: the numbers metrics and reports share.

An evaluation stage stores one record per task (`TaskEvalResult.to_dict()`: the task's turns, each
with the environment's verdict) and reads them back with `TaskEvalResult.from_dict`. Every function
here takes the typed results; `task_outcome(result, attempts)` reduces one to the reported numbers,
for an episode of any number of attempts (`trainer.eval_attempts`, at most `max_turns`):

    turn<k>_correct    correct by attempt k, for k = 1 .. attempts (turn1_correct: the first, greedy
                       attempt; the two-attempt protocol logs turn1_correct and turn2_correct)
    reward             the best turn's reward (the environment's, never recomputed)
    runtime_ms, roofline_fraction, speedup_vs_eager    of the first correct turn (None if none, or untimed)

and `first` / `correct` (`TaskEvalResult.first_correct` / `.correct`: correct at the first attempt, at
any attempt), which `group_counts` counts into the pilot's table cells. `fast_p` is KernelBench's
fast_p: the fraction of tasks that are correct with a speedup over eager PyTorch above p (fast_0 is
the correct fraction; an untimed correct kernel counts for p = 0 only).

A sampled evaluation stores one record per task with its n episodes (`SampledTaskResult.to_dict()`);
`sample_outcome(result)` reduces one to (`SAMPLE_KEYS`):

    samples                n, the task's sampled episodes
    samples_correct        c, episodes whose first attempt is correct (single-shot pass@k reads these)
    samples_turn2_correct  episodes correct at some attempt (`SampledTaskResult.correct`: by the second in
                           the two-attempt protocol, whose name the metric keeps; by the last in general)
    samples_reward_mean    the mean over episodes of each episode's best reward

and `sample_summary_metrics` gives per group (and overall) the mean over tasks of the unbiased pass@k
for k = 1, 2, 4, ... up to n (`pass_ks`) and avg@n = c / n, first attempt and by the last
(`flows/analysis/statistics.py` computes them). Pure functions; nothing is logged or read from disk here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flows.analysis import statistics

if TYPE_CHECKING:
    from kernelflow.train.evaluation import SampledTaskResult, TaskEvalResult

FAST_P = (0.0, 1.0, 1.2)
NUMBER_KEYS = ("reward", "runtime_ms", "roofline_fraction", "speedup_vs_eager")
DEFAULT_ATTEMPTS = 2  # the pilot's protocol (trainer.eval_attempts' default)
SAMPLE_KEYS = ("samples", "samples_correct", "samples_turn2_correct", "samples_reward_mean")
# pass@k from the first attempt's count, and from the count by the last attempt (suffix "/by_2nd")
SAMPLE_COUNTS = (("samples_correct", ""), ("samples_turn2_correct", "/by_2nd"))


def outcome_keys(attempts: int = DEFAULT_ATTEMPTS) -> tuple[str, ...]:
    """The per-task metric keys of an evaluation with `attempts` attempts per task."""
    return (*(f"turn{k}_correct" for k in range(1, attempts + 1)), *NUMBER_KEYS)


OUTCOME_KEYS = outcome_keys()  # the two-attempt protocol's keys (what the seed comparison reads, flows/analysis/seed_runs.py)


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def by_attempt(attempts: int) -> str:
    """How a count of tasks correct at any of `attempts` attempts reads: "by the 2nd attempt"."""
    return "at the first attempt" if attempts == 1 else f"by the {ordinal(attempts)} attempt"


def task_outcome(result: TaskEvalResult, attempts: int = DEFAULT_ATTEMPTS) -> dict[str, Any]:
    """The reported numbers of one task's greedy evaluation (see the module docstring)."""
    solved = result.first_correct_turn
    verdict = solved.verdict if solved is not None else {}
    out: dict[str, Any] = {"task_id": result.task_id, "attempts": attempts}
    for k in range(1, attempts + 1):
        out[f"turn{k}_correct"] = result.correct_by(k)
    out.update(
        first=result.first_correct,
        correct=result.correct,
        reward=max((t.reward or 0.0 for t in result.turns), default=0.0),
        runtime_ms=verdict.get("runtime_ms"),
        roofline_fraction=verdict.get("roofline_fraction"),
        speedup_vs_eager=verdict.get("speedup_vs_eager"),
        statuses=[t.status for t in result.turns],
        solving_turn=None if solved is None else solved.turn,
    )
    return out


def outcomes(results: Sequence[TaskEvalResult], attempts: int = DEFAULT_ATTEMPTS) -> dict[str, dict[str, Any]]:
    return {r.task_id: task_outcome(r, attempts) for r in results}


def task_metrics(outcome: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """MLflow metrics of one task: `<prefix><task>/<key>` (booleans as 0/1, missing numbers as None)."""
    out: dict[str, float | None] = {}
    for key in outcome_keys(outcome.get("attempts", DEFAULT_ATTEMPTS)):
        value = outcome.get(key)
        out[f"{prefix}{outcome['task_id']}/{key}"] = float(value) if value is not None else None
    return out


def group_counts(outs: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """Per group: tasks, correct at the first attempt (`first`), correct at any attempt (`correct`)."""
    table = {}
    for group, ids in groups.items():
        present = [outs[t] for t in ids if t in outs]
        table[group] = {
            "tasks": len(ids),
            "first": sum(o["first"] for o in present),
            "correct": sum(o["correct"] for o in present),
        }
    every = [o for o in outs.values()]
    table["overall"] = {
        "tasks": len(every),
        "first": sum(o["first"] for o in every),
        "correct": sum(o["correct"] for o in every),
    }
    return table


def fast_p(outs: Mapping[str, Mapping[str, Any]], p: float) -> float:
    """KernelBench's fast_p over these tasks (see the module docstring)."""
    if not outs:
        return 0.0
    n = 0
    for o in outs.values():
        if not o["correct"]:
            continue
        s = o.get("speedup_vs_eager")
        if p == 0.0 or (s is not None and math.isfinite(s) and s > p):
            n += 1
    return n / len(outs)


def summary_metrics(outs: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]],
                    prefix: str = "") -> dict[str, float]:
    """Group counts and fast_p as flat metrics: `<prefix>group/<g>/first_correct`, `<prefix>fast_1.2`, ..."""
    out: dict[str, float] = {}
    for group, c in group_counts(outs, groups).items():
        out[f"{prefix}group/{group}/first_correct"] = float(c["first"])
        out[f"{prefix}group/{group}/correct"] = float(c["correct"])
    for p in FAST_P:
        out[f"{prefix}fast_{p:g}"] = fast_p(outs, p)
    return out


def pass_ks(n: int) -> list[int]:
    """The k reported for n samples: powers of two up to n, and n itself."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return sorted(set(ks) | ({n} if n >= 1 else set()))


def sample_outcome(result: SampledTaskResult) -> dict[str, Any]:
    """The reported numbers of one task's sampled evaluation (see the module docstring)."""
    rewards = [max((t.reward or 0.0 for t in e.turns), default=0.0) for e in result.episodes]
    return {
        "task_id": result.task_id,
        "samples": result.samples,
        "samples_correct": result.first_correct,
        "samples_turn2_correct": result.correct,
        "samples_reward_mean": sum(rewards) / len(rewards) if rewards else None,
    }


def sample_outcomes(results: Sequence[SampledTaskResult]) -> dict[str, dict[str, Any]]:
    return {r.task_id: sample_outcome(r) for r in results}


def sample_task_metrics(outcome: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """MLflow metrics of one task's sampled evaluation: `<prefix><task>/<key>` for `SAMPLE_KEYS`."""
    return {f"{prefix}{outcome['task_id']}/{key}": None if outcome.get(key) is None else float(outcome[key])
            for key in SAMPLE_KEYS}


def sampled_rates(outs: Mapping[str, Mapping[str, Any]], ids: Sequence[str]) -> dict[str, float | None]:
    """Mean over `ids` (those with samples) of pass@k and avg@n, first attempt and by the second attempt."""
    present = {t: outs[t] for t in ids if t in outs and outs[t].get("samples")}
    out: dict[str, float | None] = {}
    if not present:
        return out
    n_min = min(int(o["samples"]) for o in present.values())
    for key, suffix in SAMPLE_COUNTS:
        counts = {t: (int(o["samples"]), int(o[key])) for t, o in present.items() if o.get(key) is not None}
        if not counts:
            continue
        for k in pass_ks(n_min):
            out[f"pass_at_{k}{suffix}"] = statistics.mean_pass_at_k(counts, k)
        out[f"avg_at_n{suffix}"] = sum(statistics.avg_at_n(n, c) for n, c in counts.values()) / len(counts)
    return out


def sample_summary_metrics(outs: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]],
                           prefix: str = "") -> dict[str, float | None]:
    """`<prefix>group/<g>/pass_at_<k>`, `.../avg_at_n` (and `/by_2nd` variants) per group and `overall`.

    (MLflow metric names cannot hold `@`, hence `pass_at_1` for pass@1.)"""
    out: dict[str, float | None] = {}
    for group, ids in {**groups, "overall": tuple(outs)}.items():
        for key, value in sampled_rates(outs, ids).items():
            out[f"{prefix}group/{group}/{key}"] = value
    return out
