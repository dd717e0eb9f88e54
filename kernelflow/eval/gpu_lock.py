"""The per-GPU readers-writer lock that keeps our own work out of every measurement.

One lock per GPU, shared by every process and thread of ours on the host (evaluators, the CLI,
benchmarks, calibration), in two modes:

- `exclusive()`: timed phases (a verdict's timed calls, eager and torch.compile timing, bandwidth
  calibration, the timer-overhead measurement). Nothing else of ours runs on the GPU meanwhile.
- `shared()`: work that is checked but not timed (a verdict's compilation and correctness calls, their
  float64 references). Any number of holders at once, none while an exclusive hold is active.

Exclusive holders are preferred: once one waits, new shared holders queue behind it, so a steady
stream of correctness calls cannot starve the timings. filelock's `ReadWriteLock` provides the two
modes across processes and threads (SQLite transactions on one small database file), but not the
preference: a waiting writer retries in 0.1 s slices and between them a new reader can get in (3 of 10
tries within 2 s: benchmarks/gpu_lock_order.py --raw). So a turnstile comes first: a plain `FileLock`
on a second file that a writer holds from before it asks for the write lock until it has it, and that
every reader passes through (takes and drops) before asking for the read lock; a reader arriving after
a writer therefore waits for that writer (tests/eval/test_gpu_lock.py pins this order). Each hold opens its own instances
(`is_singleton=False`): a thread that must wait for another thread's conflicting hold needs its own
connection and file descriptor. Both locks are the OS's, released when a holder's process dies, so a
killed judge never leaves a GPU locked.

What it does not do: it orders only work that takes it. Pre-warmed workers warming up, other users'
jobs and a trainer generating on the same GPU are not covered (docs/eval_speed.md), and nothing
stops a submission's own process from running while it holds no lock: the judge only sends it calls
under a hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, ReadWriteLock


class GpuLock:
    """The readers-writer lock of one GPU, by two files in `directory` (see the module docstring)."""

    def __init__(self, directory: Path, device_index: int) -> None:
        self.path = directory / f"gpu{device_index}.rwlock"
        self.turnstile = directory / f"gpu{device_index}.turnstile"

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
        deadline = None if timeout_s < 0 else time.monotonic() + timeout_s

        def left() -> float:
            return -1 if deadline is None else max(0.0, deadline - time.monotonic())

        rw = ReadWriteLock(self.path, timeout_s, is_singleton=False)
        try:
            with FileLock(self.turnstile, timeout=timeout_s, is_singleton=False):
                if mode == "write":  # keep later readers at the turnstile until the write lock is ours
                    rw.acquire_write(timeout=left())
            if mode == "read":
                rw.acquire_read(timeout=left())
            try:
                yield
            finally:
                rw.release()
        finally:
            rw.close()
