"""The second-tier suite (kernelflow/tasks/families.py): metadata, references, controls, solutions.

Each reference module is checked in float64 against an independent formulation; under the default
input distribution all zeros, the input itself and a bf16 downcast must be far outside tolerance at
both profiles (the full profile through a few rows of full length); each honest solution in
tests/fixtures/solutions/families/ must match the float64 reference at the small and odd small
shapes and on full-length rows under the interpreter, and pass the real evaluator end to end (slow).
The pilot suite must be exactly as it was.
"""

from __future__ import annotations

import ast
import functools
import math
import re

import pytest
import torch

from kernelflow.eval.correctness import compare, reference_output
from kernelflow.tasks import (
    FAMILY_GROUPS,
    FAMILY_ROLES,
    FAMILY_TASKS,
    SHAPE_PROFILES,
    TASKS,
    families_hash,
    family_task_ids,
    generate_input,
    get_task,
    suite_hash,
    task_ids,
)
from tests.helpers.solutions import load_solution_module, solution_source

# This module covers the one-input, same-shape, row-independent tasks (norms and scans); the tasks with
# several inputs, smaller outputs or whole-tensor results are tested in test_families_multi.py.
FAMILY_IDS = [t for t, task in FAMILY_TASKS.items()
              if task.cost is None and task.rows_independent and not task.profiles["full"].extra]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# Each solution imported once per test module (its kernels compile once under the interpreter's cache).
_solution = functools.cache(load_solution_module)


def _reference(task_id: str, x: torch.Tensor) -> torch.Tensor:
    task = FAMILY_TASKS[task_id]
    return reference_output(task.load_module().Model(*task.init_inputs), x)


def _independent(task_id: str, x: torch.Tensor) -> torch.Tensor:
    """The task's function without the reference module's own calls (float64 in, float64 out)."""
    if task_id == "36_RMSNorm_":
        return x * torch.rsqrt((x * x).sum(dim=1, keepdim=True) / x.shape[1] + 1e-5)
    if task_id in ("34_InstanceNorm", "35_GroupNorm_"):
        groups = 8 if task_id == "35_GroupNorm_" else x.shape[1]
        g = x.reshape(x.shape[0], groups, -1)
        mean = g.sum(dim=2, keepdim=True) / g.shape[2]
        var = ((g - mean) ** 2).sum(dim=2, keepdim=True) / g.shape[2]
        return ((g - mean) / torch.sqrt(var + 1e-5)).reshape(x.shape)
    if task_id == "38_L1Norm_":
        return x * (x.shape[1] / x.abs().sum(dim=1, keepdim=True))
    if task_id == "39_L2Norm_":
        return x / torch.sqrt((x * x).sum(dim=1, keepdim=True))
    # Scans as a product with a triangular matrix of ones.
    n = x.shape[1]
    ones = torch.ones(n, n, dtype=x.dtype)
    if task_id == "89_cumsum":
        return x @ torch.triu(ones)  # out[i] = sum over j <= i
    if task_id == "91_cumsum_reverse":
        return x @ torch.tril(ones)  # out[i] = sum over j >= i
    if task_id == "92_cumsum_exclusive":
        return x @ torch.triu(ones, diagonal=1)  # out[i] = sum over j < i
    raise AssertionError(f"no independent formulation for {task_id}")


# --- registry, metadata and the pilot left alone ----------------------------------------------------


def test_pilot_suite_is_unchanged():
    assert len(TASKS) == 10 and len(task_ids()) == 10
    assert not set(TASKS) & set(FAMILY_TASKS)
    assert re.fullmatch(r"[0-9a-f]{64}", suite_hash())


def test_family_registry_groups_roles_and_hash():
    assert family_task_ids() == list(FAMILY_TASKS) and len(FAMILY_IDS) >= 6
    assert set(FAMILY_ROLES) == set(FAMILY_GROUPS)
    assert set(FAMILY_ROLES.values()) == {"evaluated only"}
    for group in FAMILY_GROUPS:
        assert family_task_ids(group), group
    assert sum(len(family_task_ids(g)) for g in FAMILY_GROUPS) == len(FAMILY_TASKS)
    with pytest.raises(ValueError, match="bogus"):
        family_task_ids("bogus")
    h = families_hash()
    assert re.fullmatch(r"[0-9a-f]{64}", h) and h == families_hash() and h != suite_hash()


def test_get_task_resolves_both_suites():
    assert get_task("19_ReLU") is TASKS["19_ReLU"]
    for tid in FAMILY_IDS:
        assert get_task(tid) is FAMILY_TASKS[tid]
    # A near miss in the families suite is named back; an id close to nothing gets the way to list ids.
    with pytest.raises(KeyError, match="did you mean '89_cumsum'"):
        get_task("89_cumsun")
    with pytest.raises(KeyError, match="kernelflow tasks --suite families"):
        get_task("99_NoSuchTask")


@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_family_metadata(task_id):
    task = FAMILY_TASKS[task_id]
    assert task.task_id == task.source_path.stem == task_id
    assert task.dtype == "float32" and task.distribution == "signed_wide"
    module = task.load_module()
    assert list(task.init_inputs) == list(module.get_init_inputs())
    for profile in SHAPE_PROFILES:
        # Same-shape output: one fp32 read and one fp32 write per input element.
        assert task.bytes_min(profile) == 8 * task.numel(profile) == 8 * math.prod(task.shape(profile))
        assert task.flops(profile) > 0
        assert len(task.shape(profile, odd=True)) == len(task.shape(profile))
    # The reduced or scanned length is odd at both odd shapes (dim 1; dim1 x dim2 for the instance and
    # group norms), so kernels that assume a multiple of their block size fail there.
    for profile in SHAPE_PROFILES:
        odd = task.shape(profile, odd=True)
        reduced = math.prod(odd[2:]) if task_id in ("34_InstanceNorm", "35_GroupNorm_") else odd[1]
        assert reduced % 2 == 1, (profile, odd)
    full = [module.batch_size]
    full += list(getattr(module, "input_shape", ())) or [
        getattr(module, n) for n in ("features", "dim1", "dim2", "dim") if hasattr(module, n)]
    if task_id == "35_GroupNorm_":
        assert task.init_inputs == (module.features, module.num_groups)
    assert tuple(full) == task.shape("full")


# --- references against independent formulations ---------------------------------------------------


@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_reference_matches_independent_formulation_in_float64(task_id):
    x = generate_input(FAMILY_TASKS[task_id].shape("small", odd=True), seed=7).to(torch.float64)
    ref = _reference(task_id, x)
    assert ref.dtype == torch.float64 and ref.shape == x.shape and torch.isfinite(ref).all()
    torch.testing.assert_close(ref, _independent(task_id, x), rtol=1e-10, atol=1e-9)


def test_exclusive_cumsum_starts_at_zero_and_scans_known_values():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    torch.testing.assert_close(_reference("92_cumsum_exclusive", x), torch.tensor([[0.0, 1.0, 3.0, 6.0]]).double())
    torch.testing.assert_close(_reference("89_cumsum", x), torch.tensor([[1.0, 3.0, 6.0, 10.0]]).double())
    torch.testing.assert_close(_reference("91_cumsum_reverse", x), torch.tensor([[10.0, 9.0, 7.0, 4.0]]).double())


# --- trivial outputs fail at both profiles -----------------------------------------------------------


def _control_shapes(task_id: str) -> list[tuple[int, ...]]:
    """The small shape and a few rows (batch entries) of the full shape."""
    full = FAMILY_TASKS[task_id].shape("full")
    rows = (1, *full[1:]) if len(full) == 4 else (2, *full[1:])
    if len(full) == 4:  # RMSNorm: one batch entry is 16.7M elements; take a strip of the spatial dims
        rows = (1, full[1], 8, full[3])
    return [FAMILY_TASKS[task_id].shape("small"), rows]


@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_trivial_outputs_are_rejected(task_id):
    task = FAMILY_TASKS[task_id]
    for shape in _control_shapes(task_id):
        x = generate_input(shape, seed=11)
        ref = _reference(task_id, x)
        for name, out in [("zeros", torch.zeros_like(x)), ("input", x),
                          ("bf16", _reference(task_id, x.to(torch.bfloat16).to(torch.float32)).to(torch.float32))]:
            result = compare(out, ref, task.tolerance)
            assert not result.passed and result.violation > 10, (name, shape, result.summary())


# --- honest solutions ---------------------------------------------------------------------------------


def _forward(tree: ast.Module) -> ast.FunctionDef:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward")


@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_solution_is_honest_and_well_formed(task_id):
    from kernelflow.eval.static.checks import first_failure, run_static_checks

    source = solution_source(task_id)
    tree = ast.parse(source)
    assert ast.get_docstring(tree)
    assert first_failure(run_static_checks(source)) is None
    forward = _forward(tree)
    calls = {ast.unparse(n.func) for n in ast.walk(forward) if isinstance(n, ast.Call)
             and ast.unparse(n.func).startswith("torch.")}
    assert calls <= {"torch.empty_like", "torch.empty"}
    assert not any(isinstance(n, ast.BinOp) for n in ast.walk(forward))
    # Full shapes reach 1.9e9-2.1e9 elements (32768 x 65535 is 33k short of 2^31): offsets are int64.
    assert "int64" in source


def _run_and_check(task_id: str, x: torch.Tensor) -> None:
    task = FAMILY_TASKS[task_id]
    before = x.clone()
    out = _solution(task_id).ModelNew(*task.init_inputs)(x)
    assert torch.equal(x, before)
    assert out.dtype == torch.float32 and out.shape == x.shape and out.is_contiguous()
    result = compare(out, _reference(task_id, x), task.tolerance)
    assert result.passed, f"{task_id} {tuple(x.shape)}: {result.summary()}"


@pytest.mark.parametrize("odd", [False, True], ids=["small", "odd"])
@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_solution_matches_the_reference(task_id, odd):
    _run_and_check(task_id, generate_input(FAMILY_TASKS[task_id].shape("small", odd=odd), seed=0, device=DEVICE))


@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_solution_on_full_length_rows(task_id):
    """Full-profile (odd) lengths along the reduced or scanned dim: many chunks and a ragged last one."""
    odd_full = FAMILY_TASKS[task_id].shape("full", odd=True)
    shape = (1, odd_full[1], 9, 31) if len(odd_full) == 4 else (2, odd_full[1])
    if task_id in ("34_InstanceNorm", "35_GroupNorm_"):  # long (odd) reductions over dim1 x dim2
        shape = (1, 64, 512, 33) if task_id == "34_InstanceNorm" else (1, 64, 128, 129)
    _run_and_check(task_id, generate_input(shape, seed=1, device=DEVICE))


@pytest.mark.slow
@pytest.mark.parametrize("task_id", FAMILY_IDS)
def test_solution_passes_the_evaluator(task_id):
    from kernelflow.eval import EvalConfig, evaluate

    config = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, verdict_cache_size=0)
    verdict = evaluate(task_id, solution_source(task_id), config)
    assert verdict.status == "ok", (verdict.status, verdict.feedback)
    assert verdict.correct
