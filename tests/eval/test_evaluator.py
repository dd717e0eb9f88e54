"""The evaluator end to end on the CPU (Triton interpreter, small shapes): statuses, isolation, CLI.

The adversarial corpus (one file per hack or fault) is in test_adversarial.py; these tests cover the
evaluator's own contract: one well-formed verdict per submission, errors in the submission's own
line numbers, the worker's private directory and scrubbed environment, the bounded pool, and the
`kernelflow eval` exit codes.
"""

import json
import os
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from kernelflow.cli import main as cli_main
from kernelflow.eval import EvalConfig, Evaluator, Status, Verdict
from tests.helpers.solutions import solution_source

# The verdict cache is off: these tests must see every submission really judged (recovery after a
# fault, no leftover processes); tests/eval/test_cache.py covers the cache.
CONFIG = EvalConfig(backend="interpret", shape="small", seeds=2, timed_runs=2, timeout_s=120, max_workers=2,
                    verdict_cache_size=0)
RELU = solution_source("19_ReLU")


@pytest.fixture(scope="module")
def evaluator():
    return Evaluator(CONFIG)


def test_honest_control_is_correct_with_a_complete_verdict(evaluator):
    v = evaluator.evaluate("19_ReLU", f"Here you go:\n```python\n{RELU}```\n")
    assert v.status == Status.OK and v.correct and v.compiled
    assert v.reward == pytest.approx(0.3)  # interpreter: correctness bonus only
    assert v.timed is False and v.runtime_ms is None
    assert v.backend == "interpret" and v.shape == "small" and v.seeds == [0, 1]
    assert v.checks["values"].passed and v.checks["triton_kernel_launched"].passed
    assert v.wall_time.total_s > 0 and v.wall_time.worker_start_s > 0
    again = Verdict.from_dict(json.loads(v.to_json()))
    assert again == v


def test_answer_without_code_is_no_code(evaluator):
    v = evaluator.evaluate("19_ReLU", "I would use a Triton kernel with a mask.")
    assert v.status == Status.NO_CODE and v.reward == 0 and not v.compiled
    assert "```python" in v.feedback


def test_syntax_error_reports_the_submission_line(evaluator):
    v = evaluator.evaluate("19_ReLU", "```python\nimport torch\n\nclass ModelNew(:\n    pass\n```")
    assert v.status == Status.COMPILE_ERROR
    assert "line 3" in v.feedback


def test_unfenced_syntax_error_is_a_compile_error_like_the_fenced_one(evaluator):
    """Raw code that does not parse is told its syntax error, not to change its answer's format."""
    broken = "import torch\n\nclass ModelNew(:\n    pass\n"
    raw, fenced = evaluator.evaluate("19_ReLU", broken), evaluator.evaluate("19_ReLU", f"```python\n{broken}```")
    assert raw.status == fenced.status == Status.COMPILE_ERROR, raw.feedback
    assert "line 3, column" in raw.feedback and "SyntaxError" in raw.feedback and "```python block" not in raw.feedback
    assert raw.checks["parses"] == fenced.checks["parses"] and raw.code_sha256 == fenced.code_sha256


def test_triton_compile_error_is_a_compile_error_with_its_line(evaluator):
    bad = RELU.replace("tl.arange(0, BLOCK_SIZE)", "tl.arange(0, 1000)")
    assert bad != RELU
    v = evaluator.evaluate("19_ReLU", bad)
    assert v.status == Status.COMPILE_ERROR, v.feedback
    assert "power of 2" in v.feedback or "arange" in v.feedback


def test_seed_and_shape_reach_the_verdict(evaluator):
    v = evaluator.evaluate("19_ReLU", RELU, seed=40)
    assert v.seeds == [40, 41] and v.status == Status.OK


def test_wrong_kernel_gets_a_mismatch_summary(evaluator):
    wrong = RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "tl.minimum(x.to(tl.float32), 0.0)")
    assert wrong != RELU
    v = evaluator.evaluate("19_ReLU", wrong)
    assert v.status == Status.INCORRECT and v.reward == 0
    assert "max abs error" in v.feedback and "expected" in v.feedback
    assert v.max_abs_err > 1


def test_worker_runs_in_a_private_deleted_directory_with_a_scrubbed_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KF_TEST_SECRET", "do-not-leak")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    probe = RELU.replace(
        "import torch\n",
        "import os\nimport torch\n"
        "assert 'KF_TEST_SECRET' not in os.environ, 'secret leaked'\n"
        "assert os.path.basename(os.getcwd()).startswith('kf-worker-'), os.getcwd()\n"
        "open('scratch.txt', 'w').write('x')\n",
        1,
    )
    # The static checks forbid os and open(); switch them off to look behind them.
    v = Evaluator(replace(CONFIG, static_checks=False)).evaluate("19_ReLU", probe)
    assert v.status == Status.OK, v.feedback
    assert not list(Path(tmp_path).glob("kf-worker-*")), "the worker directory must be deleted"


def test_concurrent_submissions_each_get_exactly_one_verdict(evaluator):
    answers = {"ok": RELU, "no_code": "no code here", "incorrect": RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "x")}
    results: dict[str, list] = {k: [] for k in answers}

    def judge(kind):
        results[kind].append(evaluator.evaluate("19_ReLU", answers[kind]))

    threads = [threading.Thread(target=judge, args=(k,)) for k in answers for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for kind, verdicts in results.items():
        assert [v.status for v in verdicts] == [kind, kind]


def test_cli_eval_json_prints_one_verdict_and_exits_zero_for_incorrect(tmp_path, capsys):
    path = tmp_path / "wrong.py"
    path.write_text(RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "x"))
    code = cli_main(["eval", "19_ReLU", str(path), "--json", "--backend", "interpret", "--seeds", "1"])
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1
    assert json.loads(lines[0])["status"] == "incorrect"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "99_Nope", "x.py"], "unknown task '99_Nope'"),
        (["eval", "19_ReLU", "/nonexistent/kernel.py"], "cannot read submission file"),
        (["eval", "19_ReLU", "__FILE__", "--seeds", "0"], "seeds=0"),
    ],
)
def test_cli_eval_usage_errors_exit_2_with_a_message(argv, message, tmp_path, capsys):
    f = tmp_path / "k.py"
    f.write_text(RELU)
    argv = [str(f) if a == "__FILE__" else a for a in argv]
    assert cli_main(argv) == 2
    assert message in capsys.readouterr().err


def test_cuda_backend_without_a_gpu_is_a_clear_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        Evaluator(EvalConfig(backend="cuda"))


def test_hang_times_out_and_the_evaluator_recovers(evaluator):
    hang = RELU.replace("        return out", "        while True:\n            pass\n        return out")
    # static checks off: the submission language refuses a host `while`; this tests the judge's own time limit
    v = Evaluator(replace(CONFIG, timeout_s=8, static_checks=False)).evaluate("19_ReLU", hang)
    assert v.status == Status.TIMEOUT and v.reward == 0
    assert evaluator.evaluate("19_ReLU", RELU).status == Status.OK


def test_no_worker_processes_are_left_behind(evaluator):
    import psutil

    before = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    evaluator.evaluate("19_ReLU", RELU)
    after = {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    assert after <= before


def test_waiting_for_the_gpu_lock_is_reported_and_not_charged_to_the_submission(monkeypatch):
    """Another verdict's GPU phase holding the per-GPU lock: the wait shows in the wall split and does
    not count against the submission's timeout (here the wait is longer than the whole limit)."""
    import contextlib
    import time

    ev = Evaluator(replace(CONFIG, timeout_s=10, verdict_cache_size=0))

    @contextlib.contextmanager
    def busy_gpu(shared=False):
        time.sleep(11)  # as if other verdicts held the GPU for longer than this submission's limit
        yield

    monkeypatch.setattr(ev, "_gpu_lock", busy_gpu)
    v = ev.evaluate("19_ReLU", RELU)
    assert v.status == Status.OK, v.feedback
    assert v.wall_time.gpu_wait_s >= 11
    assert v.wall_time.total_s >= v.wall_time.gpu_wait_s
    assert v.wall_time.baselines_s is None  # nothing is timed under the interpreter


class RecordingLock:
    """Stands in for the evaluator's GPU lock: records each hold taken and released, and the one active now."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.current: str | None = None  # the hold active now

    def __call__(self, shared=False):
        import contextlib

        mode = "shared" if shared else "exclusive"

        @contextlib.contextmanager
        def hold():
            self.events.append(("enter", mode))
            self.current = mode
            try:
                yield
            finally:
                self.current = None
                self.events.append(("exit", mode))

        return hold()


@pytest.mark.parametrize("mode, expected", [
    ("exclusive", ["exclusive"]),  # one hold from the first call to the last
    # the correctness calls beside others, the timed calls alone
    ("shared_checks", ["shared", "exclusive"]),
])
def test_a_verdict_holds_the_gpu_lock_as_its_mode_says(monkeypatch, mode, expected):
    from kernelflow.eval.session import WorkerLink

    ev = Evaluator(replace(CONFIG, gpu_lock=mode))
    lock = RecordingLock()
    monkeypatch.setattr(ev, "_gpu_lock", lock)
    sent = []
    real_send = WorkerLink.send

    def recording_send(self, msg):  # which hold each message to the worker was sent under
        sent.append((msg.get("op"), lock.current))
        return real_send(self, msg)

    monkeypatch.setattr(WorkerLink, "send", recording_send)
    v = ev.evaluate("19_ReLU", RELU)
    assert v.status == Status.OK, v.feedback
    entered = [m for kind, m in lock.events if kind == "enter"]
    assert entered == expected
    assert len(lock.events) == 2 * len(expected)  # every hold released
    assert [kind for kind, _ in lock.events] == ["enter", "exit"] * len(expected)  # never two at once
    calls = [held for op, held in sent if op == "call"]
    assert calls and None not in calls  # no call without a hold
    if mode == "shared_checks":
        # the last two calls are the timed ones (the interpreter makes two): alone on the GPU
        assert calls[-2:] == ["exclusive", "exclusive"] and set(calls[:-2]) == {"shared"}


def test_a_failing_submission_releases_its_shared_hold(monkeypatch):
    ev = Evaluator(replace(CONFIG, gpu_lock="shared_checks"))
    lock = RecordingLock()
    monkeypatch.setattr(ev, "_gpu_lock", lock)
    wrong = RELU.replace("tl.maximum(x.to(tl.float32), 0.0)", "tl.minimum(x.to(tl.float32), 0.0)")
    v = ev.evaluate("19_ReLU", wrong)
    assert v.status == Status.INCORRECT
    assert lock.events == [("enter", "shared"), ("exit", "shared")]  # never held alone: no timed call ran


def test_an_unknown_gpu_lock_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match=r"gpu_lock='shared'.*exclusive.*shared_checks"):
        EvalConfig(gpu_lock="shared")
