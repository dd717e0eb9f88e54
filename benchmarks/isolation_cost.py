"""What worker OS isolation costs per verdict: the honest ReLU, isolation "none" vs "auto" (CPU or CUDA).

Two ways a verdict gets its worker, each measured warm (the evaluator has judged once already):
- fresh: `prewarm_workers=0`, the verdict spawns its worker (so it pays `unshare`, `setpriv`, the
  chown, Landlock and the seccomp filter inside its own wall time);
- pooled: the verdict takes a worker that is already warm and confined, handed to the evaluator by a
  one-worker stand-in for `WarmPool` that does not refill (a real pool spawns the replacement during
  the verdict, which on a 2-core machine costs the verdict more than anything measured here).
Interleaved none/auto, `--repeats` each, the median and the spread printed. Run on a quiet machine:

    python benchmarks/isolation_cost.py --repeats 7
    python benchmarks/isolation_cost.py --backend cuda --shape small --repeats 3 --out OUT   # GPU host

On CUDA the small shape is the default: isolation acts on the worker's start and its system calls,
not on the kernel, so a short verdict shows its share at its largest. `--out` also writes the lines
printed as `isolation_cost.json`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from kernelflow.eval import EVALUATOR_VERSION, EvalConfig, Evaluator
from kernelflow.eval.sandbox.policy import host_mechanisms
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerHandle

HONEST_RELU = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
        return out
'''


class OneWarmWorker:
    """A pool of one warm worker, handed out once and never replaced (see the module docstring)."""

    def __init__(self, handle: WorkerHandle):
        self.spec = handle.spec  # the session takes a pooled worker only for its own spec
        self.handle = handle

    def acquire(self) -> WorkerHandle | None:
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.claim()
        return handle

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


def warm_workers(spec: SpawnSpec, n: int, timeout_s: float = 300.0) -> list[WorkerHandle]:
    """`n` workers warmed side by side before any repeat is timed.

    Warming them one per repeat, serially, cost ~9 s of GPU-host time each (CUDA context + imports);
    side by side the whole set takes about one warm-up. Idle warm workers stay beside the timed
    verdicts, as a real pool's do.
    """
    handles = [WorkerHandle(spec) for _ in range(n)]
    for h in handles:
        h.warm_in_background(timeout_s)
    deadline = time.monotonic() + timeout_s
    for h in handles:
        h.ensure_warm(deadline)
    return handles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modes", default="fresh,pooled")
    ap.add_argument("--backend", choices=["interpret", "cuda"], default="interpret")
    ap.add_argument("--shape", choices=["small", "full"], default="small")
    ap.add_argument("--out", default=None, help="directory for isolation_cost.json")
    args = ap.parse_args()
    import torch
    import triton

    records: list[dict] = []

    def emit(record: dict) -> None:
        print(json.dumps(record), flush=True)
        records.append(record)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            Path(args.out, "isolation_cost.json").write_text(json.dumps(records, indent=1))

    emit({"backend": args.backend, "shape": args.shape,
          "device": torch.cuda.get_device_name(0) if args.backend == "cuda" else "cpu (triton interpreter)",
          "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
          "cpus": __import__("os").cpu_count(), "kernel": platform.release(), "evaluator_version": EVALUATOR_VERSION,
          "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
          "mechanisms": {k: v is None for k, v in host_mechanisms().items()}})
    for mode in args.modes.split(","):
        evaluators = {iso: Evaluator(EvalConfig(backend=args.backend, shape=args.shape, verdict_cache_size=0,
                                               isolation=iso, prewarm_workers=0))
                      for iso in ("none", "auto")}
        times: dict[str, list[float]] = {iso: [] for iso in evaluators}
        for ev in evaluators.values():  # the first verdict of each is not counted (imports, caches)
            assert ev.evaluate("19_ReLU", HONEST_RELU).status == "ok"
        spare = {iso: warm_workers(SpawnSpec.of(ev.config, ev.backend, ev.device), args.repeats)
                 for iso, ev in evaluators.items()} if mode == "pooled" else {}
        for i in range(args.repeats):
            for iso, ev in evaluators.items():
                if mode == "pooled":
                    ev._pool = OneWarmWorker(spare[iso][i])
                t0 = time.perf_counter()
                v = ev.evaluate("19_ReLU", HONEST_RELU)
                times[iso].append(time.perf_counter() - t0)
                assert v.status == "ok", v.feedback
                assert mode == "fresh" or ev._prewarmed_sessions == i + 1  # the warm worker was the one used
            print(f"{mode} repeat {i + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
                  flush=True)
        med = {iso: statistics.median(t) for iso, t in times.items()}
        emit({"mode": mode, "level": evaluators["auto"].isolation.level,
              "median_s": {k: round(v, 3) for k, v in med.items()},
              "min_max_s": {k: [round(min(t), 3), round(max(t), 3)] for k, t in times.items()},
              "overhead_pct": round(100 * (med["auto"] / med["none"] - 1), 1)})
        for ev in evaluators.values():
            ev._pool = None
            ev.close()


if __name__ == "__main__":
    main()
