"""The task suite: ids, groups, metadata, validation of the spec types, and the reference modules.

Each reference module is checked in float64 against an independent formulation (a
torch.nn.functional equivalent or the formula written out) and against known values, so a wrong
reference file cannot silently make wrong kernels "correct".
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelflow.eval.correctness import reference_output
from kernelflow.tasks import (
    GROUPS,
    KERNELBENCH_REVISION,
    SHAPE_PROFILES,
    TASKS,
    ShapeProfile,
    Task,
    Tolerance,
    generate_input,
    get_task,
    suite_hash,
    task_ids,
)

EXPECTED_GROUPS = {
    "train": ["19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh"],
    "reserved": ["25_Swish", "28_HardSigmoid", "32_HardTanh"],
    "heldout": ["23_Softmax", "24_LogSoftmax", "88_MinGPTNewGelu"],
}
ALL_IDS = [tid for ids in EXPECTED_GROUPS.values() for tid in ids]


# --- ids, groups, files ---------------------------------------------------------------------------


def test_suite_has_exactly_the_ten_ids_in_three_groups():
    assert GROUPS == ("train", "reserved", "heldout")
    assert sorted(TASKS) == sorted(ALL_IDS)
    assert len(task_ids()) == 10
    for group, ids in EXPECTED_GROUPS.items():
        assert task_ids(group) == ids
        assert all(TASKS[t].group == group for t in ids)


def test_ids_equal_reference_file_stems():
    level1 = {p.stem for p in next(iter(TASKS.values())).source_path.parent.glob("*.py")}
    assert level1 == set(ALL_IDS)
    for tid, task in TASKS.items():
        assert task.task_id == tid
        assert task.source_path.stem == tid
        assert task.source_path.is_file()


def test_revision_is_a_full_commit_hash():
    assert re.fullmatch(r"[0-9a-f]{40}", KERNELBENCH_REVISION)


def test_get_task_and_unknown_ids():
    assert get_task("22_Tanh") is TASKS["22_Tanh"]
    with pytest.raises(KeyError, match="99_NoSuchTask"):
        get_task("99_NoSuchTask")
    with pytest.raises(ValueError, match="bogus"):
        task_ids("bogus")


def test_suite_hash_is_stable_sha256_hex():
    h = suite_hash()
    assert re.fullmatch(r"[0-9a-f]{64}", h)
    assert suite_hash() == h


def test_suite_hash_changes_with_the_metadata(monkeypatch):
    before = suite_hash()
    changed = replace(TASKS["19_ReLU"], tolerance=Tolerance(atol=1e-3, rtol=1e-3))
    monkeypatch.setitem(TASKS, "19_ReLU", changed)
    assert suite_hash() != before


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_metadata_is_positive_and_consistent(task_id):
    task = TASKS[task_id]
    assert task.dtype == "float32"
    assert task.distribution == "signed_wide"
    for profile in SHAPE_PROFILES:
        shape, odd = task.shape(profile), task.shape(profile, odd=True)
        assert len(shape) == 2 and len(odd) == 2
        assert task.numel(profile) == math.prod(shape) > 0
        assert task.bytes_min(profile) > 0
        assert task.flops(profile) > 0
        # fp32 unary op: one 4-byte read and one 4-byte write per element.
        assert task.bytes_min(profile) == 8 * task.numel(profile)
    # The odd shapes are there to catch kernels that assume a multiple of their block size.
    assert task.shape("small", odd=True)[1] % 2 == 1
    assert task.shape("full", odd=True)[1] % 2 == 1
    assert task.shape("full") == ((8192, 8192) if task_id == "88_MinGPTNewGelu" else (4096, 393216))
    assert task.shape("small") == (16, 4099)
    d = task.to_dict()
    assert d["task_id"] == task_id and d["group"] == task.group
    assert d["shapes"]["full"]["shape"] == list(task.shape("full"))
    assert "Model" in task.source


def test_unknown_profile_is_a_keyerror_naming_the_choices():
    with pytest.raises(KeyError, match="medium"):
        TASKS["19_ReLU"].shape("medium")


def test_load_module_gives_a_fresh_module_each_call():
    task = TASKS["19_ReLU"]
    a, b = task.load_module(), task.load_module()
    assert a is not b
    assert a.Model is not b.Model
    assert a.get_init_inputs() == []


# --- spec validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [(), (0, 4), (3, -1)])
def test_shape_profile_rejects_bad_shapes(bad):
    with pytest.raises(ValueError, match="positive ints"):
        ShapeProfile(shape=bad, odd_shape=(3, 5))
    with pytest.raises(ValueError, match="positive ints"):
        ShapeProfile(shape=(3, 5), odd_shape=bad)


@pytest.mark.parametrize("atol,rtol", [(-1e-6, 1e-6), (1e-6, -1e-6), (0.0, 0.0)])
def test_tolerance_rejects_bad_values(atol, rtol):
    with pytest.raises(ValueError, match="tolerance atol="):
        Tolerance(atol=atol, rtol=rtol)


def test_tolerance_accepts_one_zero_term():
    assert Tolerance(atol=0.0, rtol=1e-4).rtol == 1e-4
    assert Tolerance(atol=1e-4, rtol=0.0).atol == 1e-4


def _task_kwargs(**overrides):
    base = TASKS["19_ReLU"]
    kw = dict(
        task_id="x_Test", group="train", source_path=base.source_path, profiles=dict(base.profiles),
        tolerance=base.tolerance, bytes_per_element=8.0, flops_per_element=1.0,
    )
    kw.update(overrides)
    return kw


def test_task_accepts_valid_metadata():
    assert Task(**_task_kwargs()).task_id == "x_Test"


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"profiles": {"small": ShapeProfile((2, 3), (1, 3))}}, r"shape profiles \['full'\] are missing"),
        ({"dtype": "float64"}, "dtype 'float64'"),
        ({"distribution": "uniform"}, "distribution 'uniform'"),
        ({"source_path": Path("/nonexistent/99_Nope.py")}, "does not exist"),
    ],
)
def test_task_rejects_bad_metadata_with_a_message(overrides, message):
    with pytest.raises(ValueError, match=message):
        Task(**_task_kwargs(**overrides))


# --- reference modules against independent formulations (float64) ---------------------------------


def _independent(task_id: str, x: torch.Tensor) -> torch.Tensor:
    """The task's function, written without the reference module's own call."""
    if task_id == "19_ReLU":
        return torch.where(x > 0, x, torch.zeros_like(x))
    if task_id == "20_LeakyReLU":
        return torch.where(x > 0, x, 0.01 * x)
    if task_id == "21_Sigmoid":
        return 1.0 / (1.0 + torch.exp(-x))
    if task_id == "22_Tanh":
        return 2.0 * F.sigmoid(2.0 * x) - 1.0
    if task_id == "25_Swish":
        return F.silu(x)
    if task_id == "28_HardSigmoid":
        return torch.clamp(x / 6.0 + 0.5, 0.0, 1.0)
    if task_id == "32_HardTanh":
        return torch.clamp(x, -1.0, 1.0)
    if task_id == "23_Softmax":
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)
    if task_id == "24_LogSoftmax":
        return x - torch.logsumexp(x, dim=1, keepdim=True)
    if task_id == "88_MinGPTNewGelu":
        return F.gelu(x, approximate="tanh")
    raise AssertionError(f"no independent formulation for {task_id}")


def _reference(task_id: str, x: torch.Tensor) -> torch.Tensor:
    task = TASKS[task_id]
    return reference_output(task.load_module().Model(*task.init_inputs), x)


@pytest.mark.parametrize("task_id", ALL_IDS)
def test_reference_matches_independent_formulation_in_float64(task_id):
    x = generate_input((4, 1037), seed=7).to(torch.float64)
    ref = _reference(task_id, x)
    assert ref.dtype == torch.float64
    assert torch.isfinite(ref).all()
    torch.testing.assert_close(ref, _independent(task_id, x), rtol=1e-12, atol=1e-12)


def test_reference_output_upcasts_and_leaves_the_input_alone():
    x = generate_input((3, 1037), seed=1)
    x0 = x.clone()
    ref = _reference("21_Sigmoid", x)
    assert ref.dtype == torch.float64 and x.dtype == torch.float32
    assert torch.equal(x, x0)


_D = torch.float64
KNOWN_VALUES = {
    "19_ReLU": ([-1.0, 0.0, 2.0, -100.0], [0.0, 0.0, 2.0, 0.0]),
    "20_LeakyReLU": ([-1.0, 0.0, 2.0, -100.0], [-0.01, 0.0, 2.0, -1.0]),
    "21_Sigmoid": ([0.0, 100.0, -100.0], [0.5, 1.0, 1.0 / (1.0 + math.exp(100.0))]),
    "22_Tanh": ([0.0, 100.0, -100.0, 1.0], [0.0, 1.0, -1.0, math.tanh(1.0)]),
    "25_Swish": ([0.0, 100.0, -100.0], [0.0, 100.0, -100.0 / (1.0 + math.exp(100.0))]),
    "28_HardSigmoid": ([3.0, -3.0, 0.0, 1.5, 100.0, -100.0], [1.0, 0.0, 0.5, 0.75, 1.0, 0.0]),
    "32_HardTanh": ([5.0, -5.0, 0.25, -1.0], [1.0, -1.0, 0.25, -1.0]),
    "88_MinGPTNewGelu": ([0.0, 100.0, -100.0], [0.0, 100.0, 0.0]),
}


@pytest.mark.parametrize("task_id", sorted(KNOWN_VALUES))
def test_reference_known_values(task_id):
    xs, expected = KNOWN_VALUES[task_id]
    got = _reference(task_id, torch.tensor([xs], dtype=_D))
    torch.testing.assert_close(got, torch.tensor([expected], dtype=_D), rtol=1e-12, atol=1e-300)


def test_softmax_references_on_constant_and_outlier_rows():
    n = 1037
    const = torch.full((2, n), 3.0, dtype=_D)
    torch.testing.assert_close(_reference("23_Softmax", const), torch.full((2, n), 1.0 / n, dtype=_D))
    torch.testing.assert_close(_reference("24_LogSoftmax", const), torch.full((2, n), -math.log(n), dtype=_D))
    # A +100 outlier takes (almost) all the mass, and nothing overflows in the reference.
    row = torch.zeros((1, n), dtype=_D)
    row[0, 5] = 100.0
    sm = _reference("23_Softmax", row)
    assert torch.isfinite(sm).all()
    assert sm[0, 5] == pytest.approx(1.0, abs=1e-40)
    assert float(sm.sum()) == pytest.approx(1.0, rel=1e-12)
    lsm = _reference("24_LogSoftmax", row)
    assert float(lsm[0, 0]) == pytest.approx(-100.0, rel=1e-12)


def test_leaky_relu_reference_honours_its_constructor_slope():
    module = TASKS["20_LeakyReLU"].load_module().Model(0.2)
    out = reference_output(module, torch.tensor([[-2.0, 3.0]]))
    torch.testing.assert_close(out, torch.tensor([[-0.4, 3.0]], dtype=_D))
