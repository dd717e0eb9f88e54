"""Timed calls compared on rows drawn after the call (EvalConfig.timed_check_rows, issue #19).

The correctness calls still compare every element; a timed call compares `timed_check_rows` rows that
the judge draws from the OS's randomness once the call has returned. Shown here on the CPU at the
small shape (16 rows) with 4 rows per timed call: an honest kernel passes; one that does only part of
its rows in the timed calls is caught, whichever rows it keeps (the first four, the first and last),
which also fails if the rows were predictable; tasks whose rows are not independent, and outputs with
no more rows than asked, are compared whole.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from kernelflow.eval import EvalConfig, Evaluator
from kernelflow.eval.session.references import ReferenceSide
from kernelflow.tasks import generate_inputs, get_task
from tests.helpers.solutions import solution_source

RELU = solution_source("19_ReLU")

# From the 4th call on (the plan below has 3 correctness calls: seed 0, the odd shape, the repeat),
# forward computes only some rows and leaves the rest as whatever the allocator handed it.
PARTIAL = RELU.replace(
    "        x = x.contiguous()\n",
    "        x = x.contiguous()\n"
    "        ModelNew.calls = getattr(ModelNew, 'calls', 0) + 1\n",
).replace(
    "        n = x.numel()\n",
    "        n = x.numel()\n"
    "        if ModelNew.calls > 3:\n"
    "            for r in ROWS:\n"
    "                relu_kernel[(triton.cdiv(x.shape[1], BLOCK_SIZE),)](x[r], out[r], x.shape[1],\n"
    "                                                                    BLOCK_SIZE=BLOCK_SIZE)\n"
    "            return out\n",
)

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=2, timed_check_rows=4,
                    static_checks=False, verdict_cache_size=0, prewarm_workers=0)


@pytest.fixture(scope="module")
def evaluator():
    ev = Evaluator(CONFIG)
    yield ev
    ev.close()


def test_the_honest_kernel_passes_with_sampled_timed_calls(evaluator):
    v = evaluator.evaluate("19_ReLU", RELU)
    assert v.status == "ok", v.feedback


@pytest.mark.parametrize("rows", ["(0, 1, 2, 3)", "(0, 15)"], ids=["first_four", "first_and_last"])
def test_a_kernel_that_skips_rows_in_its_timed_calls_is_caught(evaluator, rows):
    v = evaluator.evaluate("19_ReLU", PARTIAL.replace("class ModelNew", f"ROWS = {rows}\n\n\nclass ModelNew"))
    assert v.status == "incorrect", v.feedback
    assert "timed call" in v.feedback and "wrong values" in v.feedback


def _side(task_id: str, k_rows: int) -> tuple[ReferenceSide, list[torch.Tensor], torch.Tensor]:
    task = get_task(task_id)
    side = ReferenceSide(task, replace(CONFIG, timed_check_rows=k_rows), torch.device("cpu"), None, "test")
    side.load()
    xs = generate_inputs(task.input_shapes("small"), 0, side.distribution, "cpu", dtype=side.dtype)
    with torch.no_grad():
        out = side.model(*[x.to(torch.float64) for x in xs]).to(side.dtype)
    return side, xs, out


def test_the_worst_row_is_reported_in_the_whole_output():
    side, xs, out = _side("19_ReLU", 4)
    bad = out.clone()
    bad[:, 7] += 1.0  # every row wrong at column 7: any sample sees it
    result = side.compare(bad, xs, None, sample_rows=4)
    assert not result.passed and result.worst_index[1] == 7 and 0 <= result.worst_index[0] < 16
    assert side.compare(out, xs, None, sample_rows=4).passed


def test_outputs_with_few_rows_are_compared_whole():
    side, xs, out = _side("19_ReLU", 64)
    bad = out.clone()
    bad[9, 0] += 1.0  # one element of one row: only a whole comparison can be sure to see it
    assert not side.compare(bad, xs, None, sample_rows=64).passed  # 16 rows <= 64: every row
