"""The worker's in-process runtime controls, unit by unit (the red team's F2-F5 runtime holes).

End-to-end behaviour is in the adversarial corpus (`rt_coding_cookie`, `rt_allowlist_rebind`,
`rt_profile_hook`, `rt_python_scalars`); these check the pieces directly and quickly, under the
Triton interpreter (tests/conftest.py sets TRITON_INTERPRET).
"""

from __future__ import annotations

import inspect
import sys
import traceback

import pytest
import torch
import triton  # noqa: F401

from kernelflow.eval.worker import controls as rc
from kernelflow.eval.worker.main import Worker
from kernelflow.eval.worker.submission import load_submission

COOKIE_SUBMISSION = '''# coding: unicode_escape
import torch
import triton
import triton.language as tl

SEEN = "utf-8"  # note\\u000aSEEN = "cookie"


@triton.jit
def fill_kernel(o, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(o + offs, tl.full([BLOCK], 3.0, tl.float32))  # note\\u000a    tl.store(o + offs, tl.full([BLOCK], 7.0, tl.float32))


def fail():
    raise ValueError("from the submission")
'''


@pytest.fixture
def submission(tmp_path):
    path = tmp_path / "submission.py"
    path.write_text(COOKIE_SUBMISSION, encoding="utf-8", newline="")
    name = "kf_test_submission"
    yield name, str(path)
    sys.modules.pop(name, None)


def test_the_submission_runs_as_its_utf8_text_whatever_its_coding_cookie(submission):
    name, path = submission
    module = load_submission(name, path)
    assert module.SEEN == "utf-8"
    assert sys.modules[name] is module and module.__file__ == path and module.__name__ == name
    # Triton reads the kernel's source through inspect/linecache: the same text that was compiled.
    lines, _ = inspect.getsourcelines(module.fill_kernel.fn)
    assert len(lines) == 4 and "7.0" not in lines[-1].split("#")[0]
    out = torch.empty(8)
    module.fill_kernel[(1,)](out, BLOCK=8)
    assert torch.equal(out, torch.full((8,), 3.0))
    with pytest.raises(ValueError) as info:
        module.fail()
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.line) == (path, 'raise ValueError("from the submission")')


def test_the_submission_does_not_inherit_the_workers_future_flags(tmp_path):
    path = tmp_path / "submission.py"
    path.write_text("def f(a: undefined_name): pass\n", encoding="utf-8")
    with pytest.raises(NameError):  # evaluated eagerly: worker/submission.py's `from __future__ import annotations` stays there
        load_submission("kf_test_future", str(path))
    sys.modules.pop("kf_test_future", None)


def _run_guarded(fn):
    counter = rc.LaunchCounter("nobody")
    guard = rc.make_guard(counter, interpreter=True)()
    with torch.no_grad(), guard:
        fn()
    return guard.violations


def test_the_guard_keeps_the_allow_list_it_was_made_with(monkeypatch):
    counter = rc.LaunchCounter("nobody")
    guard_cls = rc.make_guard(counter, interpreter=True)
    before = rc.identity_snapshot(guard_cls)
    monkeypatch.setattr(rc, "ALLOWED_ATEN", rc.ALLOWED_ATEN | {"mul", "gt"})
    x = torch.randn(8)
    guard = guard_cls()
    with torch.no_grad(), guard:
        (x > 0) * x
    assert {v.split(".")[0] for v in guard.violations} == {"gt", "mul"}
    after = rc.identity_snapshot(guard_cls)
    assert [k for k, v in after.items() if before[k] != v] == ["runtime_controls.ALLOWED_ATEN"]


def test_reading_values_into_python_is_a_violation_and_a_few_whole_fills_are_not():
    x = torch.randn(64)
    assert _run_guarded(lambda: float(x[3])) == ["_local_scalar_dense.default"]
    assert _run_guarded(lambda: (torch.zeros(64), torch.empty(8).fill_(1.0), torch.empty(4, 4)[1].zero_())) == []
    out = torch.empty(64)
    found = _run_guarded(lambda: [out[k].fill_(1.0) for k in range(64)])
    assert found and "element-wise writes" in found[0]
    assert len(found) == min(20, 64 - rc.MAX_VIEW_FILLS)


def test_a_profile_or_trace_hook_left_by_forward_is_removed_and_named():
    worker = Worker.__new__(Worker)
    from kernelflow.eval.worker.main import _hook_slots

    worker.hooks = [(label, get, put, get()) for label, get, put in _hook_slots()]
    assert worker._hooks_removed() == []
    seen = []
    sys.setprofile(lambda *a: seen.append(a))
    import threading

    threading.settrace(lambda *a: None)
    try:
        assert worker._hooks_removed() == ["sys.setprofile", "threading.settrace"]
    finally:
        sys.setprofile(worker.hooks[0][3])
        threading.settrace(worker.hooks[3][3])
    assert sys.getprofile() is worker.hooks[0][3] and threading.gettrace() is worker.hooks[3][3]


def test_a_launch_takes_only_what_a_kernel_takes():
    """worker/launch_args.py: a constexpr gets numbers, bools, strings, None or Triton dtypes; a pointer a tensor
    (red team round 2a: a tensor or a host lambda passed as a constexpr did the work inside the launch)."""
    import triton.language as tl

    from kernelflow.eval.worker.launch_args import launch_argument_problem

    @triton.jit
    def k(x_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
        pass

    x = torch.ones(4)
    cache: dict = {}
    assert launch_argument_problem(k, (x, 4), {"SCALE": 2.0, "BLOCK": 128, "num_warps": 4}, cache) is None
    assert launch_argument_problem(k, (torch.nn.Parameter(x), 4, tl.float32, True), {}, cache) is None
    assert "constexpr argument 'SCALE' got a Tensor" in launch_argument_problem(k, (x, 4), {"SCALE": x, "BLOCK": 8}, cache)
    assert "got a function" in launch_argument_problem(k, (x, 4), {"SCALE": lambda v: v, "BLOCK": 8}, cache)
    assert "argument 'x_ptr' got a list" in launch_argument_problem(k, ([1.0], 4), {"SCALE": 1, "BLOCK": 8}, cache)
    import numpy as np

    assert "got a ndarray" in launch_argument_problem(k, (x, 4), {"SCALE": np.ones(2), "BLOCK": 8}, cache)
