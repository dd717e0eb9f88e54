"""The honest Triton solutions (tests/fixtures/solutions/) are correct, well-formed positive controls.

Every later test and the GPU benchmark rely on these files passing, so they are checked here in
process (under the Triton interpreter on a CPU-only host, compiled on a GPU host): against the
float64 reference within the task's tolerance at the small and the odd small shape with two seeds,
on extreme values, on non-contiguous inputs and on rows of the full profile's (odd) length. They
are also checked for the submission format (the reference's signatures, raw-module extractable) and
for honesty (forward only allocates, views and launches; no torch math, no F.*, no try/except).
"""

from __future__ import annotations

import ast
import inspect

import pytest
import torch
import torch.nn as nn

from kernelflow.eval.correctness import compare, reference_output
from kernelflow.tasks import TASKS, extract_code, generate_input
from tests.helpers.solutions import (
    SOLUTIONS_DIR,
    load_solution_module,
    solution_path,
    solution_source,
)

ALL_IDS = list(TASKS)
SEEDS = (0, 1)
# Under the interpreter on a CPU-only host; on a GPU host the same checks run compiled, on the GPU.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_MODULES: dict[str, object] = {}


def _solution(task_id: str):
    """One imported module per task for the whole file (compiling kernels once)."""
    if task_id not in _MODULES:
        _MODULES[task_id] = load_solution_module(task_id)
    return _MODULES[task_id]


def _run_and_check(task_id: str, x: torch.Tensor) -> torch.Tensor:
    """Run the solution on `x` and assert every property of a good output; returns the output."""
    task = TASKS[task_id]
    x_before = x.clone()
    model = _solution(task_id).ModelNew(*task.init_inputs)
    out = model(x)
    assert torch.equal(x, x_before), "the solution modified its input"
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.float32
    assert tuple(out.shape) == tuple(x.shape)
    assert out.is_contiguous()
    assert out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr(), "output aliases the input"
    ref = reference_output(task.load_module().Model(*task.init_inputs), x)
    result = compare(out, ref, task.tolerance)
    assert result.passed, f"{task_id} {tuple(x.shape)}: {result.summary()}"
    return out


# --- files and helper -------------------------------------------------------------------------------


def test_one_solution_file_per_task_and_no_package():
    stems = {p.stem for p in SOLUTIONS_DIR.glob("*.py")}
    assert stems == set(ALL_IDS)
    assert not (SOLUTIONS_DIR / "__init__.py").exists()


def test_helper_paths_sources_and_fresh_modules():
    assert solution_path("19_ReLU") == SOLUTIONS_DIR / "19_ReLU.py"
    assert "class ModelNew" in solution_source("19_ReLU")
    a, b = load_solution_module("32_HardTanh"), load_solution_module("32_HardTanh")
    assert a is not b and a.__name__ != b.__name__
    assert a.ModelNew is not b.ModelNew
    with pytest.raises(FileNotFoundError, match="99_Nope"):
        solution_path("99_Nope")


# --- submission format and honesty (static) -----------------------------------------------------------


def _params(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_has_the_submission_format(task_id):
    source = solution_source(task_id)
    tree = ast.parse(source)
    assert ast.get_docstring(tree), "each solution starts with a module docstring"
    assert extract_code(source) == source, "the file is a valid raw (unfenced) submission"
    assert extract_code(f"```python\n{source}```") == source
    module = _solution(task_id)
    assert issubclass(module.ModelNew, nn.Module)
    reference = TASKS[task_id].load_module().Model
    assert _params(module.ModelNew.__init__) == _params(reference.__init__)
    assert _params(module.ModelNew.forward) == _params(reference.forward)


def _forward_def(tree: ast.Module) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward":
                    return item
    raise AssertionError("no ModelNew.forward")


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_does_its_math_in_triton(task_id):
    source = solution_source(task_id)
    tree = ast.parse(source)
    # No try/except and no torch.nn.functional anywhere.
    assert not any(isinstance(n, ast.Try) for n in ast.walk(tree))
    assert "functional" not in source and "F." not in source
    # At least one @triton.jit kernel.
    jitted = [
        n for n in tree.body if isinstance(n, ast.FunctionDef)
        and any(ast.unparse(d) == "triton.jit" for d in n.decorator_list)
    ]
    assert jitted
    forward = _forward_def(tree)
    # forward touches torch only to allocate.
    torch_calls = {
        ast.unparse(n.func) for n in ast.walk(forward)
        if isinstance(n, ast.Call) and ast.unparse(n.func).startswith("torch.")
    }
    assert torch_calls <= {"torch.empty_like", "torch.empty"}, torch_calls
    # No arithmetic at all in forward (sizes go through triton.cdiv), so none on tensors either.
    assert not any(isinstance(n, ast.BinOp) for n in ast.walk(forward))
    # forward launches a jitted kernel: kernel[grid](...).
    names = {j.name for j in jitted}
    launches = [
        n for n in ast.walk(forward)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
        and isinstance(n.func.value, ast.Name) and n.func.value.id in names
    ]
    assert launches


# --- correctness under the interpreter ----------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("odd", [False, True], ids=["small", "odd"])
@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_matches_the_reference(task_id, odd, seed):
    shape = TASKS[task_id].shape("small", odd=odd)
    _run_and_check(task_id, generate_input(shape, seed=seed, device=DEVICE))


EXTREMES = [-100.0, -89.0, -88.5, -30.0, -10.5, -3.0, -1.0, -1e-4, -1e-7, -0.0, 0.0, 1e-7, 1e-4, 0.0625,
            1.0, 3.0, 10.5, 30.0, 88.5, 89.0, 100.0]


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_is_finite_and_accurate_at_extreme_values(task_id):
    """exp overflow paths (+-88.7 is where fp32 exp overflows), the clamps, and tiny |x| near 0."""
    x = generate_input(TASKS[task_id].shape("small", odd=True), seed=2, device=DEVICE)
    extremes = torch.tensor(EXTREMES, device=DEVICE)
    x[0, : len(EXTREMES)] = extremes
    x[1, :] = 100.0  # a whole row at the maximum outlier (softmax of a constant row)
    x[2, -len(EXTREMES):] = -extremes
    out = _run_and_check(task_id, x)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_handles_a_non_contiguous_input(task_id):
    rows, cols = TASKS[task_id].shape("small", odd=True)
    base = generate_input((cols, rows), seed=3, device=DEVICE)
    x = base.t()
    assert not x.is_contiguous()
    _run_and_check(task_id, x)


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_solution_at_full_profile_row_length(task_id):
    """Two rows of the full profile's odd row length: many chunks per row, and a ragged last chunk."""
    cols = TASKS[task_id].shape("full", odd=True)[1]
    _run_and_check(task_id, generate_input((2, cols), seed=0, device=DEVICE))
