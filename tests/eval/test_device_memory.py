"""The device-memory budget for concurrent CUDA verdicts (kernelflow/eval/session/device_memory.py).

On the H200, four to ten full-shape verdicts at once ran out of device memory and honest kernels got
`evaluator_error` / `runtime_error`; verdicts beyond what fits must wait instead. Here: the estimate
for the pilot's ReLU at full shape, and the budget's admission rule with threads (CPU only).
"""

from __future__ import annotations

import threading
import time

import pytest

from kernelflow.eval import EvalConfig
from kernelflow.eval.session.device_memory import MemoryBudget, budget_bytes, estimate_verdict_bytes, verdict_bytes
from kernelflow.tasks import get_task


def test_a_full_shape_relu_verdict_is_estimated_at_about_53_gb():
    need = estimate_verdict_bytes(get_task("19_ReLU"), EvalConfig(backend="cuda", shape="full"), "cuda")
    # 4096 x 393216 float32 = 6.44 GB per tensor: inputs 3x (arena, scratch, baseline), output 5x
    # (clone, repeat copy, the worker's two, baseline), the odd shape's 4.7 MB, + 1 GiB
    assert 52e9 < need < 53.5e9, need
    fit = budget_bytes(free_bytes=148 * 10**9, total_bytes=150 * 10**9, fraction=0.85) // need
    assert fit == 2  # an H200 (0.85 x 150 GB) holds max_workers' two, not the four that failed


def test_the_estimate_follows_the_output_not_only_the_inputs():
    small = verdict_bytes([((8, 8),)], [(8, 8)], 4, 4)
    wide = verdict_bytes([((8, 8),)], [(800, 8)], 4, 4)
    assert wide - small == 4 * (800 * 8 - 8 * 8) * 5  # five copies of the output are counted


def test_budget_is_a_fraction_of_the_total_but_never_more_than_is_free():
    assert budget_bytes(free_bytes=100, total_bytes=1000, fraction=0.85) == 100
    assert budget_bytes(free_bytes=1000, total_bytes=1000, fraction=0.5) == 500


def _hold_in_thread(budget, nbytes, started, release):
    def run():
        with budget.hold(nbytes):
            started.set()
            release.wait(10)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_verdict_that_does_not_fit_waits_until_memory_is_given_back():
    budget = MemoryBudget(100)
    first_in, first_out = threading.Event(), threading.Event()
    second_in, second_out = threading.Event(), threading.Event()
    t1 = _hold_in_thread(budget, 60, first_in, first_out)
    assert first_in.wait(5)
    t2 = _hold_in_thread(budget, 60, second_in, second_out)
    assert not second_in.wait(0.3)  # 60 + 60 > 100: it waits
    first_out.set()
    assert second_in.wait(5)  # admitted once the first let go
    assert budget.held == 60 and budget.holders == 1
    second_out.set()
    t1.join(5), t2.join(5)
    assert budget.held == 0 and budget.waited_s > 0.2


def test_two_that_fit_run_together():
    budget = MemoryBudget(100)
    events = [(threading.Event(), threading.Event()) for _ in range(2)]
    threads = [_hold_in_thread(budget, 50, a, b) for a, b in events]
    assert all(a.wait(5) for a, _ in events)
    assert budget.held == 100
    for _, b in events:
        b.set()
    for t in threads:
        t.join(5)


def test_a_verdict_larger_than_the_whole_budget_runs_alone_instead_of_never():
    budget = MemoryBudget(100)
    t0 = time.monotonic()
    with budget.hold(500):
        assert budget.held == 500
    assert time.monotonic() - t0 < 1


def test_the_fraction_is_validated():
    with pytest.raises(ValueError, match="device_memory_fraction"):
        EvalConfig(device_memory_fraction=0)
