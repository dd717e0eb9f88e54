"""The judge's clock for a CUDA call: started and stopped by the judge's own events, around a gate.

Why: the submission runs in the worker, and the worker's Python can reach and replace any timer in
its process (issue #17 measured a LogSoftmax that patched the worker's timing function and earned
3.00). So no time a verdict uses is measured there. Per call, on the judge's stream:

    flush L2 | spin ~2 ms | copy the call's fresh inputs in | START | record GATE
    worker:                   wait GATE | forward's launches | (host checks, export) | record DONE | reply
    judge, at the reply:      wait DONE | END | copy the output

`START -> END` is GPU time as the judge's context sees it: the worker's work cannot start before the
gate opens (its inputs only exist from just before START: earlier work computes on the previous
call's values and fails the check), and the output is copied right behind END, so work that is not
finished by then is caught as wrong values. The window also holds two context switches between the
judge's and the worker's CUDA contexts (~0.29 ms on an H200, steady to ~0.01 ms): measured once per
evaluator with a worker that has no submission (`calibrate`), and subtracted. A window shorter than
an empty call means the work ran outside the gate, which no honest kernel can do (`gate_respected`).
The spin lets the host path (the worker's launches and checks, its reply, the judge's END) happen
while the GPU is still busy; so the worker does all its host work before DONE, replies right after
it and queues no GPU work of its own after DONE (a kernel there would compete with END for the GPU),
and the judge draws the inputs before `open` (drawing them synchronises its host: torch.unique).
If START had already passed when the worker's reply arrived (`late`), the GPU may have waited for
the host inside the window: the time is too slow (never too fast), and the spin doubles for the next
call; late timed calls are left out of the median when most are on time.

History, on the H200 (2026-12-01; docs/evaluator.md, "Evaluator v2 on the H200"): with a fixed ~1 ms
spin every control read 1.1-1.8 ms slow; with a ~2 ms adaptive spin still 0.6-1.4 ms, all 20 timed
calls of every control late with the spin at its 64 ms cap. Two causes: the worker exported its
output and checked for tampering after DONE, and the judge's input draw blocked its host until the
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

from kernelflow.eval.timing import LAUNCH_COVER_CYCLES, MIN_RESOLVABLE_MS

MAX_SPIN_FACTOR = 32
START_SPIN_CYCLES = 2 * LAUNCH_COVER_CYCLES  # ~2 ms at H200 clocks
CALIBRATION_CALLS = 20


class GpuStalled(RuntimeError):
    """GPU work the judge queued for a call did not complete by the call's deadline.

    The judge's stream waits on the worker's DONE event; a kernel that never ends, or a fault that
    loses the worker's CUDA context before DONE is signalled, leaves that wait pending, possibly for
    good (an inter-process event whose last record never completes). Everything queued behind it in
    this process waits too, so the evaluator stops using its GPU state once this is raised
    (evaluator.py); the host never blocks on it without a deadline.
    """


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


def wait_for(event: torch.cuda.Event, deadline: float | None, what: str) -> None:
    """Wait on the host until `event` has completed; GpuStalled at `deadline` (time.monotonic()).

    Polling instead of `event.synchronize()`: the latter cannot be bounded. Only the host notices
    the completion later (at most ~1 ms); the event's own timestamp, which the clock reads, is the
    GPU's.
    """
    pause = 20e-6
    while not event.query():
        if deadline is not None and time.monotonic() >= deadline:
            raise GpuStalled(what)
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
    """One session's gate and done events and its judge-side timing (see the module docstring)."""

    def __init__(self, device: torch.device, l2_flush_mb: int, spin_cycles: int = START_SPIN_CYCLES):
        self.device = device
        self.gate = torch.cuda.Event(interprocess=True)
        self.done = torch.cuda.Event(interprocess=True)
        self.flush = torch.empty(l2_flush_mb << 20, dtype=torch.uint8, device=device)
        self.base_spin = self.spin = spin_cycles
        self.late_calls = 0
        self.start = self.end = None
        self.late = False

    def send_gates(self, link) -> None:
        """Give a warm worker (`link`, before its handover) this clock's two inter-process events."""
        with torch.cuda.device(self.device):  # the events are created lazily, at their first use
            message = {"op": "gates", "gate": self.gate.ipc_handle(), "done": self.done.ipc_handle()}
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

    def stop(self) -> None:
        """Queue END behind the worker's DONE; anything queued after this follows the timed window."""
        with torch.cuda.device(self.device):
            self.late = bool(self.start.query())  # the gate opened before the worker's reply: see the docstring
            torch.cuda.current_stream().wait_event(self.done)
            self.end = torch.cuda.Event(enable_timing=True)
            self.end.record()

    def elapsed_ms(self, adapt: bool = True, deadline: float | None = None) -> float:
        """The window's raw length; doubles the spin after a late call (`adapt`: not for the compile call).
        GpuStalled if END has not happened by `deadline` (see `wait_for`)."""
        wait_for(self.end, deadline, "the call's GPU work")
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


def calibrate(link, device: torch.device, l2_flush_mb: int, calls: int = CALIBRATION_CALLS) -> GateCalibration:
    """Empty gated calls with a warm worker that has no submission (`link` is warm; the caller holds
    the GPU exclusively and closes the link)."""
    from kernelflow.eval import protocol

    clock = GatedClock(device, l2_flush_mb)
    clock.send_gates(link)
    times = []
    for _ in range(calls + 2):  # the first two warm the event path
        clock.open()
        link.send({"op": "probe"})
        link.recv(protocol.Probed)
        clock.stop()
        times.append(clock.elapsed_ms(deadline=time.monotonic() + 60))  # a worker with no submission
    times = times[2:]
    return GateCalibration(statistics.median(times), min(times), max(times), len(times))
