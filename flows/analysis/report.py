"""The run's report: the pilot's before/after table, per-task numbers, fast_p and plots, from the run directory.

`write_report(run, config)` reads what the stages stored in the run directory (the evaluations'
results.json and each epoch's updates.json as the train layer's types, through their `from_dict`;
validation.json) and writes `<run>/report/`:

    report.md                   the tables below, with the plots linked (relative links: right on disk)
    report.html                 the same, one self-contained page with the plots inlined (MLflow previews it)
    reward_per_update.png       mean reward of every update's group (± std clipped at 0), epoch boundaries dashed
    per_task_before_after.png   each task's best greedy reward before and after training; no reward: its status
    tasks.csv                   the per-task table

Tables: the pilot's (task group x before/after correct counts and the change, each row saying which
attempts it counts, plus the overall first-attempt row) with each group's role, a per-task table
(statuses as first / second attempt, reward before/after and its change, runtime, roofline fraction,
speedup vs eager, extra seeds) with a line reading its statuses, fast_p for p in {0, 1, 1.2}, and,
when the run made sampled evaluations (`baseline_sampled`, `trained_sampled`), pass@k and avg@n per
group and c/n per task, before and after. A run whose policy is built here (the tiny random model,
the synthetic SFT policy) says so at the top, in the note's one wording (`kernelflow.train.policy_config.policy_note`).

The table cells, the figures' pyplot and colours, and report.html come from the shared renderer
(`flows/analysis/render.py`), which the seed comparison uses too. This module reads files and renders;
it computes no rewards, logs nothing to MLflow and publishes nothing to Prefect (`flows/artifacts.py`
shows the rendered report in the Prefect UI).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flows import stage_names as names
from flows.analysis import results
from flows.analysis.render import BAR_WIDTH, SIDES, change, fmt, pyplot, save, write_html
from flows.config import ExperimentConfig
from flows.epoch import UPDATES_FILE, read_updates
from flows.run_dir import RunDir, read_json
from kernelflow.train.policy_config import policy_note

GROUP_LABELS = {"train": "train", "reserved": "reserved", "heldout": "held-out", "families": "families"}
FIRST_ONLY = "its first attempt is correct"


def counts_when(attempts: int) -> str:
    """What the pilot table's rows count, for `attempts` attempts per task (two: the pilot's wording)."""
    return {1: FIRST_ONLY, 2: "its first or second attempt is correct"}.get(
        attempts, f"one of its first {attempts} attempts is correct")
# Short readings of the verdict statuses (the full table: docs/verdict.md); the legend lists those shown.
STATUS_MEANINGS = {
    "ok": "correct",
    "incorrect": "ran, wrong output",
    "compile_error": "did not parse, import or compile",
    "runtime_error": "forward raised",
    "no_code": "no code in the answer",
    "static_rejected": "refused by a static check before running",
    "rejected_runtime_check": "refused by a runtime check (e.g. PyTorch doing the work)",
    "timeout": "ran too long",
    "crashed": "the worker died",
    "impossible_time": "faster than the hardware allows",
    "evaluator_error": "the evaluator failed, not the submission",
}


@dataclass
class RenderedReport:
    path: Path
    markdown: str
    rows: list[dict[str, Any]]
    metrics: dict[str, float] = field(default_factory=dict)


def _load(path: Path, default: Any) -> Any:
    return read_json(path) if path.is_file() else default


def pilot_table(before: dict, after: dict, groups: dict[str, tuple[str, ...]],
                attempts: int = results.DEFAULT_ATTEMPTS) -> list[str]:
    """Correct tasks per group before/after; each row says which attempts it counts."""
    b, a = results.group_counts(before, groups), results.group_counts(after, groups)
    by_last = counts_when(attempts)
    lines = ["| task group | counts a task correct when | tasks | before: correct | after: correct "
             "| change (after − before) |", "|---|---|---:|---:|---:|---:|"]
    for g in groups:
        lines.append(f"| {GROUP_LABELS.get(g, g)} | {by_last} | {b[g]['tasks']} | {b[g]['correct']} | "
                     f"{a[g]['correct']} | {change(b[g]['correct'], a[g]['correct'])} |")
    o_b, o_a = b["overall"], a["overall"]
    lines.append(f"| **overall** | **{FIRST_ONLY}** | {o_b['tasks']} | {o_b['first']} | {o_a['first']} | "
                 f"{change(o_b['first'], o_a['first'])} |")
    lines.append(f"| overall | {by_last} | {o_b['tasks']} | {o_b['correct']} | {o_a['correct']} | "
                 f"{change(o_b['correct'], o_a['correct'])} |")
    return lines


def status_legend(rows: list[dict[str, Any]], attempts: int = results.DEFAULT_ATTEMPTS) -> str:
    """One line under the per-task table: how to read `a / b` and what each status shown means."""
    shown = {s for r in rows for side in ("before", "after") for s in r[side].split(" / ")}
    meanings = "; ".join(f"`{s}`: {m}" for s, m in STATUS_MEANINGS.items() if s in shown)
    order, each = (("first attempt / second attempt", "the second is written after reading the first's") if attempts <= 2
                   else ("first attempt / second attempt / ...", "each is written after reading the previous one's"))
    return (f"Statuses read *{order}* ({each} "
            "feedback, e.g. `incorrect / compile_error`: the first kernel ran but gave wrong outputs, the second "
            "did not compile); one status alone: the episode ended after its first attempt (correct, or a one-attempt run). "
            + (f"{meanings}. " if meanings else "") + "All statuses: docs/verdict.md.")


def task_rows(config: ExperimentConfig, before: dict, after: dict, validation: dict) -> list[dict[str, Any]]:
    rows = []
    for tid in config.tasks.all:
        b, a = before.get(tid, {}), after.get(tid, {})
        v = validation.get("tasks", {}).get(tid)
        rows.append({
            "task": tid,
            "group": GROUP_LABELS.get(config.tasks.group_of(tid), ""),
            "before": " / ".join(s or "?" for s in b.get("statuses", [])) or "—",
            "after": " / ".join(s or "?" for s in a.get("statuses", [])) or "—",
            "reward_before": b.get("reward"),
            "reward_after": a.get("reward"),
            "reward_change": None if b.get("reward") is None or a.get("reward") is None
            else a["reward"] - b["reward"],
            "runtime_ms": a.get("runtime_ms"),
            "roofline_fraction": a.get("roofline_fraction"),
            "speedup_vs_eager": a.get("speedup_vs_eager"),
            "extra_seeds": None if v is None else f"{v['correct']}/{len(validation.get('seeds', []))}",
        })
    return rows


def sampled_section(config: ExperimentConfig, before: dict, after: dict) -> tuple[list[str], dict[str, float]]:
    """Markdown lines and metrics of the sampled evaluations (`results.sample_outcomes` of each stage).

    `by 2nd` columns count episodes correct at any attempt: by the last (the 2nd in the two-attempt protocol)."""
    groups = {**config.tasks.groups, "overall": config.tasks.all}
    rates = {side: {g: results.sampled_rates(outs, ids) for g, ids in groups.items()}
             for side, outs in (("before", before), ("after", after))}
    ns = [int(o["samples"]) for o in (*before.values(), *after.values()) if o.get("samples")]
    if not ns:
        return [], {}
    n = min(ns)
    ks = [k for k in results.pass_ks(n) if k in (1, n)]
    s = config.evaluation
    attempts = s.attempts or config.trainer.eval_attempts
    last = results.ordinal(attempts)
    word = "second" if attempts == 2 else last
    lines = ["", f"## Sampled evaluation ({n} episode(s) per task at T {s.temperature}, top_p {s.top_p})", "",
             "Unbiased pass@k (1 − C(n−c, k)/C(n, k), mean over the group's tasks) and avg@n (c/n): c counts the "
             f"episodes whose first attempt is correct; `by {last}` counts those correct by the {word} attempt.", "",
             "| task group | " + " | ".join(f"pass@{k} before | after" for k in ks)
             + f" | avg@n before | after | pass@1 by {last} before | after |",
             "|---|" + "---:|---:|" * (len(ks) + 2)]
    metrics: dict[str, float] = {}
    for g in groups:
        b, a = rates["before"][g], rates["after"][g]
        cells = [f"{fmt(b.get(f'pass_at_{k}'), 2)} | {fmt(a.get(f'pass_at_{k}'), 2)}" for k in ks]
        cells += [f"{fmt(b.get('avg_at_n'), 2)} | {fmt(a.get('avg_at_n'), 2)}",
                  f"{fmt(b.get('pass_at_1/by_2nd'), 2)} | {fmt(a.get('pass_at_1/by_2nd'), 2)}"]
        label = "**overall**" if g == "overall" else GROUP_LABELS.get(g, g)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        for side, r in (("before", b), ("after", a)):
            for key in ("pass_at_1", "avg_at_n"):
                if r.get(key) is not None:
                    metrics[f"report/sampled/{g}/{key}/{side}"] = float(r[key])
    lines += ["", f"| task | group | correct first, before | after | correct by {last}, before | after |",
              "|---|---|---:|---:|---:|---:|"]
    for tid in config.tasks.all:
        b, a = before.get(tid, {}), after.get(tid, {})

        def frac(o: dict, key: str) -> str:
            return f"{o[key]}/{o['samples']}" if o.get("samples") else "—"

        lines.append(f"| {tid} | {GROUP_LABELS.get(config.tasks.group_of(tid), '')} | {frac(b, 'samples_correct')} | "
                     f"{frac(a, 'samples_correct')} | {frac(b, 'samples_turn2_correct')} | "
                     f"{frac(a, 'samples_turn2_correct')} |")
    return lines, metrics


def reward_figure(updates: list):
    """Mean reward of each update's group with a ± std band, clipped at 0 (no reward is negative).

    Epoch boundaries are dashed lines, drawn (and named in the legend) only when the run has more
    than one epoch; the title promises nothing else.
    """
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = [u.update for u in updates]
    means = [u.reward_mean for u in updates]
    ax.plot(xs, means, marker="o", label="mean reward of the group")
    ax.fill_between(xs, [max(0.0, m - u.reward_std) for m, u in zip(means, updates, strict=True)],
                    [m + u.reward_std for m, u in zip(means, updates, strict=True)], alpha=0.2, label="± std (clipped at 0)")
    for i, e in enumerate(sorted({u.epoch for u in updates})[1:]):
        ax.axvline(min(u.update for u in updates if u.epoch == e) - 0.5, color="grey", lw=0.8, ls="--",
                   label="epoch boundary" if i == 0 else None)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("update")
    ax.set_ylabel("reward")
    ax.set_title("Mean reward per update")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig


def _final_status(cell: str) -> str:
    """The last attempt's status from a table cell (`incorrect / compile_error` -> compile_error; — -> not run)."""
    return "not run" if cell in ("", "—") else cell.split(" / ")[-1]


def before_after_figure(rows: list[dict[str, Any]]):
    """Each task's best greedy reward before and after; a task without reward shows its last status instead.

    An unsolved task's reward is 0, which draws no bar: its slot gets a small hollow, hatched marker and
    its last attempt's status written upwards, so a missing bar reads as a failure and not as a gap.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.2))
    top = max([1.0] + [r[k] or 0.0 for r in rows for k in ("reward_before", "reward_after")]) * 1.1
    labels = {"before": "before (base model)", "after": "after (adapter)"}
    for side, offset, color in SIDES:
        key = f"reward_{side}"
        xs = [x + offset for x in range(len(rows))]
        ax.bar(xs, [r[key] or 0.0 for r in rows], width=BAR_WIDTH, label=labels[side], color=color)
        for x, r in zip(xs, rows, strict=True):
            if r[key]:
                continue
            ax.bar(x, 0.02 * top, width=BAR_WIDTH, fill=False, hatch="///", edgecolor=color, lw=0.6)
            ax.text(x, 0.03 * top, _final_status(r[side]), rotation=90, ha="center", va="bottom",
                    fontsize=6.5, color=color)
    ax.set_xticks(list(range(len(rows))), [r["task"] for r in rows], rotation=35, ha="right", fontsize=8)
    ax.set_ylim(0.0, top)
    ax.set_ylabel("best greedy reward")
    ax.set_title("Per-task reward before and after training (no bar: the last attempt's status)")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def plot_rewards(updates: list, path: Path) -> None:
    save(reward_figure(updates), path, dpi=120)


def plot_before_after(rows: list[dict[str, Any]], path: Path) -> None:
    save(before_after_figure(rows), path, dpi=120)


def load_results(run: RunDir, stage: str, sampled: bool = False) -> list:
    """An evaluation stage's stored results as `TaskEvalResult`s (`SampledTaskResult`s); none if it wrote none."""
    from kernelflow.train.evaluation import SampledTaskResult, TaskEvalResult

    kind = SampledTaskResult if sampled else TaskEvalResult
    return [kind.from_dict(r) for r in _load(run.path / stage / "results.json", [])]


def write_report(run: RunDir, config: ExperimentConfig, mlflow_run: str = "") -> RenderedReport:
    """Render the report into `<run>/report/` from the stored stage results (see the module docstring)."""
    attempts = config.trainer.eval_attempts
    before = results.outcomes(load_results(run, names.BASELINE_EVAL), attempts)
    after = results.outcomes(load_results(run, names.TRAINED_EVAL), attempts)
    validation = _load(run.path / names.SEED_VALIDATION / "validation.json", {})
    stored = [run.path / names.epoch_stage(e) / UPDATES_FILE for e in range(1, config.trainer.epochs + 1)]
    updates = [u for path in stored if path.is_file() for u in read_updates(path)]  # `UpdateMetrics` records
    provenance = _load(run.path / names.PROVENANCE / "provenance.json", {})
    sampled_before = results.sample_outcomes(load_results(run, names.BASELINE_SAMPLED, sampled=True))
    sampled_after = results.sample_outcomes(load_results(run, names.TRAINED_SAMPLED, sampled=True))
    out = run.report_dir
    rows = task_rows(config, before, after, validation)
    if updates:
        plot_rewards(updates, out / "reward_per_update.png")
    plot_before_after(rows, out / "per_task_before_after.png")
    with open(out / "tasks.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    m = config.model
    model = {"hub": f"{m.model} @ {m.revision}", "tiny": "tiny random model",
             "sft": "SFT policy (synthetic corpus)"}.get(m.source, m.model)
    lines = [f"# kernelflow report: {run.path.name}", ""]
    if note := policy_note(m.source):
        lines += [f"> **Note on the policy:** this run's policy is {note}.", ""]
    lines += [
        f"- policy: {model} + LoRA r{config.lora.r} alpha {config.lora.alpha}; {config.trainer.estimator}, "
        f"{config.trainer.epochs} epoch(s), group {config.trainer.group_size}, T {config.trainer.temperature}, "
        f"{config.trainer.max_new_tokens} tokens per turn, seed {config.trainer.seed}",
        f"- evaluator: {provenance.get('env.backend', config.eval.backend)} on {provenance.get('env.device', '?')}, "
        f"shape {config.eval.shape}, evaluator {provenance.get('evaluator.version', '?')}",
        f"- code: git {provenance.get('git.sha', '?')} (dirty: {provenance.get('git.dirty', '?')}); "
        f"config hash {provenance.get('config.hash', '?')[:12]}; KernelBench {provenance.get('tasks.kernelbench_revision', '?')}",
    ]
    if mlflow_run:
        lines.append(f"- MLflow: {mlflow_run}")
    n_attempts = {1: "one attempt", 2: "two attempts"}.get(attempts, f"{attempts} attempts")
    lines += ["", f"## Correct tasks before and after training (greedy, {n_attempts})", ""]
    lines += pilot_table(before, after, config.tasks.groups, attempts)
    lines += ["", "Roles: " + "; ".join(f"**{GROUP_LABELS.get(g, g)}**: {role}" for g, role in config.tasks.roles.items())
              + "."]
    lines += ["", "## Per task (after training: the first correct attempt's numbers)", "",
              "| task | group | before | after | reward before | reward after | change (after − before) "
              "| runtime ms | roofline fraction | speedup vs eager | extra seeds |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['task']} | {r['group']} | {r['before']} | {r['after']} | {fmt(r['reward_before'])} | "
            f"{fmt(r['reward_after'])} | {change(r['reward_before'], r['reward_after'])} | "
            f"{fmt(r['runtime_ms'], 4)} | {fmt(r['roofline_fraction'])} | "
            f"{fmt(r['speedup_vs_eager'], 2)} | {fmt(r['extra_seeds'])} |"
        )
    lines += ["", status_legend(rows, attempts)]
    lines += ["", "## fast_p (correct and faster than eager PyTorch by more than p)", "",
              "| p | before | after |", "|---:|---:|---:|"]
    metrics: dict[str, float] = {}
    for p in results.FAST_P:
        fb, fa = results.fast_p(before, p), results.fast_p(after, p)
        metrics[f"report/fast_{p:g}/before"], metrics[f"report/fast_{p:g}/after"] = fb, fa
        lines.append(f"| {p:g} | {fb:.2f} | {fa:.2f} |")
    if config.eval.backend == "interpret":
        lines += ["", "The interpreter backend does not time kernels: runtimes are missing and fast_p for p > 0 is 0."]
    sampled_lines, sampled_metrics = sampled_section(config, sampled_before, sampled_after)
    lines += sampled_lines
    metrics.update(sampled_metrics)
    if validation:
        lines += ["", "## Extra-seed validation", "",
                  f"Every task solved after training was re-judged on {len(validation['seeds'])} extra seed(s) "
                  f"{validation['seeds']} at shape {validation['shape']!r}: {validation['validated']} of "
                  f"{validation['solved']} solved task(s) were correct on all of them."]
    if updates:
        lines += ["", "## Training", "", f"{len(updates)} update(s); mean reward per update:", "",
                  "![reward per update](reward_per_update.png)"]
    lines += ["", "![per-task reward before and after](per_task_before_after.png)", ""]
    markdown = "\n".join(lines)
    path = out / "report.md"
    path.write_text(markdown)
    write_html(markdown, out, out / "report.html", f"kernelflow report: {run.path.name}")
    return RenderedReport(path=path, markdown=markdown, rows=rows, metrics=metrics)
