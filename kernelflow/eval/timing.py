"""GPU timing on the judge's side: the per-device lock, eager-PyTorch timing and the calibration runs.

Every timed phase of ours (a verdict's calls, eager timing, calibration, benchmarks) holds
`device_lock(index)`, a cross-process file lock per GPU, so no work of ours overlaps a measurement.
`time_cuda(fn, ...)` times a callable the way the worker times a submission: fresh inputs made
before the clock starts, L2 flushed after they are made, device-wide synchronize before the end
event, median with min/max kept.

This module does not time submissions (the worker does, in its own process) and has no CPU timing:
under the Triton interpreter nothing is timed.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock


def cache_dir(configured: str | None = None) -> Path:
    """Where calibration results and lock files live (KERNELFLOW_CACHE_DIR or ~/.cache/kernelflow)."""
    path = Path(configured or os.environ.get("KERNELFLOW_CACHE_DIR") or Path.home() / ".cache" / "kernelflow")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def device_lock(device_index: int, configured_dir: str | None = None, timeout_s: float = -1):
    """Hold the exclusive timing lock of one GPU (shared by the CLI, benchmarks and the server)."""
    lock = FileLock(str(cache_dir(configured_dir) / f"gpu{device_index}.lock"), timeout=timeout_s)
    with lock:
        yield


@dataclass(frozen=True)
class TimingResult:
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int


def time_cuda(
    fn: Callable[[torch.Tensor], object],
    make_input: Callable[[int], torch.Tensor],
    runs: int,
    warmup: int = 2,
    l2_flush_mb: int = 256,
    device: torch.device | None = None,
) -> TimingResult:
    """Median time of `fn(make_input(i))` over `runs` calls after `warmup` untimed ones."""
    device = device or torch.device("cuda")
    flush = torch.empty(l2_flush_mb << 20, dtype=torch.uint8, device=device)
    times = []
    for i in range(warmup + runs):
        x = make_input(i)
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        with torch.no_grad():
            fn(x)
        torch.cuda.synchronize(device)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
        del x
    return TimingResult(statistics.median(times), min(times), max(times), len(times))


def measure_copy_bandwidth(device: torch.device, nbytes: int = 2 << 30, runs: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    result = time_cuda(lambda _: dst.copy_(src), lambda _: src, runs=runs, warmup=3, device=device)
    return 2 * nbytes / (result.median_ms * 1e-3)


def measure_matmul_rate(device: torch.device, dtype: torch.dtype = torch.float32, n: int = 8192, runs: int = 5) -> float:
    """Dense matmul rate in flop/s in `dtype` (TF32 off for float32: our tasks are plain fp32)."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        result = time_cuda(lambda _: a @ b, lambda _: a, runs=runs, warmup=2, device=device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / (result.median_ms * 1e-3)
