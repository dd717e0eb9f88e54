"""Task metadata: what a task computes, at which shapes, how it is checked and what its floor is.

A `Task` pairs a KernelBench-format reference module (the source a model is shown) with the metadata
the evaluator needs: shape profiles, the minimal bytes and flops for the roofline floor, the
correctness tolerance and the input distribution. This module holds types only; the ten pilot tasks
are declared in `suite.py`, and inputs are drawn in `inputs.py`.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

SHAPE_PROFILES = ("small", "full")
DISTRIBUTIONS = ("signed_wide", "kernelbench")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True)
class ShapeProfile:
    """Input shapes of one profile: `shape` is judged and timed, `odd_shape` is checked only."""

    shape: tuple[int, ...]
    odd_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        for s in (self.shape, self.odd_shape):
            if not s or any(int(d) <= 0 for d in s):
                raise ValueError(f"shape {s} must be a non-empty tuple of positive ints")


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

    def numel(self, profile: str) -> int:
        return math.prod(self.shape(profile))

    def bytes_min(self, profile: str) -> float:
        """Minimal bytes moved through device memory for one forward at `profile`'s main shape."""
        return self.bytes_per_element * self.numel(profile)

    def flops(self, profile: str) -> float:
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
        return {
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
