"""A call whose GPU work never finishes (kernelflow/eval/clock/gated_clock.py `GpuStalled`).

The judge waits for the worker's done signal; if its stream does not resume even after the judge
wrote that signal itself (test_gpu_release.py), the host must not block for good: `wait_for` polls with
a deadline, the session answers `evaluator_error` (not the submission's verdict, never cached), and the
evaluator stops judging on that GPU and says so in `info()`. The CUDA path itself needs a GPU; here the
pieces run on the CPU with a stand-in event and a session whose call raises the stall.
"""

from __future__ import annotations

import time

import pytest

from kernelflow.eval import EvalConfig, Evaluator
from kernelflow.eval.clock.gated_clock import GpuHealth, GpuStalled, wait_for
from kernelflow.eval.session import JudgeSession
from kernelflow.tasks import get_task
from tests.helpers.solutions import solution_source


class _Event:
    """Completes after `after` queries (never, for None)."""

    def __init__(self, after: int | None):
        self.after, self.queries = after, 0

    def query(self) -> bool:
        self.queries += 1
        return self.after is not None and self.queries > self.after


def test_wait_for_returns_once_the_event_completes():
    event = _Event(after=3)
    wait_for(event, time.monotonic() + 5, "work")
    assert event.queries == 4


def test_wait_for_raises_at_the_deadline_instead_of_blocking():
    t0 = time.monotonic()
    with pytest.raises(GpuStalled, match="the output copy"):
        wait_for(_Event(after=None), t0 + 0.2, "the output copy")
    assert time.monotonic() - t0 < 5


def test_a_stalled_call_gives_an_evaluator_error_and_marks_the_evaluator(monkeypatch):
    health = GpuHealth()
    session = JudgeSession(get_task("19_ReLU"), solution_source("19_ReLU"), EvalConfig(backend="interpret"),
                           "interpret", __import__("torch").device("cpu"), [0], gpu_health=health)

    def stalls(start):
        session._label, session._limit = "seed 0", 10.0
        session.gpu_stalled = True
        health.stall("19_ReLU, seed 0")
        raise GpuStalled("the call's GPU work")

    monkeypatch.setattr(session, "_run", stalls)
    outcome = session.run()
    assert outcome.status == "evaluator_error"
    assert "did not finish within the call's 10 s limit" in outcome.detail
    assert health.stalled == "19_ReLU, seed 0"


def test_a_stalled_evaluator_judges_nothing_more_and_says_so():
    ev = Evaluator(EvalConfig(backend="interpret", prewarm_workers=0))
    try:
        assert ev.info()["gpu_stalled"] is None
        ev._gpu_health.stall("23_Softmax, timed call 3")
        verdict = ev.evaluate("19_ReLU", solution_source("19_ReLU"))
        assert verdict.status == "evaluator_error" and verdict.reward == 0
        assert "23_Softmax, timed call 3" in verdict.feedback
        assert ev.info()["gpu_stalled"] == "23_Softmax, timed call 3"
        assert ev.stats()["sessions"] == 0  # no worker was started
        again = ev.evaluate("19_ReLU", solution_source("19_ReLU"))
        assert not again.cached  # evaluator errors are never stored
    finally:
        ev.close()
