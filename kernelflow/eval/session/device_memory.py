"""How much device memory a CUDA verdict needs, and a budget that admits verdicts only while they fit.

Why: measured on the H200 (2026-12-01, docs/eval_speed.md "Session 10"), four to ten full-shape
verdicts judged at once failed with `evaluator_error` and `runtime_error` although every submission was
honest: a full-shape ReLU verdict is estimated below at ~53 GB of device memory between the judge, its
worker and the eager baseline, so four of them and the idle pre-warmed workers do not fit in 139 GiB. More
concurrent verdicts than fit must wait for memory, not fail: a verdict's status must never depend on
what else was judged beside it.

`verdict_bytes` estimates one session's peak from the task's shapes (what judge.py and the worker
allocate; the float64 reference is computed in row chunks and is not counted):
- judge: the arena with every shape set's inputs and the done flag, the private scratch copy of the
  largest call's inputs, the clone of the output read behind the clock, and the first call's output
  kept for the repeat check: 2 x inputs + 2 x output;
- worker: its output, and the previous call's in its allocator cache: 2 x output;
- the eager baseline, timed in the judge once per task after a verdict: inputs + output (counted in
  every verdict, because any verdict may be the one that times it);
- plus `VERDICT_OVERHEAD_BYTES` (the worker's CUDA context and the L2-flush buffer).

`MemoryBudget` is a counting semaphore in bytes: `hold(n)` waits until n more fit within the budget,
or nothing else is held (a verdict larger than the whole budget runs alone rather than never). It
does not measure: what other processes on the GPU use is left out of the budget when it is sized
(`budget_bytes`, from the free memory when the evaluator starts), not tracked afterwards.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager

VERDICT_OVERHEAD_BYTES = 1 << 30  # a worker's CUDA context (~0.5 GB) plus the judge's 256 MB L2-flush buffer


def verdict_bytes(shape_sets: list[tuple], output_shapes: list[tuple], itemsize: int, output_itemsize: int) -> int:
    """The estimated device memory of one CUDA verdict (see the module docstring)."""
    inputs_all = sum(math.prod(s) for shapes in shape_sets for s in shapes) * itemsize
    inputs_max = max(sum(math.prod(s) for s in shapes) for shapes in shape_sets) * itemsize
    output_max = max(math.prod(s) for s in output_shapes) * output_itemsize
    judge = inputs_all + inputs_max + 2 * output_max
    worker = 2 * output_max
    baseline = inputs_max + output_max
    return judge + worker + baseline + VERDICT_OVERHEAD_BYTES


def estimate_verdict_bytes(task, config, backend: str) -> int:
    """`verdict_bytes` of one verdict of `task` under `config`: the call plan's shape sets, and the output
    shapes from the reference run on the meta device (no memory; the largest input if an op has no meta kernel)."""
    import torch

    from kernelflow.eval.session.plan import build_plan

    shape_sets = list(dict.fromkeys(spec.shapes for spec in build_plan(task, config, config.seed_list(), backend)))
    dtype = getattr(torch, task.dtype)
    try:
        model = task.load_module().Model(*task.init_inputs).to("meta")
        with torch.no_grad():
            outs = [tuple(model(*[torch.empty(s, dtype=dtype, device="meta") for s in shapes]).shape)
                    for shapes in shape_sets]
    except Exception:  # noqa: BLE001 - an op without a meta kernel
        outs = [max((tuple(s) for s in shapes), key=math.prod) for shapes in shape_sets]
    return verdict_bytes(shape_sets, outs, dtype.itemsize, dtype.itemsize)


def budget_bytes(free_bytes: int, total_bytes: int, fraction: float) -> int:
    """The budget: `fraction` of the device's total memory, but no more than is free at the start."""
    return int(min(fraction * total_bytes, free_bytes))


class MemoryBudget:
    """A counting semaphore in bytes (see the module docstring); thread-safe."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.held = 0
        self.holders = 0
        self.waited_s = 0.0  # in all, for stats
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, nbytes: int):
        t0 = time.monotonic()
        with self._cond:
            self._cond.wait_for(lambda: self.holders == 0 or self.held + nbytes <= self.capacity)
            self.held += nbytes
            self.holders += 1
            self.waited_s += time.monotonic() - t0
        try:
            yield time.monotonic() - t0
        finally:
            with self._cond:
                self.held -= nbytes
                self.holders -= 1
                self._cond.notify_all()
