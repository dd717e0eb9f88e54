"""Throughput of the Ray evaluation backend with 1..N actors on a fixed mixed batch.

    python benchmarks/ray_throughput.py --actors 1 2 --out results/ray_cpu                 # this CPU machine
    python benchmarks/ray_throughput.py --address auto --backend cuda --shape full --gpus-per-actor 1 \\
        --actors 1 2 4 8 --out results/                                                         # a GPU cluster

The batch: honest controls (tests/fixtures/solutions) for `--tasks`, a wrong ReLU, a Triton compile
error, a static rejection and an answer without code, repeated `--repeat` times, each submission
made unique by a nonce comment (and the verdict cache off), so every verdict really runs. For each
actor count a `RayEvaluator` is started (its start time reported apart), then the whole batch is
submitted at once through `evaluate_batch`; throughput = verdicts / wall time of the batch. With
`--local` the same batch also goes through a plain local `Evaluator(max_workers=A)` for the same A,
as the no-Ray reference. Ray runs its workers at niceness 15 unless `RAY_worker_niceness=0` is set
before Ray starts; on a shared host that decides who gets the cores, so the tables show it.
Results: `ray_throughput.json` and `ray_throughput.md` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks run from a checkout; tests/helpers holds the controls

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator  # noqa: E402
from kernelflow.eval.cluster.ray_backend import RayConfig, RayEvaluator  # noqa: E402
from tests.helpers.solutions import solution_source  # noqa: E402


def mixed_batch(tasks: list[str], repeat: int) -> list[tuple[str, str, str]]:
    """(label, task_id, answer), every answer unique."""
    relu = solution_source("19_ReLU")
    one = [(f"honest {t}", t, solution_source(t)) for t in tasks]
    one += [
        ("wrong", "19_ReLU", relu.replace("tl.maximum(x.to(tl.float32), 0.0)", "x.to(tl.float32)")),
        ("compile error", "19_ReLU", relu.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 1000)")),
        ("static rejection", "19_ReLU", relu.replace("        return out", "        return torch.relu(x)")),
        ("no code", "19_ReLU", "I would write a Triton kernel with a mask."),
    ]
    changed = [label for label, _, code in one[len(tasks):] if code == relu]
    if changed:
        raise RuntimeError(f"the {changed} variants equal the ReLU control; its source changed, update mixed_batch")
    out = []
    for r in range(repeat):
        for label, task, code in one:
            nonce = uuid.uuid4().hex[:8]
            out.append((label, task, code if label == "no code" else f"{code}\n# nonce {r}-{nonce}\n"))
    return out


def run_batch(evaluate, batch, threads: int) -> dict:
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        verdicts = list(pool.map(lambda item: evaluate(item[1], item[2]), batch))
    wall = time.monotonic() - t0
    statuses: dict[str, int] = {}
    for v in verdicts:
        statuses[v.status] = statuses.get(v.status, 0) + 1
    totals = [v.wall_time.total_s for v in verdicts if v.wall_time and v.wall_time.total_s is not None]
    return {"verdicts": len(verdicts), "wall_s": wall, "verdicts_per_s": len(verdicts) / wall,
            "verdicts_per_hour": 3600 * len(verdicts) / wall, "statuses": statuses,
            "median_verdict_s": statistics.median(totals) if totals else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--address", default=None, help="Ray address (default: start a local instance)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local instance (default: all)")
    parser.add_argument("--backend", choices=["auto", "cuda", "interpret"], default="interpret")
    parser.add_argument("--shape", choices=["small", "full"], default="small")
    parser.add_argument("--gpus-per-actor", type=float, default=0.0)
    parser.add_argument("--workers-per-actor", type=int, default=1, help="eval.max_workers of each actor")
    parser.add_argument("--tasks", nargs="*", default=["19_ReLU", "21_Sigmoid", "23_Softmax", "88_MinGPTNewGelu"])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--local", action="store_true", help="also judge the batch with a local Evaluator")
    parser.add_argument("--out", default="benchmark-results")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import ray

    quick = args.backend == "interpret"  # the interpreter times nothing: one seed and one call suffice
    config = EvalConfig(backend=args.backend, shape=args.shape, max_workers=args.workers_per_actor,
                        verdict_cache_size=0, seeds=1 if quick else 3, timed_runs=1 if quick else 20)
    batch = mixed_batch(args.tasks, args.repeat)
    init = dict(address=args.address, include_dashboard=False, log_to_driver=False)
    if args.address is None and args.num_cpus is not None:
        init["num_cpus"] = args.num_cpus
    ray.init(**init)
    rows = []
    for n in args.actors:
        t0 = time.monotonic()
        ev = RayEvaluator(config, RayConfig(num_actors=n, gpus_per_actor=args.gpus_per_actor,
                                            cpus_per_actor=min(1.0, ray.cluster_resources().get("CPU", 1) / n)))
        start_s = time.monotonic() - t0
        result = run_batch(ev.evaluate, batch, threads=n * args.workers_per_actor + n)
        result.update(kind="ray", actors=n, workers=n * args.workers_per_actor, start_s=start_s,
                      served=[s["served"] for s in ev.stats()["slots"]],
                      actor_niceness=[a["niceness"] for a in ev.info()["actors"]])
        ev.close()
        rows.append(result)
        print(f"ray {n} actor(s): {result['verdicts']} verdicts in {result['wall_s']:.1f} s = "
              f"{result['verdicts_per_hour']:.0f}/h (start {start_s:.1f} s, served {result['served']})", flush=True)
        if args.local:
            local = Evaluator(replace(config, max_workers=n * args.workers_per_actor))
            result = run_batch(local.evaluate, batch, threads=n * args.workers_per_actor)
            result.update(kind="local", actors=0, workers=n * args.workers_per_actor, start_s=0.0, served=[],
                          actor_niceness=[os.nice(0)])
            local.close()
            rows.append(result)
            print(f"local pool of {n * args.workers_per_actor}: {result['verdicts_per_hour']:.0f}/h", flush=True)
    resources = ray.cluster_resources()
    ray.shutdown()

    import torch
    import triton

    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node(),
            "cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg(), "python": platform.python_version(),
            "torch": torch.__version__, "triton": triton.__version__, "ray": ray.__version__,
            "evaluator_version": EVALUATOR_VERSION, "cluster_resources": resources, "backend": args.backend,
            "shape": args.shape, "seeds": config.seeds, "timed_runs": config.timed_runs,
            "batch": [label for label, _, _ in batch]}
    (out / "ray_throughput.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [f"# Ray backend throughput ({meta['date']}, {meta['host']}, {meta['cpus']} CPUs, {args.backend}, "
             f"shape {args.shape})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, ray {meta['ray']}, evaluator {EVALUATOR_VERSION}; "
             f"batch of {len(batch)}: {', '.join(meta['batch'])}", "",
             "| backend | actors | workers | niceness | actor start s | batch wall s | verdicts/h | median verdict s "
             "| served per actor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['kind']} | {r['actors'] or '-'} | {r['workers']} | {max(r['actor_niceness'])} | "
                     f"{r['start_s']:.1f} | {r['wall_s']:.1f} | "
                     f"{r['verdicts_per_hour']:.0f} | {r['median_verdict_s']:.1f} | {r['served'] or '-'} |")
    (out / "ray_throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
