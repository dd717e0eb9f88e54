"""The seed comparison, rendered: before vs after training over the seeds of one MLflow experiment.

`compare(runs, out)` takes the runs `flows/analysis/seed_runs.py` read back and writes `<out>/`:

    compare.md            the tables below, plots linked (relative links: right on disk)
    compare.html          the same as one self-contained page, plots inlined (flows/analysis/render.py)
    comparison.json       every number of the tables (estimates, interval bounds, per-seed values)
    group_success.png     per-group success before/after with bootstrap intervals
    task_success.png      per-task success before/after (fraction of seeds) with bootstrap intervals
    fast_p.png            fast_p before/after against eager (and torch.compile where measured)

Tables: runs used; per-group and per-task success (first attempt and by the second attempt) before,
after and after - before, each a mean over seeds with a percentile bootstrap interval over seeds
(paired by seed for the difference); fast_p for p in {0, 1, 1.2} against eager and, where verdicts
carry `speedup_vs_compile`, against torch.compile; the mean roofline fraction of correct kernels;
where runs made sampled evaluations, pass@k (unbiased) and avg@n overall and per group, from the
first attempt and by the second. The statistics are `flows/analysis/statistics.py`'s. Runs whose
result settings differ beyond the seed are listed as a warning.

This module writes files only: it reads nothing from MLflow (seed_runs.py does), writes nothing to
it, and publishes no Prefect artifact (the command's flow does, `flows/compare.py`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows.analysis import statistics
from flows.analysis.render import BAR_WIDTH, SIDES, interval, pyplot, save, write_html
from flows.analysis.results import FAST_P
from flows.analysis.seed_runs import STAGES, SUCCESS, SeedRun, config_differences, per_seed, summarise, task_groups
from kernelflow.train.policy_config import policy_note


@dataclass
class Comparison:
    """What `compare` wrote: compare.md's path, its markdown, and comparison.json's numbers."""

    path: Path
    markdown: str
    numbers: dict[str, Any] = field(default_factory=dict)


def compare(runs: Sequence[SeedRun], out: Path, experiment: str = "", resamples: int = statistics.DEFAULT_RESAMPLES,
            level: float = statistics.DEFAULT_LEVEL, seed: int = 0) -> Comparison:
    """Write the comparison of `runs` to `out` (see the module docstring)."""
    skipped = [r for r in runs if not all(r.has_stage(s) for s in STAGES)]
    used = [r for r in runs if r not in skipped]
    if not used:
        raise ValueError(f"no run of experiment {experiment!r} has both evaluations' metrics ({', '.join(STAGES)}); "
                         f"{len(runs)} parent run(s) found: run the experiment to its end first")
    groups = task_groups(used)
    stats = summarise(per_seed(used, groups), resamples, level, seed)
    out.mkdir(parents=True, exist_ok=True)
    numbers = {
        "experiment": experiment, "level": level, "resamples": resamples, "bootstrap_seed": seed,
        "runs": [{"run_id": r.run_id, "name": r.name, "seed": r.seed, "status": r.status} for r in used],
        "skipped": [{"run_id": r.run_id, "name": r.name, "seed": r.seed, "status": r.status} for r in skipped],
        "groups": {g: list(ids) for g, ids in groups.items()},
        "config_differences": config_differences(used),
        "tiny": any(r.params.get("model.source") == "tiny" for r in used),
        "policy_sources": sorted({r.params.get("model.source", "?") for r in used}),
        "metrics": stats,
    }
    (out / "comparison.json").write_text(json.dumps(numbers, indent=2, sort_keys=True, default=str) + "\n")
    _plots(stats, groups, out)
    markdown = render(numbers)
    path = out / "compare.md"
    path.write_text(markdown)
    write_html(markdown, out, out / "compare.html", f"kernelflow comparison: {experiment}")
    return Comparison(path, markdown, numbers)


def _row(label: str, m: Mapping[str, Any] | None, seeds: int | None = None) -> str:
    if m is None:
        return f"| {label} | — | — | — |"
    return f"| {label} | {interval(m['before'], seeds)} | {interval(m['after'], seeds)} | {interval(m['difference'], seeds)} |"


def render(numbers: Mapping[str, Any]) -> str:
    stats, groups = numbers["metrics"], numbers["groups"]
    pct = f"{numbers['level'] * 100:g}%"
    head = "| | before | after | after − before |\n|---|---|---|---|"
    seeds = [r["seed"] for r in numbers["runs"]]
    lines = [f"# Comparison of experiment `{numbers['experiment']}` over {len(seeds)} seed(s)", ""]
    lines += [f"Each cell: mean over seeds [{pct} percentile bootstrap interval over seeds, {numbers['resamples']} "
              f"resamples, bootstrap seed {numbers['bootstrap_seed']}]; the difference is paired by seed. With one "
              "seed there is no interval. Success is a fraction of tasks (per group) or of seeds (per task).", ""]
    if len(seeds) < 2:
        lines += ["**One seed only**: the intervals below are degenerate; run several seeds to measure seed noise.", ""]
    for source in numbers.get("policy_sources", []):  # a policy built here says so, as the report does
        if note := policy_note(source):
            lines += [f"**Note on the policy** (`model.source={source}`): these runs' policy is {note}.", ""]
    if numbers["config_differences"]:
        lines += [f"**Warning**: the runs differ in settings other than the seed: {', '.join(numbers['config_differences'])}. "
                  "The comparison mixes those configurations.", ""]
    lines += ["## Runs", "", "| seed | run | MLflow run id | status |", "|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['name']} | `{r['run_id']}` | {r['status']} |" for r in numbers["runs"]]
    for r in numbers["skipped"]:
        lines.append(f"| {r['seed']} | {r['name']} | `{r['run_id']}` | {r['status']}: skipped, lacks an evaluation |")
    lines += ["", "## Success per group", ""]
    for key, label in SUCCESS:
        lines += [f"Correct {label}:", "", head]
        lines += [_row(g, stats.get(f"group/{g}/{key}")) for g in (*groups, "overall")]
        lines.append("")
    lines += ["![group success](group_success.png)", "", "## Success per task", "",
              "| task | group | first attempt before | after | by 2nd attempt before | after | after − before |",
              "|---|---|---|---|---|---|---|"]
    for g, ids in groups.items():
        for t in ids:
            f1, f2 = stats.get(f"task/{t}/turn1_correct"), stats.get(f"task/{t}/turn2_correct")
            if f1 is None or f2 is None:
                continue
            lines.append(f"| {t} | {g} | {interval(f1['before'])} | {interval(f1['after'])} | {interval(f2['before'])} | "
                         f"{interval(f2['after'])} | {interval(f2['difference'])} |")
    lines += ["", "![task success](task_success.png)", "", "## fast_p",
              "", "KernelBench's fast_p: the fraction of all tasks correct (by the 2nd attempt) and faster than the "
              "baseline by more than p. Against torch.compile only where verdicts carry `speedup_vs_compile`.", "", head]
    for p in FAST_P:
        lines.append(_row(f"fast_{p:g} vs eager", stats.get(f"fast_{p:g}/eager"), len(seeds)))
    for p in FAST_P:
        m = stats.get(f"fast_{p:g}/compile")
        measured = m is not None and not (math.isnan(m["before"]["estimate"]) and math.isnan(m["after"]["estimate"]))
        label = f"fast_{p:g} vs torch.compile" + ("" if measured else " (not measured)")
        lines.append(_row(label, m if measured else None, len(seeds)))
    lines += ["", "![fast_p](fast_p.png)", "", "## Roofline fraction", "",
              "Mean roofline fraction (t_min / t_kernel) of the correct kernels of a run; — where no run has one.", "",
              head, _row("mean roofline fraction", stats.get("roofline_fraction"), len(seeds)), "", "## Sampled evaluation", ""]
    lines += _sampled_lines(stats, groups, head, len(seeds))
    return "\n".join(lines) + "\n"


def _sampled_lines(stats: Mapping[str, Any], groups: Mapping[str, Sequence[str]], head: str, seeds: int) -> list[str]:
    overall = [k for k in stats if k.startswith("sampled/overall/pass_at_") and not k.endswith("/by_2nd")]
    if not overall:
        return ["No run logged sampled evaluations (`baseline_sampled/<task>/samples`: run with `evaluation.samples=N`), "
                "so pass@k and avg@n are absent."]
    ks = sorted(int(k.rsplit("_", 1)[1]) for k in overall)
    lines = ["Unbiased pass@k (1 − C(n−c, k)/C(n, k)) and avg@n (c/n), averaged over tasks per seed; c counts "
             "the episodes whose first attempt is correct, or (`by 2nd`) correct by the second attempt. k runs over "
             "powers of two up to the smallest n, and n.", "", "All tasks:", "", head]
    for suffix, label in (("", ""), ("/by_2nd", " by 2nd")):
        lines += [_row(f"pass@{k}{label}", stats.get(f"sampled/overall/pass_at_{k}{suffix}"), seeds) for k in ks]
        lines.append(_row(f"avg@n{label}", stats.get(f"sampled/overall/avg_at_n{suffix}"), seeds))
    lines += ["", "Per group (first attempt):", "", head]
    for g in groups:
        lines.append(_row(f"{g}: pass@1", stats.get(f"sampled/{g}/pass_at_1"), seeds))
        lines.append(_row(f"{g}: pass@{ks[-1]}", stats.get(f"sampled/{g}/pass_at_{ks[-1]}"), seeds))
    return lines


def _plots(stats: Mapping[str, Any], groups: Mapping[str, Sequence[str]], out: Path) -> None:
    labels = [*groups, "overall"]
    _bars([(g, stats.get(f"group/{g}/turn2_correct")) for g in labels], "correct by 2nd attempt (fraction of tasks)",
          out / "group_success.png")
    tasks = [t for ids in groups.values() for t in ids]
    _bars([(t, stats.get(f"task/{t}/turn2_correct")) for t in tasks], "correct by 2nd attempt (fraction of seeds)",
          out / "task_success.png", rotate=True)
    fast = [(f"fast_{p:g}\neager", stats.get(f"fast_{p:g}/eager")) for p in FAST_P]
    fast += [(f"fast_{p:g}\ncompile", stats.get(f"fast_{p:g}/compile")) for p in FAST_P]
    _bars(fast, "fast_p (fraction of tasks)", out / "fast_p.png")


def _bars(items: Sequence[tuple[str, Mapping[str, Any] | None]], ylabel: str, path: Path, rotate: bool = False) -> None:
    """Before/after bars of each item's mean over seeds with its interval as error bars (a missing number: 0)."""
    import numpy as np

    fig, ax = pyplot().subplots(figsize=(max(5.0, 0.7 * len(items) + 2), 3.6))
    x = np.arange(len(items))
    for side, offset, color in SIDES:
        est, lo, hi = [], [], []
        for _, m in items:
            iv = (m or {}).get(side) or {"estimate": math.nan, "low": math.nan, "high": math.nan}
            e = iv["estimate"]
            est.append(0.0 if math.isnan(e) else e)
            lo.append(0.0 if math.isnan(e) else e - iv["low"])
            hi.append(0.0 if math.isnan(e) else iv["high"] - e)
        ax.bar(x + offset, est, BAR_WIDTH, yerr=[lo, hi], capsize=3, label=side, color=color)
    ax.set_xticks(x, [label for label, _ in items], rotation=45 if rotate else 0, ha="right" if rotate else "center",
                  fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=110)
