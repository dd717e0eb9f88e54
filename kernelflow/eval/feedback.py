"""The text a model reads about its submission: what failed and why, or how fast it ran.

Feedback is built from the verdict's facts only (status, failed check, mismatch summary, timing),
trimmed to a bounded length, with compile errors quoting the submission's own line numbers. It is
part of the verdict, so the environment and the trainer show exactly what the evaluator decided.

`worker_text` is the one function every worker-derived text passes through before it reaches a
verdict (session/judge.py applies it to a session's detail, checks and output tail; `build_feedback`
to the whole feedback): valid UTF-8, bounded, no control characters, no judge paths or frames.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

from kernelflow.eval.verdict import Check, Status

# Worker-derived text (issue #32 item 4): escape sequences first (CSI, OSC, two-byte), then every control
# character but newline and tab (C0, DEL, C1) and the bidirectional overrides that reorder what a reader sees.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_SURROGATES = re.compile(r"[\ud800-\udfff]")
# The worker's and judge's temporary directories (session/worker_handle.py), wherever the temp root is.
_WORKDIRS = re.compile(r"(?:/[^\s\"':]*)?/kf-(?:worker|judge)-[A-Za-z0-9_]+")
_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../kernelflow
_SOURCE_ROOT = str(Path(_PACKAGE).parent)  # the checkout or site-packages holding it


def _judge_paths() -> list[tuple[str, str]]:
    """(path, placeholder), longest first: the judge's code, its Python, its cache."""
    pairs = [(_PACKAGE, "<judge>"), (_SOURCE_ROOT, "<judge>"), (os.path.expanduser("~/.cache/kernelflow"), "<cache>")]
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}:
        pairs.append((prefix, "<python>"))
        pairs.append((os.path.realpath(prefix), "<python>"))
    pairs.append((tempfile.gettempdir(), "<tmp>"))
    return sorted({(p, r) for p, r in pairs if p and p != "/"}, key=lambda pr: -len(pr[0]))


_JUDGE_PATHS = _judge_paths()


def _drop_judge_frames(text: str) -> str:
    """Traceback frames in the judge's own code go, with their source lines (they quote the judge). Indented
    lines before the first frame header or other unindented line go too: in a text cut at its start they
    may be the source lines of a judge frame whose header was cut off (red team round 2a, b10)."""
    out, skip, started = [], False, False
    for line in text.split("\n"):
        if not started and line.startswith("    "):
            continue
        started = started or bool(line.strip())
        if skip and line.startswith("    "):
            continue
        skip = line.lstrip().startswith('File "<judge>')
        if not skip:
            out.append(line)
    return "\n".join(out)


def worker_text(text: object, limit: int = 4000, extra_paths: tuple[str, ...] = ()) -> str:
    """Any text that came from the worker, made fit for a verdict and the model's feedback.

    Valid UTF-8 (lone surrogates become U+FFFD), no escape sequences or control characters but
    newline and tab (carriage returns become newlines), no path of the judge's code, its Python, its
    cache or a worker's directory (placeholders `<judge>`, `<python>`, `<cache>`, `<workdir>`, `<tmp>`;
    `extra_paths`, e.g. a cache_dir, become `<cache>`), no frames of the judge's code, at most `limit`
    characters (the head and the tail kept). Not covered: a path the submission spells some other way.
    """
    text = text if isinstance(text, str) else str(text)
    text = _SURROGATES.sub("\ufffd", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROLS.sub("", _ESCAPES.sub("", text))
    text = _WORKDIRS.sub("<workdir>", text)
    for path in sorted((p for p in extra_paths if p and p != "/"), key=len, reverse=True):
        text = text.replace(path, "<cache>")
    for path, placeholder in _JUDGE_PATHS:
        text = text.replace(path, placeholder)
    text = _drop_judge_frames(text)
    if len(text) > limit:
        keep = max(0, limit - 20)
        text = text[: keep // 2] + "\n[... truncated]\n" + text[len(text) - keep // 2:]
    return text

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
    text = worker_text("\n".join(parts), limit=1 << 20)  # every path into the feedback: one cleaning
    if len(text) > max_chars:
        text = text[: max_chars - 20].rstrip() + "\n[... truncated]"
    return text
