"""Does a reader arriving after a waiting writer get the per-GPU lock first? (kernelflow/eval/clock/gpu_lock.py)

    python benchmarks/probes/gpu_lock_order.py --trials 10 --wait-s 2      # any machine; ~30 s, no GPU

Each trial: reader 1 takes the lock shared and keeps it; a writer then asks for it exclusively and
waits; after `--settle-s` a second reader asks for it shared with a limit of `--wait-s`. With writer
preference the second reader must time out (it queues behind the writer, which waits for reader 1).
Prints how often it got in anyway, for `GpuLock` and, with `--raw`, for filelock's bare
`ReadWriteLock` (the lock before session 6's turnstile: 3 of 10 on the CI machine). A diagnostic of
the lock's ordering, not a timing benchmark.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from filelock import ReadWriteLock, Timeout

from kernelflow.eval.clock.gpu_lock import GpuLock, GpuLockTimeout


class BareLock:
    """filelock's ReadWriteLock alone, with GpuLock's interface."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "bare.rwlock"

    def shared(self, timeout_s: float = -1):
        return self._hold("read", timeout_s)

    def exclusive(self, timeout_s: float = -1):
        return self._hold("write", timeout_s)

    @contextmanager
    def _hold(self, mode: str, timeout_s: float):
        rw = ReadWriteLock(self.path, timeout_s, is_singleton=False)
        try:
            with rw.read_lock() if mode == "read" else rw.write_lock():
                yield
        finally:
            rw.close()


def late_reader_got_in(lock, settle_s: float, wait_s: float) -> bool:
    """One trial (see the module docstring): True when the second reader overtook the waiting writer."""
    first_in = threading.Event()
    first_may_leave = threading.Event()

    def first_reader():
        with lock.shared():
            first_in.set()
            first_may_leave.wait(wait_s + settle_s + 30)

    def writer():
        with lock.exclusive():
            pass

    r1 = threading.Thread(target=first_reader)
    r1.start()
    first_in.wait(30)
    w = threading.Thread(target=writer)
    w.start()
    time.sleep(settle_s)
    try:
        with lock.shared(timeout_s=wait_s):
            got_in = True
    except (Timeout, GpuLockTimeout):
        got_in = False
    first_may_leave.set()
    r1.join()
    w.join()
    return got_in


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--settle-s", type=float, default=0.5, help="time the writer gets to queue")
    ap.add_argument("--wait-s", type=float, default=2.0, help="how long the second reader tries")
    ap.add_argument("--raw", action="store_true", help="also measure filelock's bare ReadWriteLock")
    args = ap.parse_args()
    kinds = {"GpuLock": lambda d: GpuLock(d, 0)}
    if args.raw:
        kinds["bare ReadWriteLock"] = BareLock
    for name, make in kinds.items():
        got = sum(late_reader_got_in(make(Path(tempfile.mkdtemp())), args.settle_s, args.wait_s)
                  for _ in range(args.trials))
        print(f"{name}: a later reader got in while a writer waited in {got} of {args.trials} trials "
              f"(reader tried {args.wait_s} s, writer queued {args.settle_s} s before)")


if __name__ == "__main__":
    main()
