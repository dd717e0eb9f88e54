"""Pre-warmed fresh workers (kernelflow/eval/session/prewarm.py, spawned by session/worker_handle.py): faster start, same
isolation, never reused.

With `prewarm_workers` on, the adversarial behaviour must not change (hang -> timeout, crash ->
crashed, honest -> ok), every submission gets its own process (a pre-warmed worker judges one
submission and dies), the pool's workers get the same private directory and scrubbed environment as
fresh ones, and a pooled worker that died while idle costs the submission nothing. Interpreter
backend, small shapes; the verdict cache is off so every evaluation really runs.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kernelflow.eval import EvalConfig, Evaluator, Status, protocol
from kernelflow.eval.session.prewarm import WarmPool
from kernelflow.eval.session.worker_handle import SpawnSpec, WorkerHandle
from tests.env.procs import descendants
from tests.eval.test_adversarial import load_fixture
from tests.helpers.solutions import solution_source

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = EvalConfig(backend="interpret", shape="small", seeds=1, timed_runs=1, timeout_s=120, max_workers=2,
                    verdict_cache_size=0, prewarm_workers=1)
RELU = solution_source("19_ReLU")
ADVERSARIAL = Path(__file__).resolve().parents[1] / "fixtures" / "adversarial"
# A probe whose forward raises with the worker's pid, so the verdict's feedback names the process.
PID_PROBE = RELU.replace("import torch\n", "import os\nimport torch\n", 1).replace(
    "        return out", "        raise RuntimeError(f'worker dir {os.getcwd().encode().hex()} tag {TAG}')\n        return out")
# (hex: the judge replaces its workers' paths in feedback with <workdir>, feedback.worker_text)


def _any_process_in(directory: str) -> bool:
    """Whether a process on this host runs in `directory` (a worker's own; its PID is not ours to see:
    under the interpreter each worker has its own PID namespace, where it is always PID 2)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/cwd") == directory:
                    return True
            except OSError:
                continue
    return False


@pytest.fixture(scope="module")
def warm():
    ev = Evaluator(CONFIG)
    assert ev._pool is not None and ev._pool.wait_warm(120), "the pool never warmed up"
    yield ev
    ev.close()
    assert descendants(os.getpid()) == [], "closing the evaluator must kill its idle workers"


# kernel_never_launched: the worker's own warm-up launch (worker/warm_kernel.py) must not count as the submission's.
@pytest.mark.parametrize("name", ["hang_forever", "segfault_ctypes", "os_exit_import", "output_flood",
                                  "system_exit_forward", "kernel_never_launched"])
def test_adversarial_behaviour_is_unchanged_with_prewarm(warm, name):
    fixture = load_fixture(ADVERSARIAL / f"{name}.py")
    config = replace(CONFIG, static_checks=fixture.static_checks, timeout_s=8 if name == "hang_forever" else 120)
    ev = Evaluator(config)
    try:
        assert ev._pool.wait_warm(120)
        v = ev.evaluate(fixture.task_id, fixture.source)
        assert v.status == fixture.expect["interpret"], v.feedback
        assert v.reward == 0
        control = ev.evaluate("19_ReLU", RELU)
        assert control.status == Status.OK, control.feedback
        assert ev.stats()["prewarmed_sessions"] >= 1
    finally:
        ev.close()


def test_honest_control_takes_a_warm_worker(warm):
    assert warm._pool.wait_warm(120)
    before = warm.stats()
    v = warm.evaluate("19_ReLU", RELU)
    assert v.status == Status.OK and v.reward == pytest.approx(0.3) and v.cached is False
    after = warm.stats()
    assert after["prewarmed_sessions"] == before["prewarmed_sessions"] + 1
    assert after["pool"]["handed_out"] == before["pool"]["handed_out"] + 1


def test_a_prewarmed_worker_is_never_reused():
    ev = Evaluator(replace(CONFIG, static_checks=False))  # the probe imports os
    dirs = []
    try:
        for i in range(3):
            assert ev._pool.wait_warm(120)
            v = ev.evaluate("19_ReLU", PID_PROBE.replace("{TAG}", str(i)), seed=i)
            assert v.status == Status.RUNTIME_ERROR, v.feedback
            hexed = re.search(r"worker dir ([0-9a-f]+) tag", v.feedback).group(1)  # not the quoted source line
            dirs.append(bytes.fromhex(hexed).decode())
        assert ev.stats()["prewarmed_sessions"] == 3
    finally:
        ev.close()
    assert len(set(dirs)) == 3, f"one process judged two submissions: {dirs}"
    assert not any(_any_process_in(d) for d in dirs), "a worker outlived its verdict"


def test_a_handle_is_handed_out_at_most_once():
    handle = WorkerHandle(SpawnSpec.of(CONFIG, "interpret", "cpu"))
    try:
        handle.claim()
        with pytest.raises(RuntimeError, match="at most once"):
            handle.claim()
    finally:
        handle.close()
    assert not handle.workdir.exists() and not handle.sockdir.exists()


def test_a_worker_launches_its_own_triton_kernel_while_warming():
    """worker/warm_kernel.py: the first-launch costs are paid before a submission exists, and not counted."""
    handle = WorkerHandle(SpawnSpec.of(CONFIG, "interpret", "cpu"))
    try:
        handle.ensure_warm(time.monotonic() + 120)
        assert isinstance(handle.warm_info, protocol.Warm)
        assert 0 < handle.warm_info.warm_kernel_s < handle.warm_info.warmup_s
    finally:
        handle.close()


def test_pool_workers_are_isolated_like_fresh_ones(monkeypatch, tmp_path):
    import tempfile

    monkeypatch.setenv("KF_TEST_SECRET", "do-not-leak")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    probe = RELU.replace(
        "import torch\n",
        "import os\nimport torch\n"
        "assert 'KF_TEST_SECRET' not in os.environ, 'secret leaked'\n"
        "assert os.path.basename(os.getcwd()).startswith('kf-worker-'), os.getcwd()\n"
        "assert os.environ['TRITON_CACHE_DIR'].startswith(os.getcwd()), 'shared triton cache'\n"
        "assert os.environ['TRITON_INTERPRET'] == '1'\n"
        "open('scratch.txt', 'w').write('x')\n",
        1,
    )
    ev = Evaluator(replace(CONFIG, static_checks=False))  # the static checks forbid os and open()
    try:
        assert ev._pool.wait_warm(120)
        v = ev.evaluate("19_ReLU", probe)
        assert v.status == Status.OK, v.feedback
        assert ev.stats()["prewarmed_sessions"] == 1
    finally:
        ev.close()
    assert not list(Path(tmp_path).glob("kf-worker-*")), "worker directories must be deleted"
    assert not list(Path(tmp_path).glob("kf-judge-*")), "socket directories must be deleted"


def test_a_pool_worker_that_died_while_idle_is_replaced_without_blaming_the_submission():
    ev = Evaluator(CONFIG)
    try:
        assert ev._pool.wait_warm(120)
        idle = ev._pool._idle[0]
        os.killpg(idle.proc.pid, signal.SIGKILL)
        idle.proc.wait(10)
        v = ev.evaluate("19_ReLU", RELU)
        assert v.status == Status.OK, v.feedback
    finally:
        ev.close()


def test_closing_the_pool_kills_idle_and_warming_workers():
    pool = WarmPool(SpawnSpec.of(CONFIG, "interpret", "cpu"), size=2)
    deadline = time.monotonic() + 30
    while pool.stats().idle < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    handles = list(pool._idle)
    pool.close()
    assert handles and all(h.proc.poll() is not None for h in handles)
    assert all(not h.workdir.exists() for h in handles)
    time.sleep(0.5)  # the keeper thread must not spawn after close
    assert pool.stats().idle == 0


def test_the_warm_up_pays_the_first_dispatch_mode_import():
    """The import a dispatch mode's first aten op triggers (worker/warm_kernel.py) happens in the warm-up.

    On CUDA a compiled launch dispatches no aten op, so only the allocation under the guard triggers
    it; the H200 profile showed a warm-up without it left ~4 s on every submission's first call.
    """
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from kernelflow.eval.worker.controls import LaunchCounter, make_guard\n"
        "from kernelflow.eval.worker.warm_kernel import launch_under\n"
        "wrap = 'torch._higher_order_ops.triton_kernel_wrap'\n"
        "assert wrap not in sys.modules\n"
        "counter = LaunchCounter('submission'); counter.install(cuda=False)\n"
        "assert launch_under(make_guard(counter, interpreter=True)(), torch.device('cpu'))\n"
        "print(wrap in sys.modules, counter.own, counter.other)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "0", "1"]  # imported; the launch is nobody's submission
