"""The verdict: one JSON-serialisable record per submission, whatever the submission does.

`Status` is the closed set of outcomes (documented in docs/verdict.md, with every field). Every
verdict has the identity fields (task, status, reward, feedback, code hash, evaluator version,
backend, device, shape, seeds) and `cached` (False when judged, True when `cache.py` served an
identical earlier submission's verdict). The rest are nullable because they exist only where the
phase behind them ran: `wall_time` splits the verdict's seconds by phase (for a cached verdict, the
lookup's own; for one `cluster/failure.py` built, only the total); the timing fields (`runtime_*`, `t_min_ms`,
`roofline_fraction`, `eager_ms`, `speedup_vs_eager`, `compile_ms`) only on a timed CUDA verdict (`ok`
or `impossible_time`); `torch_compile_ms` and `speedup_vs_compile` only there too, and only with
`EvalConfig.compile_baseline` on; `max_abs_err` / `max_rel_violation` once outputs were compared;
`isolation` on every verdict the evaluator judged (None on one built by `cluster/failure.py`).
This module holds the types only; `evaluator.py` produces verdicts.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """What happened to a submission. Only `ok` is correct; every other status earns reward 0."""

    NO_CODE = "no_code"  # the answer held no code block / no parsable module
    STATIC_REJECTED = "static_rejected"  # a static check failed before anything ran
    COMPILE_ERROR = "compile_error"  # import of the module or Triton compilation failed
    RUNTIME_ERROR = "runtime_error"  # forward raised (bad launch, illegal address, OOM, exit)
    INCORRECT = "incorrect"  # ran, but an output was wrong (values, shape, dtype, type, storage)
    TIMEOUT = "timeout"  # the worker ran past its wall-clock limit and was killed
    CRASHED = "crashed"  # the worker died without a result (signal, abort, output flood, exit)
    REJECTED_RUNTIME_CHECK = "rejected_runtime_check"  # a runtime control failed (non-Triton op, no launch, ...)
    IMPOSSIBLE_TIME = "impossible_time"  # correct, but faster than the physical floor allows
    EVALUATOR_ERROR = "evaluator_error"  # our fault, not the submission's (e.g. the worker could not start)
    OK = "ok"  # correct; reward from the roofline fraction




@dataclass(frozen=True)
class Check:
    """One named check and its outcome; `why` says what was seen (shown to the model)."""

    passed: bool
    why: str = ""


@dataclass(frozen=True)
class WallTime:
    """Where a verdict's wall time went, in seconds (None where a phase did not run)."""

    queue_s: float | None = None
    worker_start_s: float | None = None
    import_s: float | None = None
    compile_s: float | None = None
    correctness_s: float | None = None
    timing_s: float | None = None
    reference_s: float | None = None
    # Waiting for the per-GPU lock while other verdicts' GPU phases ran (CUDA only): at high load
    # this, not the submission, is most of a verdict's time.
    gpu_wait_s: float | None = None
    baselines_s: float | None = None  # device calibration and eager / torch.compile timing, when not cached
    total_s: float | None = None


@dataclass(frozen=True)
class Verdict:
    """The evaluator's judgement of one submission (see docs/verdict.md for every field)."""

    task_id: str
    status: str
    correct: bool
    reward: float
    feedback: str
    code_sha256: str
    evaluator_version: str
    backend: str
    device: str
    shape: str
    seeds: list[int]
    checks: dict[str, Check] = field(default_factory=dict)
    timed: bool = False
    runtime_ms: float | None = None
    runtime_min_ms: float | None = None
    runtime_max_ms: float | None = None
    t_min_ms: float | None = None
    roofline_fraction: float | None = None
    eager_ms: float | None = None
    speedup_vs_eager: float | None = None
    max_abs_err: float | None = None
    max_rel_violation: float | None = None
    # Null where the phase behind them did not run (see the module docstring).
    cached: bool | None = None
    wall_time: WallTime | None = None
    compile_ms: float | None = None
    torch_compile_ms: float | None = None
    speedup_vs_compile: float | None = None
    # The OS isolation level every worker of this evaluator ran under (kernelflow/eval/sandbox/policy.py);
    # its mechanisms are in checks["isolation"].
    isolation: str | None = None

    def __post_init__(self) -> None:
        if self.status not in Status._value2member_map_:
            raise ValueError(f"status {self.status!r} is not one of {[s.value for s in Status]}")
        if self.correct != (self.status == Status.OK.value):
            raise ValueError(f"correct={self.correct} contradicts status {self.status!r}")
        if not self.correct and self.reward != 0.0:
            raise ValueError(f"a {self.status} verdict must have reward 0, got {self.reward}")

    @property
    def compiled(self) -> bool:
        """Whether the module imported and its kernels compiled (no_code/static/compile errors did not)."""
        return self.status not in (
            Status.NO_CODE.value, Status.STATIC_REJECTED.value, Status.COMPILE_ERROR.value,
            Status.EVALUATOR_ERROR.value,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        """Rebuild a verdict from `to_dict()` output (unknown keys are an error, to catch drift)."""
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown verdict fields {sorted(unknown)}")
        data = dict(data)
        data["checks"] = {k: Check(**v) if isinstance(v, dict) else v for k, v in data.get("checks", {}).items()}
        if isinstance(data.get("wall_time"), dict):
            data["wall_time"] = WallTime(**data["wall_time"])
        return cls(**data)


def code_sha256(source: str | None) -> str:
    """sha256 of the submitted text (the empty string for a missing answer)."""
    return hashlib.sha256((source or "").encode("utf-8", errors="replace")).hexdigest()
