"""The text a model reads about its submission: what failed and why, or how fast it ran.

Feedback is built from the verdict's facts only (status, failed check, mismatch summary, timing),
trimmed to a bounded length, with compile errors quoting the submission's own line numbers. It is
part of the verdict, so the environment and the trainer show exactly what the evaluator decided.
"""

from __future__ import annotations

from kernelflow.eval.verdict import Check, Status

_HEADLINES = {
    Status.NO_CODE.value: "No code found: answer with one ```python block holding the complete module.",
    Status.STATIC_REJECTED.value: "Rejected before running: the code breaks a rule.",
    Status.COMPILE_ERROR.value: "The module failed to import or a kernel failed to compile.",
    Status.RUNTIME_ERROR.value: "The kernel raised an error while running.",
    Status.INCORRECT.value: "The kernel ran but its output is wrong.",
    Status.TIMEOUT.value: "The kernel did not finish in time.",
    Status.CRASHED.value: "The process running the kernel crashed.",
    Status.REJECTED_RUNTIME_CHECK.value: "Rejected while running: forward did work outside Triton or tampered with the harness.",
    Status.IMPOSSIBLE_TIME.value: "The measured time is below the hardware's physical floor, so it cannot be trusted.",
    Status.EVALUATOR_ERROR.value: "The evaluator failed (not your fault); the submission was not judged.",
    Status.OK.value: "Correct.",
}


def build_feedback(
    status: str,
    detail: str = "",
    checks: dict[str, Check] | None = None,
    runtime_ms: float | None = None,
    t_min_ms: float | None = None,
    roofline_fraction: float | None = None,
    eager_ms: float | None = None,
    speedup_vs_eager: float | None = None,
    log_tail: str = "",
    max_chars: int = 2000,
) -> str:
    """One bounded feedback text (see the module docstring)."""
    parts = [f"Status: {status}. {_HEADLINES.get(status, '')}"]
    if detail:
        parts.append(detail.strip())
    failed = [f"- {name}: {c.why}" for name, c in (checks or {}).items() if not c.passed and c.why and c.why not in detail]
    if failed:
        parts.append("Failed checks:\n" + "\n".join(failed[:5]))
    if status == Status.OK.value:
        if runtime_ms is not None:
            timing = f"Runtime {runtime_ms:.3f} ms; roofline floor {t_min_ms:.3f} ms"
            if roofline_fraction is not None:
                timing += f" ({100 * roofline_fraction:.1f}% of the floor's speed)"
            if eager_ms is not None and speedup_vs_eager is not None:
                timing += f"; eager PyTorch {eager_ms:.3f} ms (speedup {speedup_vs_eager:.2f}x)"
            parts.append(timing + ".")
        else:
            parts.append("Not timed on this backend (Triton interpreter): correctness only.")
    if log_tail and status in (Status.CRASHED.value, Status.TIMEOUT.value):
        parts.append("Last output of the process:\n" + log_tail.strip()[-600:])
    text = "\n".join(parts)
    if len(text) > max_chars:
        text = text[: max_chars - 20].rstrip() + "\n[... truncated]"
    return text
