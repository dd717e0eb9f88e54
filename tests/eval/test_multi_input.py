"""The evaluator on tasks shaped unlike the pilot's: several inputs, a smaller output, an integer output,
a scalar output (kernelflow/eval/session.py, worker/main.py, correctness.py).

Each task here is declared in the test with a small reference module from tests/fixtures/multi_input/
and judged end to end by the real evaluator under the Triton interpreter: an honest Triton solution is
`ok`, and a plausible wrong one is `incorrect` with feedback naming where. The second-tier suite's real
tasks of these kinds are tested in tests/tasks/.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.eval import EvalConfig, Evaluator, Status
from kernelflow.tasks import ShapeProfile, Task, Tolerance, generate_inputs, input_seed

REFS = Path(__file__).resolve().parent.parent / "fixtures" / "multi_input"

SCALED_ADD = Task(
    task_id="t_scaled_add", group="test", source_path=REFS / "scaled_add_ref.py",
    profiles={p: ShapeProfile(shape=(6, 37), odd_shape=(3, 11), extra=((37,),), odd_extra=((11,),))
              for p in ("small", "full")},
    tolerance=Tolerance(1e-6, 1e-6), bytes_per_element=8.0, flops_per_element=2.0,
)
ROW_ARGMAX = Task(
    task_id="t_row_argmax", group="test", source_path=REFS / "row_argmax_ref.py",
    profiles={p: ShapeProfile(shape=(5, 300), odd_shape=(3, 77)) for p in ("small", "full")},
    tolerance=Tolerance(0.0, 1e-6), bytes_per_element=4.0, flops_per_element=1.0,
)
MSE = Task(
    task_id="t_mse", group="test", source_path=REFS / "mse_ref.py",
    profiles={p: ShapeProfile(shape=(8, 129), odd_shape=(3, 31), extra=((8, 129),), odd_extra=((3, 31),))
              for p in ("small", "full")},
    tolerance=Tolerance(1e-4, 1e-5), bytes_per_element=8.0, flops_per_element=3.0,
    cost=lambda shapes: (8.0 * shapes[0][0] * shapes[0][1] + 4, 3.0 * shapes[0][0] * shapes[0][1]),
    rows_independent=False,
)

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n"

SCALED_ADD_OK = HEADER + '''
@triton.jit
def add_kernel(x_ptr, b_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x + 2.0 * b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, bias):
        out = torch.empty_like(x)
        add_kernel[(x.shape[0],)](x, bias, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
'''
# Reads the bias as if it had one value per row: right only by accident.
SCALED_ADD_WRONG = SCALED_ADD_OK.replace("b = tl.load(b_ptr + cols, mask=mask)", "b = tl.load(b_ptr + row + 0 * cols)")

ROW_ARGMAX_OK = HEADER + '''
@triton.jit
def argmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(out_ptr + row, tl.argmax(x, axis=0).to(tl.int64))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], dtype=torch.int64, device=x.device)
        argmax_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
'''
ROW_ARGMAX_WRONG = ROW_ARGMAX_OK.replace("tl.argmax(x, axis=0)", "tl.argmin(x, axis=0)")
# The right indices returned as float32: the output's dtype must be the reference's (int64).
ROW_ARGMAX_FLOAT = ROW_ARGMAX_OK.replace("dtype=torch.int64", "dtype=torch.float32").replace(
    ".to(tl.int64)", ".to(tl.float32)")

MSE_OK = HEADER + '''
@triton.jit
def sq_err_kernel(p_ptr, t_ptr, out_ptr, n, inv_n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        idx = start + offs
        mask = idx < n
        d = tl.load(p_ptr + idx, mask=mask, other=0.0) - tl.load(t_ptr + idx, mask=mask, other=0.0)
        acc += d * d
    tl.store(out_ptr, tl.sum(acc, axis=0) * inv_n)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        out = torch.empty((), dtype=torch.float32, device=predictions.device)
        n = predictions.numel()
        sq_err_kernel[(1,)](predictions, targets, out, n, 1.0 / n, BLOCK=256)
        return out
'''
# Divides by n - 1: off by a relative 1/n.
MSE_WRONG = MSE_OK.replace("1.0 / n,", "1.0 / (n - 1),")


@pytest.fixture(scope="module")
def evaluator():
    return Evaluator(EvalConfig(backend="interpret", shape="small", seeds=2, timed_runs=2, max_workers=2,
                                verdict_cache_size=0))


def test_input_shapes_and_seeds():
    assert SCALED_ADD.input_shapes("small") == [(6, 37), (37,)]
    assert SCALED_ADD.input_shapes("small", odd=True) == [(3, 11), (11,)]
    x, b = generate_inputs(SCALED_ADD.input_shapes("small"), seed=3)
    assert x.shape == (6, 37) and b.shape == (37,)
    # the first input keeps the call's seed (single-input tasks draw what they always did); the others differ
    assert input_seed(3, 0) == 3 and len({input_seed(3, i) for i in range(4)}) == 4
    assert not (x[0, :5] == b[:5]).all()


def test_cost_overrides_the_per_element_floor():
    assert MSE.bytes_min("small") == 8.0 * 8 * 129 + 4
    assert SCALED_ADD.bytes_min("small") == 8.0 * 6 * 37  # no cost: the first input's numel times bytes/element


@pytest.mark.parametrize(("task", "source", "status"), [
    (SCALED_ADD, SCALED_ADD_OK, Status.OK),
    (SCALED_ADD, SCALED_ADD_WRONG, Status.INCORRECT),
    (ROW_ARGMAX, ROW_ARGMAX_OK, Status.OK),
    (ROW_ARGMAX, ROW_ARGMAX_WRONG, Status.INCORRECT),
    (ROW_ARGMAX, ROW_ARGMAX_FLOAT, Status.INCORRECT),
    (MSE, MSE_OK, Status.OK),
    (MSE, MSE_WRONG, Status.INCORRECT),
], ids=["add-ok", "add-wrong", "argmax-ok", "argmax-wrong", "argmax-float", "mse-ok", "mse-wrong"])
def test_judged_end_to_end(evaluator, task, source, status):
    verdict = evaluator.evaluate(task, source)
    assert verdict.status == status, verdict.feedback
    assert verdict.correct is (status == Status.OK)
    if status != Status.OK:
        assert verdict.reward == 0


def test_wrong_dtype_feedback_names_the_expected_dtype(evaluator):
    verdict = evaluator.evaluate(ROW_ARGMAX, ROW_ARGMAX_FLOAT)
    assert "torch.int64" in verdict.feedback


def test_integer_mismatch_is_counted_and_located(evaluator):
    verdict = evaluator.evaluate(ROW_ARGMAX, ROW_ARGMAX_WRONG)
    assert "of 5 elements differ; first at index [" in verdict.feedback, verdict.feedback


@pytest.mark.gpu
@pytest.mark.parametrize(("task", "source", "status"), [
    (SCALED_ADD, SCALED_ADD_OK, Status.OK),
    (ROW_ARGMAX, ROW_ARGMAX_OK, Status.OK),
    (ROW_ARGMAX, ROW_ARGMAX_WRONG, Status.INCORRECT),
    (MSE, MSE_OK, Status.OK),
], ids=["add-ok", "argmax-ok", "argmax-wrong", "mse-ok"])
def test_judged_on_cuda(task, source, status):
    # On a GPU the inputs and the output travel as CUDA IPC buffers sized from the reference's output spec.
    evaluator = Evaluator(EvalConfig(backend="cuda", shape="small", seeds=2, timed_runs=3, verdict_cache_size=0,
                                     compile_baseline=True))
    verdict = evaluator.evaluate(task, source)
    assert verdict.status == status, verdict.feedback
    if status == Status.OK:
        assert verdict.timed and verdict.runtime_ms > 0 and verdict.torch_compile_ms is not None
