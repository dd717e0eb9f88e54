"""The pilot's ten KernelBench level-1 tasks, with the metadata the evaluator needs.

Task ids are KernelBench's file stems at revision `KERNELBENCH_REVISION`; the reference modules in
`kernelbench/level1/` compute what that revision computes at its shapes. Adding a task is adding its
reference module there plus one `Task(...)` entry below.

Tolerances (checked against a float64 reference, |out - ref| <= atol + rtol * |ref|):
- piecewise-linear ops are exact in fp32, so they get a tight bound;
- transcendental ops allow for approximate exp/tanh in Triton (relative error ~1e-6);
- softmax has outputs near 2.5e-6 at full shape, so its atol is 1e-9 (all zeros must fail);
- MinGPT GELU allows the erf form of GELU (up to 4.7e-4 from the tanh form; the pilot counted it
  correct) with atol = rtol = 1e-3, which still rejects a bf16 downcast.

Check transformations (`check_transforms`, see `inputs.py`): the activations are also judged on
`large_magnitude` inputs, softmax and log-softmax on `row_shift`ed rows.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from kernelflow.tasks.families import FAMILY_TASKS  # the second-tier suite; families.py does not import this module
from kernelflow.tasks.spec import ShapeProfile, Task, Tolerance, tasks_hash

GROUPS = ("train", "reserved", "heldout")
_LEVEL1 = Path(__file__).parent / "kernelbench" / "level1"

# fp32 unary ops read one float and write one float per element.
_UNARY_FP32_BYTES = 8.0
_WIDE = {
    "small": ShapeProfile(shape=(16, 4099), odd_shape=(3, 1037)),
    "full": ShapeProfile(shape=(4096, 393216), odd_shape=(3, 393217)),
}
_GELU_SHAPES = {
    "small": ShapeProfile(shape=(16, 4099), odd_shape=(3, 1037)),
    "full": ShapeProfile(shape=(8192, 8192), odd_shape=(5, 8193)),
}
_EXACT = Tolerance(atol=1e-6, rtol=1e-6)
# Check transformations (inputs.TRANSFORMS; docs/verdict.md): elementwise activations are also judged
# on inputs scaled by 100 (|x| up to 1e4), where every reference saturates or is exact and a kernel
# that clamps its input or exponentiates a positive number in float64 breaks; softmax and log-softmax
# on rows shifted by +-250..1000 (the result is invariant; a constant in place of the row max fails).
_ACTIVATION = ("large_magnitude",)
_ROW_SHIFT = ("row_shift",)
_TRANSCENDENTAL = Tolerance(atol=1e-5, rtol=1e-4)


def _task(task_id: str, group: str, flops: float, tol: Tolerance, description: str, shapes=None, **kw) -> Task:
    return Task(
        task_id=task_id,
        group=group,
        source_path=_LEVEL1 / f"{task_id}.py",
        profiles=shapes or _WIDE,
        tolerance=tol,
        bytes_per_element=_UNARY_FP32_BYTES,
        flops_per_element=flops,
        description=description,
        **kw,
    )


TASKS: dict[str, Task] = {
    t.task_id: t
    for t in [
        _task("19_ReLU", "train", 1, _EXACT, "max(x, 0)", check_transforms=_ACTIVATION),
        _task("20_LeakyReLU", "train", 2, _EXACT, "x if x > 0 else 0.01 * x", check_transforms=_ACTIVATION),
        _task("21_Sigmoid", "train", 4, _TRANSCENDENTAL, "1 / (1 + exp(-x))", check_transforms=_ACTIVATION),
        _task("22_Tanh", "train", 6, _TRANSCENDENTAL, "tanh(x)", check_transforms=_ACTIVATION),
        _task("25_Swish", "reserved", 5, _TRANSCENDENTAL, "x * sigmoid(x)", check_transforms=_ACTIVATION),
        _task("28_HardSigmoid", "reserved", 4, _EXACT, "clamp(x / 6 + 1/2, 0, 1)", check_transforms=_ACTIVATION),
        _task("32_HardTanh", "reserved", 2, _EXACT, "clamp(x, -1, 1)", check_transforms=_ACTIVATION),
        _task("23_Softmax", "heldout", 5, Tolerance(atol=1e-9, rtol=1e-4), "softmax over dim 1",
              check_transforms=_ROW_SHIFT),
        _task("24_LogSoftmax", "heldout", 5, Tolerance(atol=1e-5, rtol=1e-5), "log_softmax over dim 1",
              check_transforms=_ROW_SHIFT),
        _task(
            "88_MinGPTNewGelu", "heldout", 12, Tolerance(atol=1e-3, rtol=1e-3),
            "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))", shapes=_GELU_SHAPES,
            check_transforms=_ACTIVATION,
        ),
    ]
}


def get_task(task_id: str) -> Task:
    """The task with this id, of the pilot suite or of the families (`families.py`); a KeyError says
    `unknown_task_message` (the closest ids, not the whole list)."""
    task = TASKS.get(task_id) or FAMILY_TASKS.get(task_id)
    if task is None:
        raise KeyError(unknown_task_message(task_id))
    return task


# Where a user finds every id; the message names it instead of listing 35 ids.
TASK_LIST_HINT = "list the ids with `kernelflow tasks` and `kernelflow tasks --suite families`"


def unknown_task_message(task_id: object, hint: str = TASK_LIST_HINT) -> str:
    """What an unknown id is told, by the CLI, the environment server and `get_task`: "unknown task 'X';
    did you mean 'Y'?" with up to three close ids (difflib, on the whole id and on the name after the
    number, so "relu" finds 19_ReLU) of both suites, then `hint`; never the whole list."""
    if not isinstance(task_id, str):
        return f"unknown task {task_id!r}: a task id is a string such as '19_ReLU'; {hint}"
    known = [*TASKS, *FAMILY_TASKS]
    by_name = {tid.split("_", 1)[-1].lower(): tid for tid in known}
    close = difflib.get_close_matches(task_id, known, n=3, cutoff=0.6)
    close += [by_name[n] for n in difflib.get_close_matches(task_id.lower(), list(by_name), n=3, cutoff=0.6)
              if by_name[n] not in close]
    if not close:
        return f"unknown task {task_id!r}; {hint}"
    return f"unknown task {task_id!r}; did you mean {' or '.join(repr(c) for c in close[:3])}? ({hint})"


def task_ids(group: str | None = None) -> list[str]:
    """Task ids in suite order, optionally only those of one group (train, reserved, heldout)."""
    if group is not None and group not in GROUPS:
        raise ValueError(f"unknown task group {group!r}; choose one of {GROUPS}")
    return [t.task_id for t in TASKS.values() if group is None or t.group == group]


def suite_hash() -> str:
    """sha256 over every task's metadata and reference source: changes whenever the suite does."""
    return tasks_hash(TASKS.values())
