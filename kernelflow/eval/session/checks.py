"""The judge's runtime checks: named, each with the hack it blocks, applied to every call's report.

Each `RuntimeCheck` reads the worker's `protocol.Called` report (what the in-process controls saw) and
the judge's own facts about the call (`CallFacts`), and returns why it failed or None. They run in
order after every call; the first failure ends the session with the check's status. The in-process
controls are reachable by the submission (worker/main.py says so); the checks that matter most do not
rely on them alone: `gate_respected` is the judge's clock, the values are compared by the judge
(judge.py), and a switched-off guard is itself reported (`dispatch_guard_active`).

Not here: value comparison, input and determinism checks (judge.py), static checks (static/checks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelflow.eval import protocol
from kernelflow.eval.verdict import Status


@dataclass(frozen=True)
class CallFacts:
    """What the judge knows about a call from its own side."""

    label: str
    interpreter: bool
    warm: protocol.Warm | None  # the worker's thread counts before the submission existed
    raw_ms: float | None = None  # the judge's clock window (CUDA)
    gate_ok: bool = True  # the window was not shorter than an empty call


@dataclass(frozen=True)
class RuntimeCheck:
    name: str
    status: Status
    rationale: str  # the hack it blocks
    failed: Callable[[protocol.Called, CallFacts], str | None]


def _threads(r: protocol.Called, f: CallFacts) -> str | None:
    if f.warm is None:
        return None
    if r.threads > f.warm.threads:
        return f"{r.threads - f.warm.threads} Python thread(s) of the submission are running"
    if f.interpreter and r.tasks > f.warm.tasks:  # CUDA starts driver threads lazily; the static checks cover it there
        return f"{r.tasks - f.warm.tasks} OS thread(s) of the submission are running"
    return None


RUNTIME_CHECKS: tuple[RuntimeCheck, ...] = (
    RuntimeCheck("harness_intact", Status.REJECTED_RUNTIME_CHECK,
                 "replacing the worker's launchers, guard, events or exporters to fake a launch or hide work",
                 lambda r, f: ("the submission replaced " + ", ".join(r.tampered)) if r.tampered else None),
    RuntimeCheck("no_trace_hooks", Status.REJECTED_RUNTIME_CHECK,
                 "a profile/trace hook that runs the submission's code after forward returns, outside the guard",
                 lambda r, f: ("forward left interpreter hooks installed (" + ", ".join(r.hooks) + "); they run "
                               "code after forward returns") if r.hooks else None),
    RuntimeCheck("dispatch_guard_active", Status.REJECTED_RUNTIME_CHECK,
                 "switching the PyTorch-op guard off through torch internals, then computing in PyTorch",
                 lambda r, f: None if r.guard_seen_canary else
                 "the PyTorch-op guard no longer saw operations (it was popped or disabled)"),
    RuntimeCheck("pytorch_ops_in_forward", Status.REJECTED_RUNTIME_CHECK,
                 "PyTorch doing the task's work beside a decoy kernel",
                 lambda r, f: ("PyTorch computed in forward (" + ", ".join(r.violations) + "); only allocation "
                               "and views are allowed there: do the math in a @triton.jit kernel")
                 if r.violations else None),
    RuntimeCheck("no_foreign_kernels", Status.REJECTED_RUNTIME_CHECK,
                 "Triton kernels that are not the submission's (torch.compile's, a library's) doing the work",
                 lambda r, f: f"forward launched {r.foreign_launches} Triton kernel(s) defined outside the "
                              "submission" if r.foreign_launches else None),
    RuntimeCheck("triton_kernel_launched", Status.REJECTED_RUNTIME_CHECK,
                 "an answer computed without the submission's kernel (host code, a cached result)",
                 lambda r, f: None if r.launches > 0 else "forward launched none of the submission's @triton.jit "
                                                          "kernels"),
    RuntimeCheck("no_new_threads", Status.REJECTED_RUNTIME_CHECK,
                 "work hidden in a thread started at import or in forward, outside the guard and the clock",
                 _threads),
    RuntimeCheck("gate_respected", Status.REJECTED_RUNTIME_CHECK,
                 "GPU work started before the judge's clock (ignoring the gate event) to look fast",
                 lambda r, f: None if f.gate_ok else f"the call finished in {f.raw_ms:.4f} ms of the judge's "
                                                     "clock, less than an empty call: its work did not wait for "
                                                     "the gate"),
)


def first_failure(reply: protocol.Called, facts: CallFacts) -> tuple[RuntimeCheck, str] | None:
    for check in RUNTIME_CHECKS:
        why = check.failed(reply, facts)
        if why:
            return check, f"{facts.label}: {why}"
    return None
