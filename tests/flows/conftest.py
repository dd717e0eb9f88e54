"""Fixtures for the flow tests: Hydra composition against conf/, and an isolated Prefect server.

`compose_config(*overrides)` composes `conf/config.yaml` exactly as `python -m flows.experiment` does
(the schema registered, version_base 1.3). `prefect_api` starts one `prefect server start` on
127.0.0.1 at a free port with its own PREFECT_HOME under tmp, for the whole session, so the
end-to-end runs share one server (about 6 s to start) instead of each starting an ephemeral one
(about 15 s with a fresh database); it is stopped by its PID at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = ROOT / "conf"


def compose_config(*overrides: str):
    from hydra import compose, initialize_config_dir

    from flows.config import register

    register()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR), job_name="test"):
        return compose(config_name="config", overrides=list(overrides))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    """(api_url, env) of a private Prefect server; `env` is what a client process needs to use it."""
    home = tmp_path_factory.mktemp("prefect-home")
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "false",  # no UI assets to serve in tests
    }
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + 90
    while not _healthy(api):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"prefect server did not start: {(home / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield api, {**env, "PREFECT_API_URL": api}
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    log.close()
