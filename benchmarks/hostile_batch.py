"""Does any submission hold the GPU for the others? Ten honest controls beside ten slow or hostile ones.

    python benchmarks/hostile_batch.py --backend cuda --shape full --workers 4 --out results/   # GPU host
    python benchmarks/hostile_batch.py --backend interpret --shape small --workers 2 --out /tmp/h

Issue #17 measured a batch of 17 hostile submissions on one H200, 3 at a time, returning one verdict in
8.5 minutes: submissions doing slow host-side work held the exclusive GPU lock for their whole timeout.
Here the ten honest controls (tests/fixtures/solutions) are judged first alone (`honest_alone`), then
interleaved with ten submissions that sleep or spin in their first call, in their timed calls, at
import, flood their output, exhaust memory, break the protocol, hide work in a thread or switch the
guard off (`mixed`), all by one `Evaluator(max_workers=W)` fed by W client threads, static checks off
(so the runtime and OS layers are what is exercised), verdict cache off. Reported: every verdict's
status and latency, and for the honest controls the mixed latency against the alone latency (the
goal: every one within +20 s) and their rewards in both runs. Writes `hostile_batch.json` and `.md`.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import platform
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.tasks import TASKS  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "adversarial"
RELU = solution_source("19_ReLU")


def _relu_with(forward_prefix: str = "", module_prefix: str = "") -> str:
    src = RELU.replace("        return out", forward_prefix + "        return out")
    return module_prefix + src


def hostile() -> list[tuple[str, str, str]]:
    """(name, task, source) of the ten slow or hostile submissions."""
    count = "        ModelNew.calls = getattr(ModelNew, 'calls', 0) + 1\n"
    made = [
        ("sleep_first_call", _relu_with("        import time; time.sleep(600)\n")),
        ("sleep_in_timed_calls", _relu_with(count + "        if ModelNew.calls > 6:\n"
                                            "            import time; time.sleep(600)\n")),
        ("spin_in_timed_calls", _relu_with(count + "        while ModelNew.calls > 6:\n            pass\n")),
        ("sleep_at_import", _relu_with(module_prefix="import time\ntime.sleep(600)\n")),
    ]
    fixtures = ["hang_forever", "output_flood", "oom_alloc", "rt_protocol_garbage", "rt_import_thread_worker",
                "rt_guard_switched_off"]
    out = [(name, "19_ReLU", src) for name, src in made]
    for name in fixtures:
        src = (CORPUS / f"{name}.py").read_text()
        task = next(line.split(":", 1)[1].strip() for line in src.splitlines() if line.startswith("# task:"))
        out.append((name, task, src))
    return out


def unique(source: str) -> str:
    return source + f"\n# nonce {uuid.uuid4().hex}\n"


def judge_all(evaluator: Evaluator, batch, workers: int, partial: Path | None = None) -> list[dict]:
    """Every verdict of `batch`, W at a time; each is appended to `partial` (JSON lines) as it ends, so a
    run cut short by a time limit still says what it measured."""
    started = time.monotonic()

    def one(item):
        name, task, src = item
        t = time.monotonic()
        v = evaluator.evaluate(task, unique(src))
        row = {"name": name, "task": task, "status": v.status, "reward": v.reward, "latency_s": time.monotonic() - t,
                "finished_at_s": time.monotonic() - started, "runtime_ms": v.runtime_ms,
                "gpu_wait_s": v.wall_time.gpu_wait_s if v.wall_time else None, "feedback": v.feedback[:200]}
        if partial is not None:
            with partial.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
        return row

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, batch))


def markdown(result: dict) -> str:
    m = result["meta"]
    lines = [f"# Hostile batch ({m['date']})", "", f"{m['device']}, torch {m['torch']}, triton {m['triton']}, "
             f"evaluator {m['evaluator_version']}, shape `{m['shape']}`, {m['workers']} verdicts at a time, static "
             "checks off, verdict cache off.", "",
             f"Mixed batch wall time {result['mixed_wall_s']:.1f} s, {len(result['mixed'])} verdicts; honest alone "
             f"{result['honest_alone_wall_s']:.1f} s. Honest controls within +20 s of alone: "
             f"**{result['honest_within_20s']}** of {len(result['honest_alone'])}.", "",
             "| submission | status | reward | latency s (mixed) | latency s (honest alone) | reward alone |",
             "|---|---|---|---|---|---|"]
    alone = {r["name"]: r for r in result["honest_alone"]}
    for r in result["mixed"]:
        a = alone.get(r["name"])
        alone_latency = "" if a is None else f"{a['latency_s']:.1f}"
        alone_reward = "" if a is None else f"{a['reward']:.3f}"
        lines.append(f"| {r['name']} | {r['status']} | {r['reward']:.3f} | {r['latency_s']:.1f} | "
                     f"{alone_latency} | {alone_reward} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="auto")
    ap.add_argument("--shape", choices=["small", "full"], default=None)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--out", default="benchmark-results")
    ap.add_argument("--alone-from", default=None,
                    help="take the honest-alone rows from an earlier run's hostile_batch.partial.jsonl (a short call)")
    ap.add_argument("--mixed-items", type=int, default=None, help="judge only the first N items of the mixed batch")
    ap.add_argument("--stack-dump-s", type=float, default=0.0,
                    help="every N s, write every thread's Python stack to OUT/stacks.txt (finding a stall)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    shape = args.shape or ("full" if torch.cuda.is_available() and args.backend != "interpret" else "small")
    config = EvalConfig(backend=args.backend, shape=shape, static_checks=False, verdict_cache_size=0,
                        max_workers=args.workers, timeout_s=args.timeout_s)
    evaluator = Evaluator(config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "hostile_batch.partial.jsonl"
    partial.unlink(missing_ok=True)
    if args.stack_dump_s > 0:
        stacks = (out / "stacks.txt").open("w")  # kept open: faulthandler writes from its own thread
        faulthandler.dump_traceback_later(args.stack_dump_s, repeat=True, file=stacks)
    honest = [(f"honest_{t}", t, solution_source(t)) for t in TASKS]
    t0 = time.monotonic()
    if args.alone_from:
        rows = [json.loads(line) for line in Path(args.alone_from).read_text().splitlines() if line.strip()]
        alone = [r for r in rows if r["name"].startswith("honest_")][:len(honest)]
        alone_wall = max(r["finished_at_s"] for r in alone)
    else:
        alone = judge_all(evaluator, honest, args.workers, partial)
        alone_wall = time.monotonic() - t0
    mixed_batch = [item for pair in zip(honest, hostile(), strict=True) for item in pair][:args.mixed_items]
    t0 = time.monotonic()
    mixed = judge_all(evaluator, mixed_batch, args.workers, partial)
    mixed_wall = time.monotonic() - t0
    by_alone = {r["name"]: r for r in alone}
    within = sum(1 for r in mixed if r["name"] in by_alone and r["latency_s"] <= by_alone[r["name"]]["latency_s"] + 20)
    result = {"meta": {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "host": platform.node(),
                       "device": evaluator.device_name, "torch": torch.__version__, "triton": triton.__version__,
                       "evaluator_version": EVALUATOR_VERSION, "shape": shape, "workers": args.workers,
                       "timeout_s": args.timeout_s, "info": evaluator.info()},
              "honest_alone": alone, "honest_alone_wall_s": alone_wall, "mixed": mixed, "mixed_wall_s": mixed_wall,
              "honest_within_20s": within}
    evaluator.close()
    (out / "hostile_batch.json").write_text(json.dumps(result, indent=1, default=str))
    (out / "hostile_batch.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
