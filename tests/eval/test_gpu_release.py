"""A call whose GPU work will never finish, and the judge taking its stream back (clock/gpu_signal.py).

On the H200 (benchmarks/probes/ipc_wait_probe.py) a wait on an inter-process event recorded by a worker that
faulted or was killed never ends; the judge now waits for a value in its own memory and writes that
value itself when the worker's work will not come: at the call's limit, or when the worker reports a
GPU fault or dies. These tests run the judge's side of that on the CPU with stand-ins for the CUDA
event and the release helper; the real path is in tests/eval/test_gpu_evaluator.py (GPU).
"""

from __future__ import annotations

import time
from multiprocessing import Pipe

import pytest

from kernelflow.eval import EvalConfig, protocol
from kernelflow.eval.clock import gated_clock, gpu_signal
from kernelflow.eval.clock.gated_clock import GatedClock, GpuStalled, GpuWorkAbandoned
from kernelflow.eval.session import JudgeSession
from kernelflow.eval.session.link import WorkerGpuFault, WorkerLink
from kernelflow.tasks import get_task
from tests.helpers.solutions import solution_source


class _Tail:
    """A stand-in CUDA event that completes once `released` is set (never, if it is not)."""

    def __init__(self):
        self.released = False

    def query(self) -> bool:
        return self.released


def _clock(seq: int = 3) -> GatedClock:
    clock = object.__new__(GatedClock)  # settle() needs only the shared flag and the call's number
    clock.shared_flag, clock.seq = gpu_signal.SharedFlag(0, bytes(64), 512), seq
    return clock


def _release_that_works(tail, calls):
    def release(flag, value):
        calls.append((flag.offset, value))
        tail.released = True
        return None
    return release


def test_a_call_past_its_limit_is_released_by_the_judge_and_abandoned(monkeypatch):
    tail, calls = _Tail(), []
    monkeypatch.setattr(gpu_signal, "release", _release_that_works(tail, calls))
    with pytest.raises(GpuWorkAbandoned) as info:
        _clock().settle(tail, time.monotonic() + 0.2)
    assert isinstance(info.value.cause, GpuStalled)
    assert calls == [(512, 3)]  # the call's own done value: exactly what its worker would have written


def test_a_worker_that_reports_a_gpu_fault_ends_the_wait_at_once(monkeypatch):
    tail, calls = _Tail(), []
    monkeypatch.setattr(gpu_signal, "release", _release_that_works(tail, calls))

    def abort():
        raise WorkerGpuFault("CUDA error: an illegal memory access was encountered")

    t0 = time.monotonic()
    with pytest.raises(GpuWorkAbandoned) as info:
        _clock(seq=7).settle(tail, t0 + 60, abort=abort)
    assert isinstance(info.value.cause, WorkerGpuFault)
    assert calls == [(512, 7)]
    assert time.monotonic() - t0 < 30  # not the call's limit


def test_a_release_that_fails_is_a_stall(monkeypatch):
    monkeypatch.setattr(gpu_signal, "release", lambda flag, value: "the release helper failed (status 1)")
    with pytest.raises(GpuStalled, match="release helper failed"):
        _clock().settle(_Tail(), time.monotonic() + 0.1)


def test_a_stream_that_does_not_resume_after_the_release_is_a_stall(monkeypatch):
    monkeypatch.setattr(gpu_signal, "release", lambda flag, value: None)  # written, but nothing moves
    monkeypatch.setattr(gated_clock, "RESUME_WAIT_S", 0.2)
    with pytest.raises(GpuStalled, match="did not resume"):
        _clock().settle(_Tail(), time.monotonic() + 0.1)


def test_a_finished_call_needs_no_release(monkeypatch):
    tail = _Tail()
    tail.released = True
    monkeypatch.setattr(gpu_signal, "release", lambda flag, value: pytest.fail("released a finished call"))
    _clock().settle(tail, time.monotonic() + 1)


def test_done_values_are_fresh_nonzero_nonces_not_a_count():
    # The submission's kernels can write the flag (it sits next to the inputs): only a value they cannot
    # guess keeps an early write from ending the judge's window (clock/gpu_signal.py).
    values = [gpu_signal.next_value() for _ in range(200)]
    assert all(0 < v < (1 << 31) for v in values)
    assert len(set(values)) == len(values)
    assert values != sorted(values)  # not a counter


def test_the_release_helper_reports_why_it_could_not_write():
    # No CUDA driver on this host: the helper process fails, and says so instead of raising.
    why = gpu_signal.release(gpu_signal.SharedFlag(0, bytes(64), 0), 1, timeout_s=60)
    assert why is not None and "release helper failed" in why


def _link_with_pipe():
    link = WorkerLink.__new__(WorkerLink)
    judge_end, worker_end = Pipe()
    link.handle = type("Handle", (), {"conn": judge_end})()
    return link, worker_end


def test_check_quiet_raises_for_the_workers_gpu_fault_and_its_death_and_nothing_else():
    link, worker = _link_with_pipe()
    link.check_quiet()  # nothing said: the wait goes on
    worker.send_bytes(protocol.encode(protocol.GpuFault("CUDA error: an illegal memory access")))
    with pytest.raises(WorkerGpuFault, match="illegal memory access"):
        link.check_quiet()
    worker.send_bytes(protocol.encode(protocol.Probed()))
    with pytest.raises(protocol.ProtocolViolation, match="expected GpuFault"):
        link.check_quiet()
    worker.close()
    with pytest.raises(EOFError):
        link.check_quiet()


def test_check_quiet_bounds_a_frame_like_recv_does():
    link, worker = _link_with_pipe()
    worker.send_bytes(b"x" * (protocol.MAX_FRAME + 1))  # the submission's fault, never the judge's OSError
    with pytest.raises(protocol.ProtocolViolation, match="a frame over"):
        link.check_quiet()


def test_a_gpu_fault_after_the_reply_is_the_submissions_runtime_error(monkeypatch):
    session = JudgeSession(get_task("19_ReLU"), solution_source("19_ReLU"), EvalConfig(backend="interpret"),
                           "interpret", __import__("torch").device("cpu"), [0])

    def faults(start):
        session._label, session._limit = "seed 0", 10.0
        raise WorkerGpuFault("AcceleratorError: CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(session, "_run", faults)
    outcome = session.run()
    assert outcome.status == "runtime_error"
    assert "call seed 0: the kernel failed on the GPU" in outcome.detail
    assert "illegal memory access" in outcome.checks["forward_runs"].why
    assert not session.gpu_stalled
