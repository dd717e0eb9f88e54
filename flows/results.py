"""Per-task outcomes of a greedy evaluation and their summaries: the numbers metrics and reports share.

An evaluation stage stores one record per task (`TaskEvalResult.to_dict()`: the task's turns, each
with the environment's verdict). `task_outcome(record)` reduces one to the reported numbers:

    turn1_correct      the first (greedy) attempt is correct
    turn2_correct      correct by the second attempt (the first, or the retry after its feedback)
    reward             the best turn's reward (the environment's, never recomputed)
    runtime_ms, roofline_fraction, speedup_vs_eager    of the first correct turn (None if none, or untimed)

`group_counts` gives the pilot's table cells and `fast_p` KernelBench's fast_p: the fraction of tasks
that are correct with a speedup over eager PyTorch above p (fast_0 is the correct fraction; an
untimed correct kernel counts for p = 0 only).

A sampled evaluation stores one record per task with its n episodes (`SampledTaskResult.to_dict()`);
`sample_outcome(record)` reduces one to (`SAMPLE_KEYS`):

    samples                n, the task's sampled episodes
    samples_correct        c, episodes whose first attempt is correct (single-shot pass@k reads these)
    samples_turn2_correct  episodes correct by the second attempt (pass@k with one round of feedback)
    samples_reward_mean    the mean over episodes of each episode's best reward

and `sample_summary_metrics` gives per group (and overall) the mean over tasks of the unbiased pass@k
for k = 1, 2, 4, ... up to n (`pass_ks`) and avg@n = c / n, first attempt and by the second
(`flows/statistics.py` computes them). Pure functions over plain dicts; nothing is logged here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from flows import statistics

FAST_P = (0.0, 1.0, 1.2)
OUTCOME_KEYS = ("turn1_correct", "turn2_correct", "reward", "runtime_ms", "roofline_fraction", "speedup_vs_eager")
# The sampled evaluation's stage after each greedy one (when evaluation.samples > 0).
SAMPLED_STAGES = {"baseline_eval": "baseline_sampled", "trained_eval": "trained_sampled"}
SAMPLE_KEYS = ("samples", "samples_correct", "samples_turn2_correct", "samples_reward_mean")
# pass@k from the first attempt's count, and from the count by the second attempt (suffix "/by_2nd")
SAMPLE_COUNTS = (("samples_correct", ""), ("samples_turn2_correct", "/by_2nd"))


def _first_correct(turns: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((t for t in turns if t.get("correct")), None)


def task_outcome(record: Mapping[str, Any]) -> dict[str, Any]:
    """The reported numbers of one task's greedy evaluation (see the module docstring)."""
    turns = list(record.get("turns") or [])
    solved = _first_correct(turns[:2])
    verdict = (solved or {}).get("verdict") or {}
    rewards = [float(t.get("reward") or 0.0) for t in turns]
    return {
        "task_id": record["task_id"],
        "turn1_correct": bool(turns and turns[0].get("correct")),
        "turn2_correct": solved is not None,
        "reward": max(rewards, default=0.0),
        "runtime_ms": verdict.get("runtime_ms"),
        "roofline_fraction": verdict.get("roofline_fraction"),
        "speedup_vs_eager": verdict.get("speedup_vs_eager"),
        "statuses": [t.get("status") for t in turns],
        "solving_turn": None if solved is None else int(solved.get("turn", 0)),
    }


def outcomes(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["task_id"]: task_outcome(r) for r in records}


def task_metrics(outcome: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """MLflow metrics of one task: `<prefix><task>/<key>` (booleans as 0/1, missing numbers as None)."""
    out: dict[str, float | None] = {}
    for key in OUTCOME_KEYS:
        value = outcome.get(key)
        out[f"{prefix}{outcome['task_id']}/{key}"] = float(value) if value is not None else None
    return out


def group_counts(outs: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
    """Per group: tasks, correct at the first attempt, correct by the second attempt."""
    table = {}
    for group, ids in groups.items():
        present = [outs[t] for t in ids if t in outs]
        table[group] = {
            "tasks": len(ids),
            "first": sum(o["turn1_correct"] for o in present),
            "correct": sum(o["turn2_correct"] for o in present),
        }
    every = [o for o in outs.values()]
    table["overall"] = {
        "tasks": len(every),
        "first": sum(o["turn1_correct"] for o in every),
        "correct": sum(o["turn2_correct"] for o in every),
    }
    return table


def fast_p(outs: Mapping[str, Mapping[str, Any]], p: float) -> float:
    """KernelBench's fast_p over these tasks (see the module docstring)."""
    if not outs:
        return 0.0
    n = 0
    for o in outs.values():
        if not o["turn2_correct"]:
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


def sample_outcome(record: Mapping[str, Any]) -> dict[str, Any]:
    """The reported numbers of one task's sampled evaluation (see the module docstring)."""
    episodes = [task_outcome({"task_id": record["task_id"], "turns": e.get("turns")})
                for e in record.get("episodes") or []]
    return {
        "task_id": record["task_id"],
        "samples": len(episodes),
        "samples_correct": sum(e["turn1_correct"] for e in episodes),
        "samples_turn2_correct": sum(e["turn2_correct"] for e in episodes),
        "samples_reward_mean": sum(e["reward"] for e in episodes) / len(episodes) if episodes else None,
    }


def sample_outcomes(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["task_id"]: sample_outcome(r) for r in records}


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
