"""Worker-derived text on its way into a verdict (feedback.worker_text) and a worker's death (link.py).

Issue #32 item 4: whatever the worker prints, raises or dies from becomes a submission outcome with a
text that is valid UTF-8, bounded, free of control characters and of the judge's own paths.
"""

import signal
import sys
from pathlib import Path

import kernelflow
from kernelflow.eval.feedback import build_feedback, worker_text
from kernelflow.eval.session.judge import clean_outcome
from kernelflow.eval.session.link import SessionOutcome, signal_name
from kernelflow.eval.verdict import Check

PACKAGE = str(Path(kernelflow.__file__).resolve().parent)


def test_hostile_text_becomes_valid_bounded_utf8_without_controls():
    text = worker_text("x" * 100_000 + "bad \udcff\ud800 \x1b[31mred\x1b[0m \x1b]0;title\x07 nul\x00 cr\r\n\u202eevil\ttab",
                       limit=2000)
    text.encode("utf-8")
    assert len(text) <= 2000 and "[... truncated]" in text
    assert "\ufffd\ufffd" in text and "red" in text and "\ttab" in text
    assert not any(c in text for c in "\x1b\x00\x07\r\u202e")


def test_judge_paths_and_frames_are_replaced():
    trace = (f'Traceback (most recent call last):\n  File "{PACKAGE}/eval/worker/main.py", line 9, in call\n'
             f'    out = self.model(*inputs)\n  File "/tmp/kf-worker-ab12_x/submission.py", line 3, in forward\n'
             f'    raise ValueError(x)\nValueError: {sys.prefix}/lib/python3/site-packages/torch/x.py')
    text = worker_text(trace, extra_paths=("/srv/judge-cache",)) + worker_text("/srv/judge-cache/lock",
                                                                                 extra_paths=("/srv/judge-cache",))
    assert PACKAGE not in text and sys.prefix not in text and "kf-worker-" not in text
    assert "self.model" not in text  # the judge's source line went with its frame
    assert '"<workdir>/submission.py", line 3' in text and "<python>/lib" in text and "<cache>/lock" in text


def test_a_judge_source_line_whose_frame_header_was_cut_off_is_dropped():
    # red team round 2a, b10: the output tail began just after a judge frame's `File "..."` line, so its source
    # line (the judge's own code) stood alone at the top and was quoted in the feedback
    cut = ("        view = view[self._write(self._fd, view):]\n"
           '  File "/tmp/kf-worker-ab12_x/submission.py", line 3, in forward\n    raise ValueError(x)\nValueError: 1')
    text = worker_text(cut)
    assert "self._write" not in text
    assert text.startswith('  File "<workdir>/submission.py", line 3') and text.endswith("ValueError: 1")


def test_every_signal_number_has_a_name():
    assert signal_name(signal.SIGSYS) == "SIGSYS" and signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(40) == f"SIGRTMIN+{40 - signal.SIGRTMIN}"  # signal.Signals(40) raises ValueError
    assert signal_name(200) == "signal 200"


def test_session_outcomes_and_feedback_are_cleaned_on_the_way_out():
    outcome = clean_outcome(SessionOutcome("crashed", {"worker_alive": Check(False, f"at {PACKAGE}/x.py \udcff")},
                                           "died \x1b[2J", log_tail=f"{PACKAGE}/eval/worker/main.py\x00"))
    assert outcome.detail == "died " and outcome.log_tail == "<judge>/eval/worker/main.py"
    assert outcome.checks["worker_alive"].why == "at <judge>/x.py \ufffd"
    feedback = build_feedback("runtime_error", "msg \ud800\x1b[31m" + "y" * 10_000, max_chars=500)
    feedback.encode("utf-8")
    assert len(feedback) <= 500 and "\x1b" not in feedback
