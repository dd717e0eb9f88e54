"""The judge's clock arithmetic (clock/gated_clock.py) on the CPU; the clock itself runs under `gpu`.

What is decided from the judge's own numbers: the empty call's length is taken off, a window shorter
than any empty call is refused, and late timed calls (the GPU may have waited for the worker's host
inside the window) leave the median when most calls were on time.
"""

from kernelflow.eval.clock.gated_clock import GateCalibration, gate_respected, net_ms, timed_median_input
from kernelflow.eval.clock.timing import MIN_RESOLVABLE_MS

GATE = GateCalibration(median_ms=0.29, min_ms=0.28, max_ms=0.30, runs=20)


def test_the_empty_call_is_taken_off_and_never_below_the_resolution():
    assert abs(net_ms(3.49, GATE) - 3.2) < 1e-9
    assert net_ms(0.2, GATE) == MIN_RESOLVABLE_MS


def test_a_window_shorter_than_an_empty_call_is_refused():
    assert gate_respected(0.26, GATE)  # within the empty call's jitter
    assert not gate_respected(0.1, GATE)  # the work ran before the gate opened


def test_late_timed_calls_leave_the_median_only_when_most_are_on_time():
    times = [(3.0, False), (3.1, False), (4.9, True)]
    assert timed_median_input(times) == [3.0, 3.1]
    mostly_late = [(4.8, True), (4.9, True), (3.0, False)]
    assert timed_median_input(mostly_late) == [4.8, 4.9, 3.0]  # never a median of one lucky call
    assert timed_median_input([]) == []
