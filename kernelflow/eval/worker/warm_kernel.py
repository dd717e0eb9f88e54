"""A tiny Triton kernel the worker launches while warming up, before any submission is handed over.

Why: a submission's first call pays one-off costs of the process that have nothing to do with it.
The first aten op dispatched to a Python TorchDispatchMode (the worker's DispatchGuard is active around
every forward, and a forward's `torch.empty_like` is such an op) imports torch._higher_order_ops'
Triton wrapper and with it torch._dynamo, sympy and FSDP: 1.2 s on this CPU, 4-4.5 s on the H200, where
the image's site-packages are compiled from source on import. And Triton's first launch initialises
its CUDA driver stubs and hashes its own sources for cache keys (~0.7 s). Measured on the H200
(benchmarks/probes/compile_probe.py, docs/eval_speed.md): a submission's first call took 4.4-4.9 s under the
guard against 1.0-1.6 s without it. Paying both in the warm-up, by allocating *inside* the guard and
then launching, moves them off the verdict's path when workers are pre-warmed (`prewarm_workers`).

What it does not do: share anything with a submission. It runs before the submission is imported, its
compiled artifacts go to the worker's own Triton cache (Triton's code, not the submission's), and its
launch is not counted (its count is reset before the submission is imported).

A cost to watch: the warm-up runs outside the per-GPU timing lock, like the worker's CUDA start-up
before it, so its one 64-element kernel may run on the GPU while another verdict is timing. That is one
context switch (tens of microseconds) inside at most one of that verdict's 20 timed calls, whose median
is what counts; measuring it is listed in docs/eval_speed.md.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def launch_under(guard, device) -> bool:
    """Launch the kernel once on `device` inside `guard` (a fresh DispatchGuard); True if it computed right."""
    import torch

    with torch.no_grad(), guard:
        # Allocated under the guard on purpose: the first aten op a dispatch mode sees is the costly
        # one (a launch alone dispatches none on CUDA, which is why the first version of this missed it).
        x = torch.zeros(64, dtype=torch.float32, device=device)
        _add_one[(1,)](x, x.numel(), BLOCK=64)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return bool((x == 1.0).all())
