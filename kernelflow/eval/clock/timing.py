"""GPU timing on the judge's side: the per-device lock, eager-PyTorch timing and the calibration runs.

Every timed phase of ours (a verdict's timed calls, eager timing, calibration, benchmarks) holds
`device_lock(index)`, the exclusive mode of the GPU's cross-process lock (clock/gpu_lock.py), so no work of
ours overlaps a measurement.
`time_cuda(fn, ...)` times a callable in the judge's own process (eager references, calibration): fresh inputs made
before the clock starts, L2 flushed after they are made, the GPU kept busy by a short spin while
the host reaches its first launch (`cover_launch_latency`), device-wide synchronize before the end
event, the protocol's own overhead on an empty region subtracted (`timer_overhead_ms`), median with
min/max kept.

This module does not time submissions: the judge times those itself, with its own CUDA events around
the worker's calls (`clock/gated_clock.py`). It has no CPU timing: under the Triton interpreter nothing is timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelflow.cache_dir import cache_root
from kernelflow.eval.clock.gpu_lock import GpuLock


def cache_dir(configured: str | None = None) -> Path:
    """Where calibration results and lock files live: `configured`, else kernelflow/cache_dir.py's
    cache_root() ($KERNELFLOW_CACHE_DIR or ~/.cache/kernelflow)."""
    path = Path(configured) if configured else cache_root()
    path.mkdir(parents=True, exist_ok=True)
    return path


def gpu_lock(device_index: int, configured_dir: str | None = None) -> GpuLock:
    """The readers-writer lock of one GPU (clock/gpu_lock.py), shared by the CLI, benchmarks and the server."""
    return GpuLock(cache_dir(configured_dir), device_index)


@contextmanager
def device_lock(device_index: int, configured_dir: str | None = None, timeout_s: float = -1):
    """Hold one GPU's lock exclusively: no other work of ours runs on it meanwhile."""
    with gpu_lock(device_index, configured_dir).exclusive(timeout_s):
        yield


# An uncontended H200 measures ~0.008 ms; more than this means other work shared the GPU.
MAX_TIMER_OVERHEAD_MS = 0.03

# ~1 ms of GPU spin at H200 clocks (1.98 GHz): longer than the host needs from `start.record()` to its
# first kernel launch (a Python launcher takes ~0.05-0.1 ms), short beside a verdict's wall time.
LAUNCH_COVER_CYCLES = 2_000_000


def cover_launch_latency(cycles: int = LAUNCH_COVER_CYCLES) -> None:
    """Queue a GPU spin on the current stream, to be called right before the start event is recorded.

    Without it the GPU sits idle from the start event until the host's first launch arrives, and a
    0.13 ms kernel is timed at ~0.2 ms: the clock measures the launcher's Python path, not the kernel.
    With the GPU busy spinning, the start event and the first kernel run back to back once the spin
    ends. Host gaps *between* a submission's kernels are still counted: they are its own cost.
    """
    torch.cuda._sleep(cycles)


def measure_timer_overhead(device: torch.device | None = None, runs: int = 20) -> float:
    """The smallest time (ms) our timing protocol reports for a region that does nothing.

    The end event is recorded only after a device-wide synchronize returns (so work on any stream is
    counted), which adds the host's wake-up and the event's own latency, ~0.01-0.02 ms: small beside a
    3 ms kernel, 10% of a 0.13 ms one. Both the worker and `time_cuda` subtract it. The minimum, not the
    median, is used so the correction never exceeds what an empty region was actually measured at, and
    it is capped at `MAX_TIMER_OVERHEAD_MS`: on a GPU shared with work that is not ours (a trainer
    generating on the same device) an empty region can read 0.3 ms, and subtracting that would make
    every kernel look faster than it is. Call it while holding the device lock.
    """
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        cover_launch_latency()
        start.record()
        torch.cuda.synchronize(device)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return min(min(times), MAX_TIMER_OVERHEAD_MS)


_OVERHEAD_MS: dict[str, float] = {}

# CUDA events resolve about 0.5 us. A tiny kernel's time minus the protocol overhead can come out at or
# below zero from noise; no reported time goes under this, so ratios of times stay defined.
MIN_RESOLVABLE_MS = 1e-3


def net_time_ms(raw_ms: float, overhead_ms: float) -> float:
    """A measured region's time with the protocol overhead taken off, never below the event resolution."""
    return max(raw_ms - overhead_ms, MIN_RESOLVABLE_MS)


def timer_overhead_ms(device: torch.device) -> float:
    """`measure_timer_overhead` once per device in this process."""
    key = str(device)
    if key not in _OVERHEAD_MS:
        _OVERHEAD_MS[key] = measure_timer_overhead(device)
    return _OVERHEAD_MS[key]


@dataclass(frozen=True)
class TimingResult:
    median_ms: float
    min_ms: float
    max_ms: float
    runs: int


def time_cuda(
    fn: Callable[..., object],
    make_input: Callable[[int], torch.Tensor | list[torch.Tensor]],
    runs: int,
    warmup: int = 2,
    l2_flush_mb: int = 256,
    device: torch.device | None = None,
) -> TimingResult:
    """Median time of `fn(make_input(i))` over `runs` calls after `warmup` untimed ones.

    When `make_input` returns a list, its tensors are passed as separate arguments: `fn(*inputs)`.
    """
    device = device or torch.device("cuda")
    overhead = timer_overhead_ms(device)
    flush = torch.empty(l2_flush_mb << 20, dtype=torch.uint8, device=device)
    times = []
    for i in range(warmup + runs):
        x = make_input(i)
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        cover_launch_latency()
        start.record()
        with torch.no_grad():
            fn(*x) if isinstance(x, list | tuple) else fn(x)
        torch.cuda.synchronize(device)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(net_time_ms(start.elapsed_time(end), overhead))
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
