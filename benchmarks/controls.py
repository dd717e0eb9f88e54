"""Judge the ten honest Triton controls and print the evaluator's table.

    python benchmarks/controls.py --shape full --out results/      # on a GPU host (cuda backend)
    python benchmarks/controls.py --shape small --backend interpret # anywhere (no timing)
    python benchmarks/controls.py --tasks families --parallel 4 --out results/families  # the second tier

`--tasks` takes task ids, or `pilot` / `families` / `all` for whole suites. `--parallel N` judges N
submissions at a time: the per-GPU lock still serialises their GPU phases, so runtimes stay
comparable, but workers start and compile while another verdict holds the GPU. `--compile-baseline`
also times torch.compile of the reference (under the same lock) and adds its columns.

For every task: status, runtime (median of the timed calls, with min/max), t_min, roofline
fraction, eager PyTorch time, speedup vs eager, reward and the wall time of the verdict; then the
ReLU control judged `--repeats` more times to show how far repeated medians drift. Writes
`controls.json` and `controls.md` (with date, device, torch and triton versions) under `--out`.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.eval import EvalConfig, Evaluator  # noqa: E402
from kernelflow.tasks import TASKS  # noqa: E402
from kernelflow.tasks.families import family_task_ids  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402


def fmt(value, spec=".3f"):
    return "-" if value is None else format(value, spec)


def resolve_tasks(names: list[str]) -> list[str]:
    """Task ids from the command line, with `pilot`, `families` and `all` standing for whole suites."""
    suites = {"pilot": list(TASKS), "families": family_task_ids(), "all": [*TASKS, *family_task_ids()]}
    ids: list[str] = []
    for name in names:
        ids += suites.get(name, [name])
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=["small", "full"], default="full")
    parser.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="auto")
    parser.add_argument("--repeats", type=int, default=5, help="extra judgements of the ReLU control")
    parser.add_argument("--tasks", nargs="*", default=["pilot"], help="task ids, or pilot / families / all")
    parser.add_argument("--parallel", type=int, default=1, help="submissions judged at a time")
    parser.add_argument("--compile-baseline", action="store_true", help="also time torch.compile of the reference")
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task_ids = resolve_tasks(args.tasks)

    # No verdict cache: the repeats must each be judged again, not answered from the first verdict.
    evaluator = Evaluator(
        EvalConfig(
            backend=args.backend,
            shape=args.shape,
            max_workers=max(1, args.parallel),
            verdict_cache_size=0,
            compile_baseline=args.compile_baseline,
        )
    )
    info = evaluator.info()
    rows = []

    def judge(task_id: str) -> dict:
        t0 = time.monotonic()
        v = evaluator.evaluate(task_id, solution_source(task_id))
        wall = time.monotonic() - t0
        print(
            f"{task_id:<28} {v.status:<10} runtime {fmt(v.runtime_ms)} ms  t_min {fmt(v.t_min_ms)}  "
            f"roofline {fmt(v.roofline_fraction)}  eager {fmt(v.eager_ms)}  compile {fmt(v.torch_compile_ms)}  "
            f"reward {v.reward:.3f}  wall {wall:.1f}s  {v.feedback[:200] if v.status != 'ok' else ''}",
            flush=True,
        )
        return {**v.to_dict(), "verdict_wall_s": wall}

    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        # Rows are saved as verdicts finish, so a run cut short keeps every finished one; the table
        # below is put back in the order asked for.
        for done in as_completed([pool.submit(judge, t) for t in task_ids]):
            rows.append(done.result())
            (out / "controls.partial.json").write_text(json.dumps(rows, indent=1))
    rows.sort(key=lambda r: task_ids.index(r["task_id"]))
    repeats = []
    for _ in range(args.repeats):
        v = evaluator.evaluate("19_ReLU", solution_source("19_ReLU"))
        repeats.append(v.runtime_ms)
        print(f"ReLU repeat: {v.status} runtime {fmt(v.runtime_ms)} ms", flush=True)
    spread = None
    timed_repeats = [r for r in repeats if r is not None]
    if timed_repeats:
        spread = (max(timed_repeats) - min(timed_repeats)) / min(timed_repeats)

    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": info["device"],
        "backend": info["backend"],
        "shape": args.shape,
        "parallel": args.parallel,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "evaluator_version": info["evaluator_version"],
        "cuda": torch.version.cuda,
    }
    (out / "controls.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "relu_repeats_ms": repeats, "relu_repeat_spread": spread}, indent=2)
    )
    lines = [
        f"Date {meta['date']}; device {meta['device']}; backend {meta['backend']}; shape {args.shape}; "
        f"torch {meta['torch']}; triton {meta['triton']}; CUDA {meta['cuda']}; evaluator {meta['evaluator_version']}.",
        "",
        "| task | status | runtime ms (min-max) | t_min ms | roofline fraction | eager ms | speedup vs eager | reward "
        + ("| torch.compile ms | speedup vs compile " if args.compile_baseline else "")
        + "| verdict wall s |",
        "|---|---|---|---|---|---|---|---|" + ("---|---|" if args.compile_baseline else "") + "---|",
    ]
    for r in rows:
        rng = f"{fmt(r['runtime_ms'])} ({fmt(r['runtime_min_ms'])}-{fmt(r['runtime_max_ms'])})"
        compiled = f"{fmt(r['torch_compile_ms'])} | {fmt(r['speedup_vs_compile'], '.2f')} | " if args.compile_baseline else ""
        lines.append(
            f"| {r['task_id']} | {r['status']} | {rng} | {fmt(r['t_min_ms'])} | {fmt(r['roofline_fraction'])} | "
            f"{fmt(r['eager_ms'])} | {fmt(r['speedup_vs_eager'], '.2f')} | {r['reward']:.3f} | "
            f"{compiled}{r['verdict_wall_s']:.1f} |"
        )
    lines += [
        "",
        f"ReLU control judged {args.repeats} more times: medians {[fmt(x) for x in repeats]} ms; "
        f"spread (max-min)/min = {fmt(spread, '.2%')}.",
    ]
    (out / "controls.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
