"""The second-tier suite: KernelBench level-1 problems from operator families the pilot lacks.

`FAMILY_TASKS` holds shape-preserving, one-input problems of two families, normalisation
(RMSNorm, InstanceNorm, GroupNorm, L1 and L2 row normalisation) and cumulative scans (inclusive, reverse and exclusive
cumsum). Every one has the role **evaluated only**: under `tasks=families` the policy trains on the
pilot's `train` group and is judged on all of these, so none of them may be trained on or used for
selection. The pilot suite (`suite.py`: `TASKS`, `GROUPS`, `task_ids()`, `suite_hash()`) is not
touched; `get_task` resolves ids of both suites.

Reference modules live in `kernelbench/level1/families/` (beside, not in, the pilot's folder, whose
contents the pilot's tests pin), named by KernelBench's file stems at `KERNELBENCH_REVISION`.

Metadata conventions (as in `suite.py`):
- `bytes_per_element` counts the floor traffic per *input* element (`Task.bytes_min` multiplies it
  by the input's numel). All tasks here write an output of the input's shape, so it is 4 + 4 = 8
  (one fp32 read, one fp32 write), although a two-pass norm kernel really reads twice.
- Shapes: `full` = KernelBench's; `small` = CPU-sized with a scanned/reduced length that is not a
  power of two; the odd shapes are odd in every dimension the kernel blocks over.
- Precision policy: fp32 in, fp32 out, fp32 accumulation; no TF32 (no task here uses `tl.dot`).
  Tolerances are checked against float64 and sized from measured fp32 errors, with a margin of about
  10x; each rejects all zeros, the input itself and a bf16 downcast under `signed_wide` inputs.
  * RMS/L1/L2 norms: atol 1e-7, rtol 1e-5 (outputs are x times a per-row scale, so the error is
    relative; bf16 is off by up to 4e-3 relative);
  * instance and group norms: atol 1e-5, rtol 1e-5 (outputs near 0 carry the mean's rounding);
  * cumsum family: atol 2e-3, rtol 1e-5 (prefix sums reach ~1500 at the full length 32768; a
    blocked fp32 scan was measured 1.8e-4 off at that length, a bf16 input 1.8 off).

Not here (the evaluator assumes one input tensor and an output of the input's shape and dtype):
reductions over a dim (47_Sum, 48_Mean, 49_Max, 51_Argmax, 53_Min: smaller output, argmax int64),
the whole-tensor 37_FrobeniusNorm_ (its reference cannot be computed in row chunks), binary ops with
broadcasting and matmul variants (two inputs), 40_LayerNorm (its normalized_shape is an init arg,
so the small profile cannot shrink the normalised dims). See docs/families.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelflow.tasks.spec import ShapeProfile, Task, Tolerance

FAMILY_GROUPS = ("normalization", "cumulative")
# The role each group plays in an experiment over the families (`tasks=families`).
FAMILY_ROLES = {"normalization": "evaluated only", "cumulative": "evaluated only"}
_FAMILIES = Path(__file__).parent / "kernelbench" / "level1" / "families"

# One fp32 read and one fp32 write per input element (the output has the input's shape).
_SAME_SHAPE_FP32_BYTES = 8.0
_NORM_TOL = Tolerance(atol=1e-7, rtol=1e-5)
_SCAN_TOL = Tolerance(atol=2e-3, rtol=1e-5)
# Mean-subtracting norms: outputs near 0 carry the mean's rounding, so atol is wider than _NORM_TOL's.
_CENTRED_TOL = Tolerance(atol=1e-5, rtol=1e-5)

_ROWS_65535 = {
    "small": ShapeProfile(shape=(8, 4099), odd_shape=(3, 1037)),
    "full": ShapeProfile(shape=(32768, 65535), odd_shape=(3, 65537)),
}
_ROWS_32768 = {
    "small": ShapeProfile(shape=(8, 4099), odd_shape=(3, 1037)),
    "full": ShapeProfile(shape=(32768, 32768), odd_shape=(3, 32769)),
}
# RMSNorm reduces over dim 1 (64 features at full shape); the small profile keeps 64 features and
# the odd one takes 37, since the reference never reads num_features.
_RMS_SHAPES = {
    "small": ShapeProfile(shape=(2, 64, 9, 13), odd_shape=(3, 37, 5, 7)),
    "full": ShapeProfile(shape=(112, 64, 512, 512), odd_shape=(1, 65, 33, 31)),
}
# Instance and group norms reduce over dim1 x dim2 (times the features of a group); their modules
# check or size parameters by the feature count, so every profile keeps 64 features.
_NCHW_64 = {
    "small": ShapeProfile(shape=(2, 64, 9, 13), odd_shape=(3, 64, 5, 7)),
    "full": ShapeProfile(shape=(112, 64, 512, 512), odd_shape=(1, 64, 33, 31)),
}


def _task(task_id: str, group: str, flops: float, tol: Tolerance, shapes: dict, description: str, **kw) -> Task:
    return Task(
        task_id=task_id,
        group=group,
        source_path=_FAMILIES / f"{task_id}.py",
        profiles=shapes,
        tolerance=tol,
        bytes_per_element=_SAME_SHAPE_FP32_BYTES,
        flops_per_element=flops,
        description=description,
        **kw,
    )


FAMILY_TASKS: dict[str, Task] = {
    t.task_id: t
    for t in [
        _task("34_InstanceNorm", "normalization", 7, _CENTRED_TOL, _NCHW_64,
              "per (batch, feature): (x - mean) / sqrt(var + 1e-5) over dim1 x dim2", init_inputs=(64,)),
        _task("35_GroupNorm_", "normalization", 9, _CENTRED_TOL, _NCHW_64,
              "nn.GroupNorm(8 groups, 64 features): per (batch, group) normalisation, weight 1, bias 0",
              init_inputs=(64, 8)),
        _task("36_RMSNorm_", "normalization", 4, _NORM_TOL, _RMS_SHAPES,
              "x / sqrt(mean(x^2 over dim 1) + 1e-5) on (batch, features, dim1, dim2)", init_inputs=(64,)),
        _task("38_L1Norm_", "normalization", 3, _NORM_TOL, _ROWS_65535, "x / mean(|x| over dim 1)"),
        _task("39_L2Norm_", "normalization", 3, _NORM_TOL, _ROWS_65535, "x / ||x||_2 over dim 1"),
        _task("89_cumsum", "cumulative", 1, _SCAN_TOL, _ROWS_32768, "inclusive cumsum over dim 1",
              init_inputs=(1,)),
        _task("91_cumsum_reverse", "cumulative", 1, _SCAN_TOL, _ROWS_32768, "suffix sum over dim 1",
              init_inputs=(1,)),
        _task("92_cumsum_exclusive", "cumulative", 1, _SCAN_TOL, _ROWS_32768,
              "exclusive cumsum over dim 1 (out[:, 0] = 0)", init_inputs=(1,)),
    ]
}


def family_task_ids(group: str | None = None) -> list[str]:
    """Family task ids in suite order, optionally only those of one group (see FAMILY_GROUPS)."""
    if group is not None and group not in FAMILY_GROUPS:
        raise ValueError(f"unknown family group {group!r}; choose one of {FAMILY_GROUPS}")
    return [t.task_id for t in FAMILY_TASKS.values() if group is None or t.group == group]


def families_hash() -> str:
    """sha256 over every family task's metadata and reference source (like `suite_hash`)."""
    from kernelflow.tasks.suite import tasks_hash  # suite.py imports this module lazily too

    return tasks_hash(FAMILY_TASKS.values(), json.dumps(FAMILY_ROLES, sort_keys=True))
