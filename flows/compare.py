"""`python -m flows.compare --experiment NAME`: compare the seeds of one MLflow experiment, before vs after training.

Every parent run of the experiment (one per seed, e.g. from `python -m flows.experiment -m
seed=42,43,44 tracking.experiment=NAME`) has nested runs of both greedy evaluations that carry
per-task metrics, read back as `baseline_eval/<task>/<key>` and `trained_eval/<task>/<key>` (keys:
`results.OUTCOME_KEYS`, logged by `stages.eval_stage` through `Tracker.log_stage_metrics`; runs logged
before that carry the same names on the parent), of the sampled evaluations when the run made them
(`baseline_sampled/<task>/samples`, `samples_correct`, ...: `results.SAMPLE_KEYS`, logged by
`stages.sampled_eval_stage`), and its config as params (`tasks.train`, ..., `tasks.families`,
`trainer.seed`). This module reads them back and writes `<out>/`:

    compare.md            the tables below, plots linked (relative links: right on disk)
    compare.html          the same as one self-contained page, plots inlined (flows/report_page.py)
    comparison.json       every number of the tables (estimates, interval bounds, per-seed values)
    group_success.png     per-group success before/after with bootstrap intervals
    task_success.png      per-task success before/after (fraction of seeds) with bootstrap intervals
    fast_p.png            fast_p before/after against eager (and torch.compile where measured)

Tables: runs used; per-group and per-task success (first attempt and by the second attempt) before,
after and after - before, each a mean over seeds with a percentile bootstrap interval over seeds
(paired by seed for the difference); fast_p for p in {0, 1, 1.2} against eager and, where verdicts
carry `speedup_vs_compile`, against torch.compile; the mean roofline fraction of correct kernels;
where runs made sampled evaluations, pass@k (unbiased) and avg@n overall and per group, from the
first attempt and by the second. The statistics are `flows/statistics.py`'s. Runs whose result
settings differ beyond the seed are listed as a warning.

The command runs as a Prefect flow (`compare_flow`: load-runs -> write-comparison) so it shows in
the Prefect UI beside the experiments, with a markdown artifact whose plots are inlined as data URIs;
`compare(...)` is the same work without Prefect. This module reads MLflow and writes files; it never
writes to MLflow.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows import report_page, statistics
from flows.results import FAST_P, OUTCOME_KEYS, SAMPLE_KEYS, sampled_rates
from flows.stage_names import BASELINE_EVAL, GREEDY_EVALS, SAMPLED_STAGES, TRAINED_EVAL
from flows.tracking import RUN_TAG, STAGE_TAG

STAGES = GREEDY_EVALS
STAGE_LABELS = {BASELINE_EVAL: "before", TRAINED_EVAL: "after"}
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


@dataclass
class Comparison:
    path: Path
    markdown: str
    numbers: dict[str, Any] = field(default_factory=dict)


def default_tracking_uri(runs_root: str = "runs") -> str:
    """The flow's embedded store (flows.tracking.tracking_uri with tracking.uri unset)."""
    return f"sqlite:///{Path(runs_root).expanduser().resolve() / 'mlflow.db'}"


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
    report_page.write_html(markdown, out, out / "compare.html", f"kernelflow comparison: {experiment}")
    return Comparison(path, markdown, numbers)


def artifact_markdown(result: Comparison) -> str:
    """The comparison's markdown with its plots inlined (a Prefect artifact has no directory beside it)."""
    return report_page.embed_images(result.markdown, result.path.parent)


# -- rendering -------------------------------------------------------------------------------------


def _iv(d: Mapping[str, Any], seeds: int | None = None, digits: int = 2) -> str:
    """`estimate [low, high]`, plus `(k of N seeds)` when only k of the N runs have the number."""
    iv = statistics.Interval(**d)
    text = iv.format(digits)
    if seeds is not None and 0 < iv.n < seeds:
        text += f" ({iv.n} of {seeds} seeds)"
    return text


def _row(label: str, m: Mapping[str, Any] | None, seeds: int | None = None) -> str:
    if m is None:
        return f"| {label} | — | — | — |"
    return f"| {label} | {_iv(m['before'], seeds)} | {_iv(m['after'], seeds)} | {_iv(m['difference'], seeds)} |"


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
    if numbers.get("tiny"):
        lines += ["**These runs' policy is the tiny random model** (the smoke preset): it writes no working kernels, "
                  "so every number below is expected to be zero; the comparison checks the pipeline, not the method.", ""]
    if "sft" in numbers.get("policy_sources", []):
        lines += ["**These runs' policy is a small model pre-trained here on a synthetic corpus** (`model.source=sft`): "
                  "its numbers show whether the loop learns, nothing about any real model.", ""]
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
            lines.append(f"| {t} | {g} | {_iv(f1['before'])} | {_iv(f1['after'])} | {_iv(f2['before'])} | "
                         f"{_iv(f2['after'])} | {_iv(f2['difference'])} |")
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(items) + 2), 3.6))
    x = np.arange(len(items))
    for offset, side, color in ((-0.2, "before", "#9aa5b1"), (0.2, "after", "#2f6fb0")):
        est, lo, hi = [], [], []
        for _, m in items:
            iv = (m or {}).get(side) or {"estimate": math.nan, "low": math.nan, "high": math.nan}
            e = iv["estimate"]
            est.append(0.0 if math.isnan(e) else e)
            lo.append(0.0 if math.isnan(e) else e - iv["low"])
            hi.append(0.0 if math.isnan(e) else iv["high"] - e)
        ax.bar(x + offset, est, 0.4, yerr=[lo, hi], capsize=3, label=side, color=color)
    ax.set_xticks(x, [label for label, _ in items], rotation=45 if rotate else 0, ha="right" if rotate else "center",
                  fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- Prefect flow and command ----------------------------------------------------------------------


def _flow():
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    @task(name="load-runs", cache_policy=NO_CACHE)
    def load(experiment: str, tracking_uri: str, name: str | None) -> list[SeedRun]:
        runs = load_runs(experiment, tracking_uri, name)
        print(f"{len(runs)} parent run(s) of experiment {experiment!r}: seeds {[r.seed for r in runs]}")
        return runs

    @task(name="write-comparison", cache_policy=NO_CACHE)
    def write(runs: list[SeedRun], out: str, experiment: str, resamples: int, level: float, seed: int) -> str:
        result = compare(runs, Path(out), experiment, resamples, level, seed)
        try:
            from prefect.artifacts import create_markdown_artifact

            create_markdown_artifact(key=f"compare-{_key(experiment)}", markdown=artifact_markdown(result),
                                     description=f"seed comparison of {experiment}")
        except Exception as exc:  # noqa: BLE001 - the files are the product; the artifact is a convenience
            print(f"could not publish the Prefect artifact: {exc}")
        return str(result.path)

    @flow(name="kernelflow-compare", log_prints=True, validate_parameters=False)
    def compare_flow(experiment: str, tracking_uri: str, out: str, name: str | None = None,
                     resamples: int = statistics.DEFAULT_RESAMPLES, level: float = statistics.DEFAULT_LEVEL,
                     seed: int = 0) -> str:
        """Read every seed's parent run of `experiment` from MLflow and write the comparison to `out`."""
        return write(load(experiment, tracking_uri, name), out, experiment, resamples, level, seed)

    return compare_flow


def _key(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") or "experiment"


def main(argv: Sequence[str] | None = None) -> int:
    from flows import prefect_settings

    prefect_settings.apply()  # the entry point's Prefect defaults, before `_flow()` imports Prefect
    ap = argparse.ArgumentParser(prog="python -m flows.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", required=True, help="the MLflow experiment holding one parent run per seed")
    ap.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: sqlite:///<runs-root>/mlflow.db)")
    ap.add_argument("--runs-root", default="runs", help="where the embedded store lives when --tracking-uri is not given")
    ap.add_argument("--out", default=None, help="output directory (default: <runs-root>/compare-<experiment>)")
    ap.add_argument("--name", default=None, help="only runs whose experiment preset name (param `name`) is this")
    ap.add_argument("--resamples", type=int, default=statistics.DEFAULT_RESAMPLES)
    ap.add_argument("--level", type=float, default=statistics.DEFAULT_LEVEL)
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    ap.add_argument("--no-prefect", action="store_true", help="run without a Prefect flow")
    args = ap.parse_args(argv)
    uri = args.tracking_uri or default_tracking_uri(args.runs_root)
    out = Path(args.out or Path(args.runs_root) / f"compare-{_key(args.experiment)}")
    try:
        if args.no_prefect:
            path = str(compare(load_runs(args.experiment, uri, args.name), out, args.experiment, args.resamples,
                               args.level, args.seed).path)
        else:
            path = _flow()(args.experiment, uri, str(out), args.name, args.resamples, args.level, args.seed)
    except (LookupError, ValueError) as exc:
        print(f"kernelflow compare: {exc}", file=sys.stderr)
        return 1
    print(f"kernelflow compare: report {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
