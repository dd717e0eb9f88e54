"""What worker OS isolation costs per verdict on the CPU: the honest ReLU, isolation "none" vs "auto".

Two ways a verdict gets its worker, each measured warm (the evaluator has judged once already):
- fresh: `prewarm_workers=0`, the verdict spawns its worker (so it pays `unshare`, `setpriv`, the
  chown, Landlock and the seccomp filter inside its own wall time);
- pooled: `prewarm_workers=1`, the verdict takes a worker that is already warm and confined (the pool
  is refilled and waited for between verdicts, outside the measurement).
Interleaved none/auto, `--repeats` each, the median and the spread printed. Run on a quiet machine:

    python benchmarks/isolation_cost.py --repeats 7
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from kernelflow.eval import EvalConfig, Evaluator
from kernelflow.eval.isolation import host_mechanisms

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import torch
    import triton

    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
                      "cpus": __import__("os").cpu_count(), "kernel": platform.release(),
                      "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                      "mechanisms": {k: v is None for k, v in host_mechanisms().items()}}))
    for mode, prewarm in (("fresh", 0), ("pooled", 1)):
        evaluators = {iso: Evaluator(EvalConfig(backend="interpret", verdict_cache_size=0, prewarm_workers=prewarm,
                                                isolation=iso)) for iso in ("none", "auto")}
        times: dict[str, list[float]] = {iso: [] for iso in evaluators}
        for ev in evaluators.values():  # the first verdict of each is not counted (imports, caches)
            assert ev.evaluate("19_ReLU", HONEST_RELU).status == "ok"
        for i in range(args.repeats):
            for iso, ev in evaluators.items():
                if ev._pool is not None:
                    ev._pool.wait_warm(120)
                t0 = time.perf_counter()
                v = ev.evaluate("19_ReLU", HONEST_RELU)
                times[iso].append(time.perf_counter() - t0)
                assert v.status == "ok", v.feedback
            print(f"{mode} repeat {i + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
                  flush=True)
        med = {iso: statistics.median(t) for iso, t in times.items()}
        print(json.dumps({"mode": mode, "level": evaluators["auto"].isolation.level,
                          "median_s": {k: round(v, 3) for k, v in med.items()},
                          "min_max_s": {k: [round(min(t), 3), round(max(t), 3)] for k, t in times.items()},
                          "overhead_pct": round(100 * (med["auto"] / med["none"] - 1), 1)}), flush=True)
        for ev in evaluators.values():
            ev.close()


if __name__ == "__main__":
    main()
