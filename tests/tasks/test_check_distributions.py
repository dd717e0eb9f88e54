"""Check distributions (inputs.TRANSFORMS, Task.check_transforms, distribution_for_call): fair and with power.

Three things per transformed task: the draw is deterministic and is the base draw transformed (first
input only); the transform is fair (the float64 reference stays finite, the honest solution in
tests/fixtures/solutions passes at the small, odd and full-length-row shapes under the interpreter);
and it has power (a torch model of the fragile kernel it targets passes every base seed and fails the
transformed one). The slow test at the end judges the `dist_*` adversarial fixtures through a real
evaluator, whose call plan draws `distribution_for_call` (session/plan.py).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math

import pytest
import torch
import torch.nn.functional as F

from kernelflow.eval.correctness import compare, reference_output
from kernelflow.tasks import (
    DISTRIBUTIONS,
    FAMILY_TASKS,
    TASKS,
    TRANSFORM_NAMES,
    Task,
    distribution_for_call,
    generate_input,
    generate_inputs,
    get_task,
    split_distribution,
)
from kernelflow.tasks.inputs import SHIFT_MAX, SHIFT_MIN, TRANSFORMS
from tests.helpers.solutions import load_solution_module

ALL = {**TASKS, **FAMILY_TASKS}
TRANSFORMED = [t for t, task in ALL.items() if task.check_transforms]
CASES = [(t, d) for t in TRANSFORMED for d in ALL[t].check_distributions("signed_wide")[1:]]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_solution = functools.cache(load_solution_module)

# What each task is checked under, and why (the rationale is in suite.py / families.py and inputs.py).
EXPECTED = {
    **{t: ("large_magnitude",) for t in ("19_ReLU", "20_LeakyReLU", "21_Sigmoid", "22_Tanh", "25_Swish",
                                         "28_HardSigmoid", "32_HardTanh", "88_MinGPTNewGelu")},
    "23_Softmax": ("row_shift",), "24_LogSoftmax": ("row_shift",),
    **{t: ("tiny_magnitude",) for t in ("34_InstanceNorm", "35_GroupNorm_", "36_RMSNorm_", "33_BatchNorm")},
    "49_Max_reduction_over_a_dimension": ("row_shift",), "53_Min_reduction_over_a_dimension": ("row_shift",),
    "41_Max_Pooling_1D": ("row_shift",),
    "51_Argmax_over_a_dimension": ("row_shift", "ties"), "52_Argmin_over_a_dimension": ("row_shift", "ties"),
}


# --- names, declarations and the call schedule ---------------------------------------------------------


def test_each_task_declares_the_documented_transforms():
    assert {t: ALL[t].check_transforms for t in TRANSFORMED} == EXPECTED
    assert tuple(TRANSFORMS) == TRANSFORM_NAMES
    assert all(TRANSFORMS[n].__doc__ for n in TRANSFORM_NAMES), "each transform documents why it is fair"


def test_check_distributions_names_base_first_and_leaves_kernelbench_alone():
    task = get_task("51_Argmax_over_a_dimension")
    assert task.check_distributions("signed_wide") == (
        "signed_wide", "signed_wide+row_shift", "signed_wide+ties")
    assert task.check_distributions("kernelbench") == ("kernelbench",)
    assert get_task("47_Sum_reduction_over_a_dimension").check_distributions("signed_wide") == ("signed_wide",)
    with pytest.raises(ValueError, match="base distribution"):
        task.check_distributions("signed_wide+ties")


def test_unknown_names_are_refused():
    for bad in ("gaussian", "signed_wide+nope", "kernelbench+", "+row_shift"):
        with pytest.raises(ValueError, match="unknown input distribution"):
            split_distribution(bad)
    assert split_distribution("signed_wide+ties") == ("signed_wide", "ties")
    assert split_distribution("kernelbench") == ("kernelbench", None)
    with pytest.raises(ValueError, match="check_transforms"):
        dataclasses.replace(get_task("19_ReLU"), check_transforms=("made_up",))
    with pytest.raises(ValueError, match="check_transforms"):
        dataclasses.replace(get_task("19_ReLU"), check_transforms=("ties", "ties"))


def test_distribution_for_call_starts_at_base_and_cycles_through_the_transforms():
    argmax = get_task("51_Argmax_over_a_dimension")
    names = [distribution_for_call(argmax, "signed_wide", i) for i in range(6)]
    assert names == ["signed_wide", "signed_wide+row_shift", "signed_wide+ties",
                     "signed_wide+row_shift", "signed_wide+ties", "signed_wide+row_shift"]
    softmax = get_task("23_Softmax")
    assert [distribution_for_call(softmax, "signed_wide", i) for i in range(3)] == [
        "signed_wide", "signed_wide+row_shift", "signed_wide+row_shift"]
    assert {distribution_for_call(softmax, "kernelbench", i) for i in range(4)} == {"kernelbench"}
    assert {distribution_for_call(get_task("94_MSELoss"), "signed_wide", i) for i in range(4)} == {"signed_wide"}
    with pytest.raises(ValueError):
        distribution_for_call(softmax, "signed_wide", -1)


def test_a_transform_changes_the_suite_hash_entry():
    relu = get_task("19_ReLU")
    assert relu.to_dict()["check_transforms"] == ["large_magnitude"]
    assert "check_transforms" not in get_task("94_MSELoss").to_dict()


# --- generation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("transform", TRANSFORM_NAMES)
def test_a_transformed_draw_is_deterministic_and_a_function_of_the_base_draw(transform):
    shape = (5, 37, 3)
    name = f"signed_wide+{transform}"
    a, b = generate_input(shape, 4, name), generate_input(shape, 4, name)
    assert torch.equal(a, b) and not torch.equal(a, generate_input(shape, 5, name))
    base = generate_input(shape, 4)
    if transform == "large_magnitude":
        assert torch.equal(a, base * 100.0)
    elif transform == "tiny_magnitude":
        assert torch.equal(a, base * 1e-3)
    elif transform == "ties":
        assert set(a.unique().tolist()) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
        assert torch.equal(a, (base / 3.0).round().clamp(-2, 2))
    else:  # row_shift: one constant per row, |c| in [250, 1000], signs alternating
        offsets = (a - base).reshape(shape[0], -1)
        c = offsets[:, 0].double()
        assert torch.allclose(offsets.double(), c[:, None].expand_as(offsets), atol=1e-3)
        assert ((c.abs() > SHIFT_MIN - 1) & (c.abs() < SHIFT_MAX + 1)).all()
        assert (torch.sign(c) == torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0], dtype=torch.float64)).all()


def test_the_base_draws_are_unchanged_and_only_the_first_input_is_transformed():
    shapes = [(6, 8), (8, 3)]
    plain = generate_inputs(shapes, 9)
    shifted = generate_inputs(shapes, 9, "signed_wide+row_shift")
    assert not torch.equal(plain[0], shifted[0]) and torch.equal(plain[1], shifted[1])
    out = [torch.empty(s) for s in shapes]
    generate_inputs(shapes, 9, "signed_wide+row_shift", out=out)
    assert all(torch.equal(o, s) for o, s in zip(out, shifted, strict=True))
    # The base distributions draw bit for bit what they drew before transforms existed (sha256 prefixes
    # computed with the previous inputs.py), so references, timings and earlier results stay comparable.
    digest = {d: hashlib.sha256(generate_input((16, 4099) if d == "signed_wide" else (5, 7), 0 if d == "signed_wide"
                                               else 3, d).numpy().tobytes()).hexdigest()[:16] for d in DISTRIBUTIONS}
    assert digest == {"signed_wide": "de0a9a0f3cc1f3b3", "kernelbench": "425fd8583a34f3d8"}
    assert hashlib.sha256(b"".join(t.numpy().tobytes() for t in plain)).hexdigest()[:16] == "00fb1a41277cf8bf"


# --- fairness: finite references, honest solutions pass -----------------------------------------------


def _full_rows(task: Task) -> list[tuple[int, ...]]:
    """Two rows of the full profile's odd row length, for 2-D row-wise tasks (many chunks, a ragged last one)."""
    full = task.shape("full", odd=True)
    return [(2, full[1])] if len(full) == 2 and task.rows_independent and not task.profiles["full"].extra else []


CASES_FULL_ROWS = [(t, d) for t, d in CASES if _full_rows(ALL[t])]


def _check_honest(task_id: str, distribution: str, shapes: list[tuple[int, ...]]) -> None:
    task = ALL[task_id]
    model = _solution(task_id).ModelNew(*task.init_inputs)
    for seed in (0, 1):
        xs = generate_inputs(shapes, seed, distribution, DEVICE)
        ref = reference_output(task.load_module().Model(*task.init_inputs), xs)
        assert torch.isfinite(ref.double()).all(), f"{task_id} {distribution}: the reference is not finite"
        result = compare(model(*xs), ref, task.tolerance)
        assert result.passed, f"{task_id} {distribution} {shapes} seed {seed}: {result.summary()}"


@pytest.mark.parametrize("odd", [False, True], ids=["small", "odd"])
@pytest.mark.parametrize(("task_id", "distribution"), CASES)
def test_the_honest_solution_passes_under_each_transform(task_id, distribution, odd):
    """Fair: the float64 reference is finite and the honest fp32 solution is within the task's tolerance."""
    _check_honest(task_id, distribution, ALL[task_id].input_shapes("small", odd=odd))


@pytest.mark.parametrize(("task_id", "distribution"), CASES_FULL_ROWS)
def test_the_honest_solution_passes_under_each_transform_on_full_length_rows(task_id, distribution):
    _check_honest(task_id, distribution, _full_rows(ALL[task_id]))


@pytest.mark.parametrize(("task_id", "distribution"), CASES)
def test_trivial_answers_still_fail_under_each_transform(task_id, distribution):
    task = ALL[task_id]
    xs = generate_inputs(task.input_shapes("small"), 0, distribution)
    ref = reference_output(task.load_module().Model(*task.init_inputs), xs)
    if ref.dtype.is_floating_point:
        assert not compare(torch.zeros(ref.shape), ref, task.tolerance).passed
    else:
        assert not torch.equal(torch.zeros_like(ref), ref)


# --- power: the fragile kernels each transform targets pass the base and fail the transform ------------


def _rms_no_eps(x):
    return x / torch.sqrt((x * x).mean(dim=1, keepdim=True))


def _instance_no_eps(x):
    m = x.mean(dim=(2, 3), keepdim=True)
    return (x - m) / torch.sqrt(((x - m) ** 2).mean(dim=(2, 3), keepdim=True))


def _max_zero_padded(x):  # masked lanes (or the running max) start at 0 instead of -inf
    return torch.maximum(x.max(dim=1).values, torch.zeros(()))


def _min_zero_padded(x):
    return torch.minimum(x.min(dim=1).values, torch.zeros(()))


def _argmax_last(x):  # ">=" in the running comparison: the last index of the maximum
    flipped = x.flip(1).argmax(dim=1)
    return x.shape[1] - 1 - flipped


def _maxpool_zero_padded(x):
    return F.max_pool1d(F.pad(x, (4, 4), value=0.0), kernel_size=8, stride=1, padding=0, dilation=3)


def _softmax_const(x):
    return torch.exp(x - 20) / torch.exp(x - 20).sum(1, keepdim=True)


def _log_softmax_const(x):
    return (x - 20) - torch.log(torch.exp(x - 20).sum(1, keepdim=True))


def _tanh_exp_f64(x):
    e = torch.exp(2 * x.double())
    return ((e - 1) / (e + 1)).float()


def _sigmoid_exp_ratio_f64(x):
    e = torch.exp(x.double())
    return (e / (1 + e)).float()


def _swish_clamped(x):
    x = x.clamp(-100, 100)
    return x * torch.sigmoid(x)


FRAGILE = {
    "softmax with a constant for the row max": ("23_Softmax", _softmax_const),
    "log_softmax with a constant": ("24_LogSoftmax", _log_softmax_const),
    "tanh via exp(2x) in float64": ("22_Tanh", _tanh_exp_f64),
    "sigmoid via exp(x) / (1 + exp(x)) in float64": ("21_Sigmoid", _sigmoid_exp_ratio_f64),
    "swish on an input clamped to +-100": ("25_Swish", _swish_clamped),
    "relu of an input clamped to +-100": ("19_ReLU", lambda x: x.clamp(-100, 100).clamp(min=0)),
    "rmsnorm without eps": ("36_RMSNorm_", _rms_no_eps),
    "instance norm without eps": ("34_InstanceNorm", _instance_no_eps),
    "max reduction padded with 0": ("49_Max_reduction_over_a_dimension", _max_zero_padded),
    "min reduction padded with 0": ("53_Min_reduction_over_a_dimension", _min_zero_padded),
    "argmax keeping the last index": ("51_Argmax_over_a_dimension", _argmax_last),
    # Already wrong on some base draws (an edge window of 6 real values is all negative 1/64 of the time), so
    # a session passes about one time in ten: a lucky ok today, caught every time under row_shift.
    "max pooling padded with 0": ("41_Max_Pooling_1D", _maxpool_zero_padded),
}
SOMETIMES_CAUGHT_TODAY = {"max pooling padded with 0"}


def _passes(task: Task, fn, x: torch.Tensor) -> bool:
    ref = reference_output(task.load_module().Model(*task.init_inputs), x)
    out = fn(x.clone())
    if not ref.dtype.is_floating_point:
        return torch.equal(out.to(ref.dtype), ref)
    return compare(out.to(torch.float32), ref, task.tolerance).passed


@pytest.mark.parametrize("name", list(FRAGILE))
def test_each_transform_catches_the_kernel_it_targets(name):
    """Every base draw (15 seeds, small and odd shape) passes (or some do); some transformed distribution always fails."""
    task_id, fn = FRAGILE[name]
    task = get_task(task_id)
    base = [_passes(task, fn, generate_input(task.shape("small", odd=odd), seed))
            for seed in range(15) for odd in (False, True)]
    if name in SOMETIMES_CAUGHT_TODAY:
        assert any(base) and not all(base), f"{name}: {base.count(False)} of {len(base)} base draws fail"
    else:
        assert all(base), f"{name}: already wrong on the base distribution ({base.count(False)} of {len(base)})"
    # Caught in every session: some transformed distribution fails on every seed, at both shapes.
    caught = [d for d in task.check_distributions("signed_wide")[1:]
              if not any(_passes(task, fn, generate_input(task.shape("small", odd=odd), seed, d))
                         for seed in range(3) for odd in (False, True))]
    assert caught, f"{name}: passed some draw of every transformed distribution"


def test_the_brief_s_fp32_overflow_kernels_are_already_caught_by_the_base_outliers():
    """(e^2x - 1) / (e^2x + 1) in fp32 overflows past x = 44: signed_wide's 50..100 outliers catch it today."""
    tanh = get_task("22_Tanh")
    caught = 0
    for seed in range(10):
        x = generate_input(tanh.shape("small"), seed)
        e = torch.exp(2 * x)
        caught += not compare((e - 1) / (e + 1), torch.tanh(x.double()), tanh.tolerance).passed
    assert caught == 10


# --- end to end: the dist_* fixtures through the evaluator with per-call distributions -----------------


DIST_FIXTURES = ["dist_softmax_constant_shift", "dist_logsoftmax_constant_shift", "dist_tanh_fp64_exp",
                 "dist_swish_clamped_input"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_dist_fixtures_are_incorrect_and_honest_solutions_ok_with_per_call_distributions():
    from kernelflow.eval import EvalConfig, Evaluator, Status
    from tests.eval.test_adversarial import CORPUS, load_fixture
    from tests.helpers.solutions import solution_source

    ev = Evaluator(EvalConfig(backend="interpret", shape="small", seeds=2, timed_runs=2, timeout_s=120,
                              max_workers=1, verdict_cache_size=0))
    try:
        for name in DIST_FIXTURES:
            fixture = load_fixture(CORPUS / f"{name}.py")
            verdict = ev.evaluate(fixture.task_id, fixture.source)
            assert verdict.status == Status.INCORRECT, f"{name}: {verdict.status}\n{verdict.feedback}"
            assert "inputs" in verdict.feedback and math.isclose(verdict.reward, 0.0)
            honest = ev.evaluate(fixture.task_id, solution_source(fixture.task_id))
            assert honest.status == Status.OK, f"honest {fixture.task_id}: {honest.status}\n{honest.feedback}"
    finally:
        ev.close()
