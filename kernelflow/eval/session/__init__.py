"""One submission's judgement, on the judge's side: the session and its parts.

- `judge.py`: `JudgeSession`, which only orchestrates: worker, plan, checks, outcome.
- `link.py`: the worker from handover to kill, bounded messages with deadlines (`WorkerLink`), and
  `SessionOutcome`.
- `plan.py`: the call plan, each call's own limit, and the GPU lock holds (`LockHolds`).
- `checks.py`: the named runtime checks, each with the hack it blocks.
- `buffers.py`: device memory shared with the worker, and reading its output from the judge's side.
- `references.py`: the float64 reference, expected output shapes, cached references, the comparison.
- `session/worker_handle.py`: the one spawn path of a worker (process, directory, isolation prefix, bootstrap);
  `session/prewarm.py`: the pool of workers started ahead of demand; `session/ipc_arena.py`: the shared device-memory
  arenas; `session/device_memory.py`: each verdict's device-memory estimate and the budget that admits verdicts.
The judge's clock (gated clock, done signal, GPU lock) lives in `kernelflow/eval/clock/`.
The message types live in `kernelflow/eval/protocol.py` (the worker uses them too); the OS isolation
of the worker in `kernelflow/eval/sandbox/policy.py`.
"""

from kernelflow.eval.clock.gated_clock import GateCalibration, calibrate
from kernelflow.eval.session.judge import JudgeSession
from kernelflow.eval.session.link import SessionOutcome, WorkerLink
from kernelflow.eval.session.plan import CallSpec, LockHolds, build_plan

__all__ = ["CallSpec", "GateCalibration", "JudgeSession", "LockHolds", "SessionOutcome", "WorkerLink", "build_plan",
           "calibrate"]
