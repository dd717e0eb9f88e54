"""The judge's clock for a CUDA call: started and stopped by the judge's own events, around a gate.

Why: the submission runs in the worker, and the worker's Python can reach and replace any timer in
its process (issue #17 measured a LogSoftmax that patched the worker's timing function and earned
3.00). So no time a verdict uses is measured there. Per call, on the judge's stream:

    flush L2 | spin ~2 ms | copy the call's fresh inputs in | START | record GATE
    worker:                   wait GATE | forward's launches | (host checks, export) | write FLAG = n | reply
    judge, at the reply:      wait FLAG == n | END | copy the output

`START -> END` is GPU time as the judge's context sees it: the worker's work cannot start before the
gate opens (its inputs only exist from just before START: earlier work computes on the previous
call's values and fails the check), and the output is copied right behind END, so work that is not
finished by then is caught as wrong values. The window also holds two context switches between the
judge's and the worker's CUDA contexts (~0.29 ms on an H200, steady to ~0.01 ms): measured once per
evaluator with a worker that has no submission (`calibrate`), and subtracted. A window shorter than
an empty call means the work ran outside the gate, which no honest kernel can do (`gate_respected`).
The spin lets the host path (the worker's launches and checks, its reply, the judge's END) happen
while the GPU is still busy; so the worker does all its host work before FLAG, replies right after
it and queues no GPU work of its own after FLAG (a kernel there would compete with END for the GPU),
and the judge draws the inputs before `open` (drawing them synchronises its host: torch.unique).
FLAG is an int32 in the session's arena and n a random nonce of the call (clock/gpu_signal.py): unlike an
inter-process DONE event, which never completes once its recorder faults or dies (measured on the
H200), the judge can write the value itself when the worker's work will never finish, so a faulting
or never-ending kernel costs its own verdict and nothing else (`settle`).
If START had already passed when the worker's reply arrived (`late`), the GPU may have waited for
the host inside the window: the time is too slow (never too fast), and the spin doubles for the next
call; late timed calls are left out of the median when most are on time.

History, on the H200 (2026-12-01; docs/evaluator.md, "Evaluator v2 on the H200"): with a fixed ~1 ms
spin every control read 1.1-1.8 ms slow; with a ~2 ms adaptive spin still 0.6-1.4 ms, all 20 timed
calls of every control late with the spin at its 64 ms cap. Two causes: the worker exported its
output and checked for tampering after its done signal, and the judge's input draw blocked its host until the
spin had run out, so the gate opened late whatever the spin. Both are fixed as described above.

Assumes time-sliced contexts (the default compute mode, no MPS): the judge's and the worker's
kernels never run at the same time. Measured on the H200 in docs/evaluator.md ("Judge-side timing").
Not covered: work hidden so that it finishes in the instant between the input copy and START (a
preemption exactly there; the median over the timed calls absorbs a rare one).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from kernelflow.eval.clock import gpu_signal
from kernelflow.eval.clock.timing import LAUNCH_COVER_CYCLES, MIN_RESOLVABLE_MS

MAX_SPIN_FACTOR = 32
START_SPIN_CYCLES = 2 * LAUNCH_COVER_CYCLES  # ~2 ms at H200 clocks
CALIBRATION_CALLS = 20
RESUME_WAIT_S = 20.0  # after the judge wrote the flag: its stream resumes at once, or never


class GpuStalled(RuntimeError):
    """GPU work the judge queued for a call did not complete, even after the judge released its wait.

    Raised by `wait_for` at a deadline, and by `GatedClock.settle` when writing the call's flag did
    not let the judge's stream resume (a driver without stream memory operations, a helper that could
    not run). Everything queued behind it in this process waits too, so the evaluator stops using its
    GPU state once this escapes a session (evaluator.py); the host never blocks on it without a deadline.
    """


class GpuWorkAbandoned(Exception):
    """The judge gave up on a call's GPU work and released its stream by writing the flag itself.

    `cause` says why: `GpuStalled` (the call's limit passed: a kernel that never ends), or what the
    `abort` check raised (the worker reported a GPU fault, died, or broke the protocol). The judge's
    GPU state is healthy again; the verdict is the submission's.
    """

    def __init__(self, cause: Exception):
        super().__init__(str(cause))
        self.cause = cause


class GpuHealth:
    """One evaluator's record of a stalled GPU stream: set once, by the first session that saw it.

    Set at the raise site, before the session lets go of its GPU lock hold, so no other thread of
    this evaluator starts GPU work (a baseline timing, a calibration) behind the pending wait.
    """

    def __init__(self) -> None:
        self.stalled: str | None = None

    def stall(self, why: str) -> None:
        if self.stalled is None:
            self.stalled = why


def wait_for(event: torch.cuda.Event, deadline: float | None, what: str, abort=None) -> None:
    """Wait on the host until `event` has completed; GpuStalled at `deadline` (time.monotonic()).

    Polling instead of `event.synchronize()`: the latter cannot be bounded. Only the host notices
    the completion later (at most ~1 ms); the event's own timestamp, which the clock reads, is the
    GPU's. `abort()`, called between polls, may raise to end the wait early (the worker said its
    GPU work failed).
    """
    pause = 20e-6
    while not event.query():
        if deadline is not None and time.monotonic() >= deadline:
            raise GpuStalled(what)
        if abort is not None:
            abort()
        time.sleep(pause)
        pause = min(pause * 2, 1e-3)


@dataclass(frozen=True)
class GateCalibration:
    """What the judge's clock reads for a call that does no work (an empty gated call)."""

    median_ms: float
    min_ms: float
    max_ms: float
    runs: int


class GatedClock:
    """One session's gate event, done flag and judge-side timing (see the module docstring).

    `flag`: a zeroed int32 of its own in memory only this session's worker maps (the session's arena)."""

    def __init__(self, device: torch.device, l2_flush_mb: int, flag: torch.Tensor,
                 spin_cycles: int = START_SPIN_CYCLES):
        self.device = device
        self.gate = torch.cuda.Event(interprocess=True)
        self.flag = flag
        with torch.cuda.device(device):  # the driver calls need this device's context current
            self.shared_flag = gpu_signal.share(flag.data_ptr(), device.index or 0)  # now, while all is healthy
        self.seq = 0  # the current call's done value (a random nonce, gpu_signal.next_value): the worker writes it
        self.flush = torch.empty(l2_flush_mb << 20, dtype=torch.uint8, device=device)
        self.base_spin = self.spin = spin_cycles
        self.late_calls = 0
        self.start = self.end = None
        self.late = False

    def send_gates(self, link) -> None:
        """Give a warm worker (`link`, before its handover) the gate event and the flag."""
        with torch.cuda.device(self.device):  # the event is created lazily, at its first use
            message = {"op": "gates", "gate": self.gate.ipc_handle(), "flag": self.flag}
        link.handle.conn.send(message)

    def open(self, write_inputs=None) -> None:
        """Queue flush, spin, the inputs, START and the gate (call `stop` after the worker's reply).
        `write_inputs` must only queue device work: a host that blocks here opens the gate late."""
        with torch.cuda.device(self.device):
            self.flush.zero_()
            torch.cuda._sleep(self.spin)
            if write_inputs is not None:
                write_inputs()
            self.start = torch.cuda.Event(enable_timing=True)
            self.start.record()
            self.gate.record()
            self.seq = gpu_signal.next_value()

    def stop(self) -> None:
        """Queue END behind the worker's flag write; anything queued after this follows the timed window."""
        with torch.cuda.device(self.device):
            self.late = bool(self.start.query())  # the gate opened before the worker's reply: see the docstring
            gpu_signal.wait_value(torch.cuda.current_stream().cuda_stream, self.flag.data_ptr(), self.seq)
            self.end = torch.cuda.Event(enable_timing=True)
            self.end.record()

    def settle(self, tail: torch.cuda.Event, deadline: float | None, abort=None) -> None:
        """Wait until `tail` (queued after END) has completed: the window is over and what follows it done.

        At `deadline`, or when `abort()` raises, the judge writes the call's flag itself (clock/gpu_signal.py)
        and waits for its stream to resume: GpuWorkAbandoned if it did (the verdict is the submission's),
        GpuStalled if not (this process's GPU state is lost)."""
        try:
            wait_for(tail, deadline, "the call's GPU work", abort)
            return
        except Exception as exc:  # noqa: BLE001 - GpuStalled, or whatever `abort` raised
            cause = exc
        why = gpu_signal.release(self.shared_flag, self.seq)
        if why is None:
            try:
                wait_for(tail, time.monotonic() + RESUME_WAIT_S, "the judge's stream after the release")
            except GpuStalled:
                why = f"the judge's stream did not resume within {RESUME_WAIT_S:.0f} s of writing the flag"
        if why is not None:
            raise GpuStalled(f"the call's GPU work ({why})") from cause
        raise GpuWorkAbandoned(cause) from cause

    def elapsed_ms(self, adapt: bool = True) -> float:
        """The window's raw length, once `settle` returned; doubles the spin after a late call (`adapt`:
        not for the compile call)."""
        raw = self.start.elapsed_time(self.end)
        if self.late and adapt:
            self.late_calls += 1
            self.spin = min(self.spin * 2, self.base_spin * MAX_SPIN_FACTOR)
        return raw


def timed_median_input(times: list[tuple[float, bool]]) -> list[float]:
    """The timed calls' times for the median: the on-time ones when they are most, else all of them."""
    on_time = [t for t, late in times if not late]
    return on_time if 2 * len(on_time) > len(times) else [t for t, _ in times]


def net_ms(raw_ms: float, calibration: GateCalibration) -> float:
    """A window with the empty call's length taken off, never below the event resolution."""
    return max(raw_ms - calibration.median_ms, MIN_RESOLVABLE_MS)


def gate_respected(raw_ms: float, calibration: GateCalibration) -> bool:
    """False for a window shorter than any empty call could be: the work did not wait for the gate."""
    return raw_ms >= 0.9 * calibration.min_ms


def calibrate(link, device: torch.device, l2_flush_mb: int, flag: torch.Tensor,
              calls: int = CALIBRATION_CALLS) -> GateCalibration:
    """Empty gated calls with a warm worker that has no submission (`link` is warm; the caller holds
    the GPU exclusively, gives a zeroed `flag` in memory of its own and closes the link)."""
    from kernelflow.eval import protocol

    clock = GatedClock(device, l2_flush_mb, flag)
    clock.send_gates(link)
    times = []
    for _ in range(calls + 2):  # the first two warm the event path
        clock.open()
        link.send({"op": "probe", "seq": clock.seq})
        link.recv(protocol.Probed)
        clock.stop()
        clock.settle(clock.end, deadline=time.monotonic() + 60)  # a worker with no submission
        times.append(clock.elapsed_ms())
    times = times[2:]
    return GateCalibration(statistics.median(times), min(times), max(times), len(times))
