"""The per-GPU readers-writer lock that keeps our own work out of every measurement.

One lock per GPU, shared by every process and thread of ours on the host (evaluators, the CLI,
benchmarks, calibration), in two modes:

- `exclusive()`: timed phases (a verdict's timed calls, eager and torch.compile timing, bandwidth
  calibration, the timer-overhead measurement). Nothing else of ours runs on the GPU meanwhile.
- `shared()`: work that is checked but not timed (a verdict's compilation and correctness calls, their
  float64 references). Any number of holders at once, none while an exclusive hold is active.

Exclusive holders are preferred: once one waits, new shared holders queue behind it, so a steady
stream of correctness calls cannot starve the timings. filelock's `ReadWriteLock` provides all of it
across processes and threads: SQLite transactions on one small database file, where a waiting writer
holds SQLite's PENDING lock, which admits no new readers (tests/eval/test_gpu_lock.py pins this
order). Each hold opens its own instance (`is_singleton=False`): a thread that must wait for another
thread's conflicting hold needs its own connection. SQLite's locks are the OS's, released when a
holder's process dies, so a killed judge never leaves a GPU locked.

What it does not do: it orders only work that takes it. Pre-warmed workers warming up, other users'
jobs and a trainer generating on the same GPU are not covered (docs/eval_speed.md), and nothing
stops a submission's own process from running while it holds no lock: the judge only sends it calls
under a hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import ReadWriteLock


class GpuLock:
    """The readers-writer lock of one GPU, by a file in `directory` (see the module docstring)."""

    def __init__(self, directory: Path, device_index: int) -> None:
        self.path = directory / f"gpu{device_index}.rwlock"

    @contextmanager
    def exclusive(self, timeout_s: float = -1) -> Iterator[None]:
        """Hold the GPU alone. `timeout_s` < 0 waits forever; otherwise filelock.Timeout when it expires."""
        with self._hold("write", timeout_s):
            yield

    @contextmanager
    def shared(self, timeout_s: float = -1) -> Iterator[None]:
        """Hold the GPU beside other shared holders, never beside an exclusive one."""
        with self._hold("read", timeout_s):
            yield

    @contextmanager
    def _hold(self, mode: str, timeout_s: float) -> Iterator[None]:
        rw = ReadWriteLock(self.path, timeout_s, is_singleton=False)
        try:
            with rw.write_lock() if mode == "write" else rw.read_lock():
                yield
        finally:
            rw.close()
