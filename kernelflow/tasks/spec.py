"""Task metadata: what a task computes, at which shapes, how it is checked and what its floor is.

A `Task` pairs a KernelBench-format reference module (the source a model is shown) with the metadata
the evaluator needs: shape profiles, the minimal bytes and flops for the roofline floor, the
correctness tolerance, the input distribution and the check transformations its reference is valid
under (`check_transforms`; `check_distributions` names them, `distribution_for_call` says which one
each call of a session draws). This module holds types only; the ten pilot tasks are declared in
`suite.py`, and inputs are drawn and transformed in `inputs.py`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

# The KernelBench revision the task ids and reference sources come from (suite.py, families.py).
KERNELBENCH_REVISION = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"
SHAPE_PROFILES = ("small", "full")
DISTRIBUTIONS = ("signed_wide", "kernelbench")
# The closed set of check transformations of a drawn input (inputs.py defines and documents each).
TRANSFORM_NAMES = ("row_shift", "large_magnitude", "tiny_magnitude", "ties")
# The only base distribution that is transformed: `kernelbench` exists for exact replication.
TRANSFORMED_BASE = "signed_wide"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class ShapeProfile:
    """Input shapes of one profile: `shape` is judged and timed, `odd_shape` is checked only.

    `shape` / `odd_shape` are the first input's; tasks with more inputs (a matmul's B, a loss's
    targets) list the shapes of the others in `extra` / `odd_extra`, in `forward`'s argument order.
    """

    shape: tuple[int, ...]
    odd_shape: tuple[int, ...]
    extra: tuple[tuple[int, ...], ...] = ()
    odd_extra: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        for s in (self.shape, self.odd_shape, *self.extra, *self.odd_extra):
            if not s or any(int(d) <= 0 for d in s):
                raise ValueError(f"shape {s} must be a non-empty tuple of positive ints")
        if len(self.extra) != len(self.odd_extra):
            raise ValueError(f"extra inputs {self.extra} and odd_extra {self.odd_extra} must list the same inputs")


@dataclass(frozen=True)
class Tolerance:
    """Elementwise check against a float64 reference: |out - ref| <= atol + rtol * |ref| everywhere.

    The bound scales with the reference, so tasks whose outputs are tiny (softmax over 393216
    columns has outputs near 2.5e-6) need a tiny atol, or an all-zeros answer would pass.
    """

    atol: float
    rtol: float

    def __post_init__(self) -> None:
        if self.atol < 0 or self.rtol < 0 or (self.atol == 0 and self.rtol == 0):
            raise ValueError(f"tolerance atol={self.atol}, rtol={self.rtol}: both >= 0, not both 0")


# KernelBench's own fp32 check (allclose with atol = rtol = 1e-4), kept for exact replication.
KERNELBENCH_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-4)


@dataclass(frozen=True)
class Task:
    """One kernel-writing task: a reference module plus what the evaluator needs to judge it.

    `bytes_per_element` counts the minimal traffic per output element (each input read once, each
    output written once); `flops_per_element` the arithmetic per element. Both feed the roofline
    floor t_min = max(bytes / bandwidth, flops / flop_rate).
    """

    task_id: str
    group: str
    source_path: Path
    profiles: dict[str, ShapeProfile]
    tolerance: Tolerance
    bytes_per_element: float
    flops_per_element: float
    dtype: str = "float32"
    distribution: str = "signed_wide"
    description: str = ""
    init_inputs: tuple = field(default=())
    # Floor traffic and arithmetic from the input shapes, for tasks whose cost is not proportional to
    # the first input's size (a matmul: 2MNK flops; a reduction: a smaller output). Returns
    # (bytes_min, flops); None: `bytes_per_element` / `flops_per_element` times the first input's numel.
    cost: Callable[[Sequence[tuple[int, ...]]], tuple[float, float]] | None = field(default=None, compare=False)
    # Whether output row i depends only on row i of the first input (the other inputs whole): then the
    # judge computes float64 references in row chunks. False for whole-tensor results (a loss, a
    # Frobenius norm, batch statistics), whose references are computed in one piece.
    rows_independent: bool = True
    # Named transformations of a `signed_wide` draw (inputs.TRANSFORMS) under which the reference stays
    # valid and finite and the tolerance stays achievable by an honest fp32 kernel; applied to the first
    # input only. The judge checks some calls under them (`distribution_for_call`).
    check_transforms: tuple[str, ...] = ()
    # Library ops that stay allowed in this task's submissions, by qualified name (a level-2 problem whose
    # point is fusing a convolution's epilogue keeps "torch.nn.functional.conv2d"). Per task, never a global
    # table; empty by default: host code may then only allocate, query metadata, reshape and launch
    # (kernelflow/eval/static/language.py, docs/submission_language.md).
    allowed_ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        missing = [p for p in SHAPE_PROFILES if p not in self.profiles]
        if missing:
            raise ValueError(f"task {self.task_id}: shape profiles {missing} are missing")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"task {self.task_id}: dtype {self.dtype!r} not in {sorted(DTYPE_BYTES)}")
        if self.distribution not in DISTRIBUTIONS:
            raise ValueError(f"task {self.task_id}: distribution {self.distribution!r} not in {DISTRIBUTIONS}")
        if not self.source_path.is_file():
            raise ValueError(f"task {self.task_id}: reference source {self.source_path} does not exist")
        bad = [t for t in self.check_transforms if t not in TRANSFORM_NAMES]
        if bad or len(set(self.check_transforms)) != len(self.check_transforms):
            raise ValueError(f"task {self.task_id}: check_transforms {self.check_transforms} must be distinct "
                             f"names of {TRANSFORM_NAMES}")
        bad = [op for op in self.allowed_ops if not isinstance(op, str) or not op.startswith("torch.")
               or not all(part.isidentifier() for part in op.split("."))]
        if bad:
            raise ValueError(f"task {self.task_id}: allowed_ops {bad} must be qualified torch names "
                             "such as 'torch.nn.functional.conv2d'")

    def check_distributions(self, base: str) -> tuple[str, ...]:
        """The distributions the judge draws for this task under `base`: `base` first, then each transform.

        Only `signed_wide` is transformed (`"signed_wide+row_shift"`, ...); `kernelbench` is for exact
        replication of KernelBench, so it stays alone.
        """
        if base not in DISTRIBUTIONS:
            raise ValueError(f"unknown base distribution {base!r}; choose one of {DISTRIBUTIONS}")
        if base != TRANSFORMED_BASE:
            return (base,)
        return (base, *(f"{base}+{t}" for t in self.check_transforms))

    @property
    def source(self) -> str:
        """The reference module's text, exactly as a model is shown it."""
        return self.source_path.read_text()

    def shape(self, profile: str, odd: bool = False) -> tuple[int, ...]:
        """The input shape of `profile` ('small' or 'full'); `odd=True` gives its correctness-only shape."""
        if profile not in self.profiles:
            raise KeyError(f"unknown shape profile {profile!r}; choose one of {SHAPE_PROFILES}")
        p = self.profiles[profile]
        return p.odd_shape if odd else p.shape

    def input_shapes(self, profile: str, odd: bool = False) -> list[tuple[int, ...]]:
        """The shapes of every input of `forward`, in argument order (the first is `shape(profile, odd)`)."""
        p = self.profiles[profile] if profile in self.profiles else None
        if p is None:
            raise KeyError(f"unknown shape profile {profile!r}; choose one of {SHAPE_PROFILES}")
        return [self.shape(profile, odd), *(p.odd_extra if odd else p.extra)]

    def numel(self, profile: str) -> int:
        return math.prod(self.shape(profile))

    def bytes_min(self, profile: str) -> float:
        """Minimal bytes moved through device memory for one forward at `profile`'s main shape."""
        if self.cost is not None:
            return float(self.cost(self.input_shapes(profile))[0])
        return self.bytes_per_element * self.numel(profile)

    def flops(self, profile: str) -> float:
        if self.cost is not None:
            return float(self.cost(self.input_shapes(profile))[1])
        return self.flops_per_element * self.numel(profile)

    def load_module(self) -> ModuleType:
        """Import the reference module from its file (a fresh module object each call)."""
        name = f"kernelflow_ref_{self.task_id}"
        spec = importlib.util.spec_from_file_location(name, self.source_path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load reference module {self.source_path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(module)
        return module

    def to_dict(self) -> dict:
        """A JSON-friendly summary (used for the suite hash and `kernelflow tasks --json`)."""
        d = {
            "task_id": self.task_id,
            "group": self.group,
            "dtype": self.dtype,
            "distribution": self.distribution,
            "shapes": {k: {"shape": list(v.shape), "odd_shape": list(v.odd_shape)} for k, v in self.profiles.items()},
            "tolerance": {"atol": self.tolerance.atol, "rtol": self.tolerance.rtol},
            "bytes_per_element": self.bytes_per_element,
            "flops_per_element": self.flops_per_element,
            "init_inputs": list(self.init_inputs),
        }
        # Keys only tasks with several inputs or their own cost have, so older tasks' hashes stay put.
        if any(p.extra for p in self.profiles.values()):
            d["shapes"] = {k: {**d["shapes"][k], "extra": [list(e) for e in v.extra],
                               "odd_extra": [list(e) for e in v.odd_extra]} for k, v in self.profiles.items()}
        if self.cost is not None:
            d["cost"] = {k: [self.bytes_min(k), self.flops(k)] for k in self.profiles}
        if not self.rows_independent:
            d["rows_independent"] = False
        if self.check_transforms:
            d["check_transforms"] = list(self.check_transforms)
        return d


def distribution_for_call(task: Task, base: str, index: int) -> str:
    """The distribution of a session's `index`-th correctness call (0-based, in plan order).

    Call 0 draws `base` (the determinism repeat re-draws call 0, and the timed calls draw `base` too,
    so timings stay comparable across tasks and with eager PyTorch); calls 1, 2, ... cycle through the
    task's transformed distributions, so each is drawn once when the session has enough untimed calls
    (seeds + the odd shape). A task without transforms, or a `kernelbench` base, draws `base` always.
    """
    if index < 0:
        raise ValueError(f"call index {index} must be >= 0")
    dists = task.check_distributions(base)
    if index == 0 or len(dists) == 1:
        return base
    return dists[1 + (index - 1) % (len(dists) - 1)]


def tasks_hash(tasks, *extra: str) -> str:
    """sha256 over the KernelBench revision, `extra` strings, and each task's metadata and source."""
    h = hashlib.sha256(KERNELBENCH_REVISION.encode())
    for text in extra:
        h.update(text.encode())
    for task in tasks:
        h.update(json.dumps(task.to_dict(), sort_keys=True).encode())
        h.update(task.source.encode())
    return h.hexdigest()
