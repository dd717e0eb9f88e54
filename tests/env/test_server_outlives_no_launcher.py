"""A launched environment server does not outlive its launcher (kernelflow/env/server/__main__.py).

The launcher is a real process that starts the server with `start_local_server` and is then killed
with SIGKILL, so nothing of it runs `stop()`: the server and its evaluator's workers must go anyway.
Before `--exit-with-parent` they stayed (found when an experiment process was killed, session 10).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelflow.env.server.__main__ import main
from tests.env.procs import alive, descendants

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = """
import sys, time
from kernelflow.env.config import EnvServerConfig
from kernelflow.env.server.launch import start_local_server
from kernelflow.eval import EvalConfig

config = EnvServerConfig(eval=EvalConfig.served(backend="interpret", shape="small", seeds=1, timed_runs=1,
                                                max_workers=1, prewarm_workers=1))
server = start_local_server(config, log_path=sys.argv[1], startup_timeout_s=120)
print(server.pid, flush=True)
time.sleep(600)
"""



def test_a_killed_launcher_takes_the_server_and_its_workers_with_it(tmp_path):
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "server.log")], cwd=ROOT,
                                stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        server_pid = int(launcher.stdout.readline())
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:  # the pre-warmed worker
            workers = descendants(server_pid)
            time.sleep(0.2)
        assert workers, "the server started no worker to check"
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 90  # a poll, the graceful stop, at worst the hard stop (30 s)
        while time.monotonic() < deadline and any(alive(p) for p in [server_pid, *workers]):
            time.sleep(0.5)
        left = [p for p in [server_pid, *workers] if alive(p)]
        log = (tmp_path / "server.log").read_text()
        assert not left, f"still running after the launcher died: {left}\n{log[-2000:]}"
        assert "the launcher (pid" in log
    finally:
        launcher.kill()
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_exit_with_parent_names_a_wrong_pid(capsys):
    assert main(["--exit-with-parent", "1"]) == 2
    assert "is not this process's parent" in capsys.readouterr().err
