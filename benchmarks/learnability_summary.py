"""Summarise learnability runs (one run directory per seed) into the tables of docs/learnability.md.

    python benchmarks/learnability_summary.py RUNS_ROOT [--name learnability] [--out summary.md]

Reads, for every run directory `RUNS_ROOT/<name>-*` whose report stage completed: the trainer seed
(config.yaml), every update's metrics (epoch-*/updates.json), the greedy evaluations
(baseline_eval/, trained_eval/ results.json) and the sampled ones when made (baseline_sampled/,
trained_sampled/). Writes a markdown file with

- per seed and as mean ± sample standard deviation over seeds: the training tasks' greedy correct
  count (first attempt) and sampled correct rate before and after, and the training reward of the
  first and the last epoch (the rollouts' own mean reward and first-turn correct rate);
- the curve per update (mean reward and first-turn correct rate of each update's group, per seed);
- on a GPU run, the mean roofline fraction of correct training rollouts in the first and last epoch,
  which separates gains in correctness from gains in speed (the reward is 0.3 + 2.7 x roofline
  fraction for a correct kernel, 0 otherwise);
- a JSON file beside it with every number.

It reads files only; it computes no reward (the verdicts carry them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml


def _load(path: Path, default: Any = None) -> Any:
    return json.loads(path.read_text()) if path.is_file() else default


def _mean_sd(values: list[float]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    if len(vals) == 1:
        return f"{vals[0]:.3f}"
    return f"{statistics.fmean(vals):.3f} ± {statistics.stdev(vals):.3f}"


def run_numbers(run: Path) -> dict[str, Any] | None:
    """The numbers of one completed run, or None when it has not reached its report."""
    state = _load(run / "state.json", {})
    if "report" not in state.get("stages", {}) or state["stages"]["report"].get("status") not in (None, "completed"):
        if not (run / "report" / "report.md").is_file():
            return None
    config = yaml.safe_load((run / "config.yaml").read_text())
    train = list(config["tasks"]["train"])
    updates = []
    for f in sorted(run.glob("epoch-*/updates.json"), key=lambda p: int(p.parent.name.split("-")[1])):
        updates += _load(f, [])
    out: dict[str, Any] = {"run": run.name, "seed": config["trainer"]["seed"], "backend": config["eval"]["backend"],
                           "train_tasks": train}

    for stage in ("baseline_eval", "trained_eval"):
        recs = [r for r in _load(run / stage / "results.json", []) if r["task_id"] in train]
        out[f"{stage}/first_correct"] = sum(bool(r["first_correct"]) for r in recs)
        out[f"{stage}/correct"] = sum(bool(r["correct"]) for r in recs)
        out[f"{stage}/tasks"] = len(recs)
        out[f"{stage}/all_first_correct"] = {r["task_id"]: bool(r["first_correct"])
                                             for r in _load(run / stage / "results.json", [])}
    for stage in ("baseline_sampled", "trained_sampled"):
        recs = [r for r in _load(run / stage / "results.json", []) if r["task_id"] in train]
        n = sum(r["samples"] for r in recs)
        out[f"{stage}/correct_rate"] = sum(r["first_correct"] for r in recs) / n if n else None
        allrecs = _load(run / stage / "results.json", [])
        out[f"{stage}/per_task"] = {r["task_id"]: r["first_correct"] / r["samples"] for r in allrecs if r["samples"]}

    out["curve"] = [{"update": u["update"], "epoch": u["epoch"], "task_id": u["task_id"], "reward_mean": u["reward_mean"],
                     "correct_t1": u["correct_rate_per_turn"][0] if u["correct_rate_per_turn"] else None,
                     "statuses": u["status_counts"]} for u in updates]
    epochs = sorted({u["epoch"] for u in updates})
    for label, ep in (("first_epoch", epochs[0] if epochs else None), ("last_epoch", epochs[-1] if epochs else None)):
        group = [u for u in updates if u["epoch"] == ep]
        out[f"{label}/reward_mean"] = statistics.fmean(u["reward_mean"] for u in group) if group else None
        out[f"{label}/correct_t1"] = statistics.fmean(u["correct_rate_per_turn"][0] for u in group) if group else None
        fracs = [s.get("roofline_fraction") for u in group for s in u.get("samples", []) if s.get("correct")]
        fracs = [f for f in fracs if f is not None]
        out[f"{label}/roofline_fraction_correct"] = statistics.fmean(fracs) if fracs else None
    return out


def render(runs: list[dict[str, Any]]) -> str:
    lines = [f"{len(runs)} seed(s): {', '.join(str(r['seed']) for r in runs)} (backend {runs[0]['backend']})", ""]
    lines += ["| seed | greedy first-attempt correct, train (before → after) | sampled correct rate, train "
              "(before → after) | rollout reward, first → last epoch | rollout turn-1 correct, first → last epoch |",
              "|---|---|---|---|---|"]

    def f(v: Any) -> str:
        return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    for r in runs:
        lines.append(
            f"| {r['seed']} | {r['baseline_eval/first_correct']}/{r['baseline_eval/tasks']} → "
            f"{r['trained_eval/first_correct']}/{r['trained_eval/tasks']} | {f(r['baseline_sampled/correct_rate'])} → "
            f"{f(r['trained_sampled/correct_rate'])} | {f(r['first_epoch/reward_mean'])} → {f(r['last_epoch/reward_mean'])} | "
            f"{f(r['first_epoch/correct_t1'])} → {f(r['last_epoch/correct_t1'])} |")

    def col(key: str) -> list[float]:
        return [None if r[key] is None else float(r[key]) for r in runs]

    lines.append(
        f"| **mean ± sd** | {_mean_sd(col('baseline_eval/first_correct'))} → {_mean_sd(col('trained_eval/first_correct'))} | "
        f"{_mean_sd(col('baseline_sampled/correct_rate'))} → {_mean_sd(col('trained_sampled/correct_rate'))} | "
        f"{_mean_sd(col('first_epoch/reward_mean'))} → {_mean_sd(col('last_epoch/reward_mean'))} | "
        f"{_mean_sd(col('first_epoch/correct_t1'))} → {_mean_sd(col('last_epoch/correct_t1'))} |")
    if any(r["first_epoch/roofline_fraction_correct"] is not None for r in runs):
        lines += ["", "Roofline fraction of correct rollouts kept as samples (first → last epoch): "
                  + "; ".join(f"seed {r['seed']}: {f(r['first_epoch/roofline_fraction_correct'])} → "
                              f"{f(r['last_epoch/roofline_fraction_correct'])}" for r in runs)]
    tasks = sorted({t for r in runs for t in r["trained_eval/all_first_correct"]})
    lines += ["", "Greedy first attempt per task (✔ correct), before → after, per seed:", "",
              "| task | " + " | ".join(f"seed {r['seed']}" for r in runs) + " |", "|---|" + "---|" * len(runs)]
    for t in tasks:
        cells = []
        for r in runs:
            b, a = r["baseline_eval/all_first_correct"].get(t), r["trained_eval/all_first_correct"].get(t)
            cells.append(f"{'✔' if b else '✘'} → {'✔' if a else '✘'}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    if any(r["baseline_sampled/per_task"] for r in runs):
        lines += ["", "Sampled correct rate per task, before → after, per seed:", "",
                  "| task | " + " | ".join(f"seed {r['seed']}" for r in runs) + " |", "|---|" + "---|" * len(runs)]
        for t in tasks:
            lines.append(f"| {t} | " + " | ".join(
                f"{f(r['baseline_sampled/per_task'].get(t))} → {f(r['trained_sampled/per_task'].get(t))}" for r in runs) + " |")
    lines += ["", "Curve per update (group mean reward / turn-1 correct rate):", "",
              "| update | task | " + " | ".join(f"seed {r['seed']}" for r in runs) + " |", "|---|---|" + "---|" * len(runs)]
    for i in range(max(len(r["curve"]) for r in runs)):
        row = [r["curve"][i] if i < len(r["curve"]) else None for r in runs]
        task = "/".join(sorted({c["task_id"] for c in row if c}))
        lines.append(f"| {i + 1} | {task} | " + " | ".join(
            "—" if c is None else f"{c['reward_mean']:.3f} / {c['correct_t1']:.2f}" for c in row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_root", type=Path)
    ap.add_argument("--name", default="learnability", help="the preset name: run directories are <name>-<hash>")
    ap.add_argument("--out", type=Path, default=None, help="markdown output (default: RUNS_ROOT/learnability_summary.md)")
    args = ap.parse_args(argv)
    runs = [n for p in sorted(args.runs_root.glob(f"{args.name}-*")) if p.is_dir() and (n := run_numbers(p))]
    if not runs:
        print(f"no completed {args.name}-* run under {args.runs_root}; run the experiment first", file=sys.stderr)
        return 1
    runs.sort(key=lambda r: r["seed"])
    out = args.out or args.runs_root / "learnability_summary.md"
    out.write_text(render(runs))
    out.with_suffix(".json").write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")
    print(f"{len(runs)} run(s) summarised: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
