"""The per-GPU readers-writer lock (kernelflow/eval/clock/gpu_lock.py): real files, threads and processes, no GPU.

Shared holders coexist; an exclusive holder excludes everyone, across threads and processes; a waiting
exclusive holder is served before shared holders that arrive after it; a holder killed by a signal
frees the lock; spawning processes from other threads while holds come and go never deadlocks
(filelock's ReadWriteLock did, on the H200), and a process spawned during a hold does not keep it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kernelflow.eval.clock.gpu_lock import GpuLock
from kernelflow.eval.clock.gpu_lock import GpuLockTimeout as Timeout
from kernelflow.eval.clock.timing import device_lock


@pytest.fixture
def lock(tmp_path):
    return GpuLock(tmp_path, 0)


def test_shared_holders_coexist_and_exclude_an_exclusive_one(lock):
    with lock.shared(), lock.shared(timeout_s=2):  # a second shared hold does not wait
        with pytest.raises(Timeout):
            with lock.exclusive(timeout_s=0.3):
                pass
    with lock.exclusive(timeout_s=2):  # free again once both are released
        with pytest.raises(Timeout):
            with lock.shared(timeout_s=0.3):
                pass


def test_other_gpus_are_not_held(lock, tmp_path):
    with lock.exclusive(), GpuLock(tmp_path, 1).exclusive(timeout_s=2):
        pass


def test_device_lock_is_the_exclusive_mode(lock, tmp_path):
    with device_lock(0, str(tmp_path)):
        with pytest.raises(Timeout):
            with lock.shared(timeout_s=0.3):
                pass


def test_a_waiting_exclusive_holder_goes_before_later_shared_ones(lock):
    order: list[str] = []
    first_may_leave = threading.Event()

    def first_reader():
        with lock.shared():
            order.append("reader 1 in")
            first_may_leave.wait(10)
            order.append("reader 1 out")

    def writer():
        with lock.exclusive():
            order.append("writer in")
            time.sleep(0.1)
            order.append("writer out")

    def late_reader():
        with lock.shared():
            order.append("reader 2 in")

    r1 = threading.Thread(target=first_reader)
    r1.start()
    while not order:
        time.sleep(0.01)

    def admits_a_reader() -> bool:
        try:
            with lock.shared(timeout_s=0.05):
                return True
        except Timeout:
            return False

    w = threading.Thread(target=writer)
    w.start()
    # Wait until the writer has queued: from then on no new reader gets in (on a reader-preferring lock
    # that never happens, and reader 2 below gets in). A fixed sleep could be too short on a loaded machine.
    deadline = time.monotonic() + 20
    while admits_a_reader() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "writer in" not in order
    r2 = threading.Thread(target=late_reader)
    r2.start()
    time.sleep(0.5)
    assert "reader 2 in" not in order  # queued behind the writer although only a reader holds the lock
    first_may_leave.set()
    for t in (r1, w, r2):
        t.join(10)
    assert order == ["reader 1 in", "reader 1 out", "writer in", "writer out", "reader 2 in"]


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kernelflow.eval.clock.gpu_lock import GpuLock
    with GpuLock(Path(sys.argv[1]), 0).exclusive():
        print("held", flush=True)
        time.sleep(600)
""")


def test_a_holder_in_another_process_excludes_us_and_its_death_frees_the_lock(lock, tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(Timeout):
            with lock.shared(timeout_s=0.3):
                pass
        proc.kill()  # SIGKILL: no release code runs; the OS drops its locks
        proc.wait(10)
        with lock.exclusive(timeout_s=5):
            pass
        with lock.shared(timeout_s=5):
            pass
    finally:
        if proc.poll() is None:
            proc.kill()


def test_holds_and_spawns_in_many_threads_never_deadlock(lock):
    """The judge's pattern: threads spawn workers while other threads take and drop both kinds of hold.

    With filelock 3.32.5's ReadWriteLock this stalled for good on the H200 (one thread in
    subprocess -> filelock `_pin_fork_objects`, the others in `_fork_transition`); reproduced on the
    CPU with that filelock and the old lock (this test's pattern hung; filelock 4.3.1 did not)."""
    stop = time.monotonic() + 3.0
    errors: list[BaseException] = []

    def holder(exclusive: bool) -> None:
        try:
            while time.monotonic() < stop:
                with lock.exclusive() if exclusive else lock.shared():
                    time.sleep(0.001)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    def spawner() -> None:
        try:
            while time.monotonic() < stop:
                # preexec_fn as the judge's spawns have (rlimits): it makes CPython run the at-fork
                # hooks, where filelock's fork tracking waited on the holders' threads.
                subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60, preexec_fn=lambda: None)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=holder, args=(i % 2 == 0,), daemon=True) for i in range(4)]
    threads += [threading.Thread(target=spawner, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], "a thread is stuck: the lock deadlocked"
    assert not errors, errors


def test_a_process_spawned_during_a_hold_does_not_keep_it(lock, tmp_path):
    with lock.exclusive():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
    try:
        with lock.exclusive(timeout_s=5):  # the child is alive and holds nothing of ours
            pass
    finally:
        child.kill()
        child.wait(10)
