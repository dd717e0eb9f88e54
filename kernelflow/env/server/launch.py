"""Start an environment server as a local subprocess (for the experiment flow and tests).

`start_local_server(config)` runs `python -m kernelflow.env.server` on a free port (the server binds
port 0 itself and writes the port it got to a file, so there is no race for the port), waits until
`/health` answers, and returns a `LocalServer` with `.url`, `.pid`, `.token`, `.info()` and `.stop()`;
it is also a context manager. The config travels as a temporary JSON file; the token, if any, only in
the child's environment. The child runs in its own process group, so `stop()` can also reap any
evaluator workers left behind if the server does not exit on SIGTERM, and it watches this process:
if the launcher dies without calling `stop()` (SIGKILL, a crash), the server stops itself and its
workers (`--exit-with-parent`, __main__.py).

This module does not pick settings (callers pass an `EnvServerConfig`) and starts no remote servers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.models import TOKEN_ENV_VAR


class LocalServerError(RuntimeError):
    """The server subprocess did not come up; the message holds the tail of its log."""


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class LocalServer:
    """A running server subprocess: `url`, `pid`, `token`, `log_path`; `stop()` ends it by its PID."""

    def __init__(self, process: subprocess.Popen, url: str, token: str | None, log_path: Path, tmpdir: Path):
        self.process = process
        self.url = url
        self.token = token
        self.log_path = log_path
        self._tmpdir = tmpdir

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def info(self, timeout_s: float = 10.0) -> dict[str, Any]:
        from kernelflow.env.client import fetch_server_info

        return fetch_server_info(self.url, token=self.token, timeout_s=timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM the server, wait up to `timeout_s`, then SIGKILL its process group. Returns the exit code."""
        if self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                pass
        # The group holds the server and its evaluator workers, all started by us.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.wait(timeout=10)
        for f in self._tmpdir.glob("*"):
            f.unlink(missing_ok=True)
        try:
            self._tmpdir.rmdir()
        except OSError:
            pass
        return self.process.returncode

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_local_server(
    config: EnvServerConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    log_path: str | os.PathLike | None = None,
    startup_timeout_s: float = 120.0,
    extra_env: dict[str, str] | None = None,
) -> LocalServer:
    """Start `python -m kernelflow.env.server` and wait for `/health` (see the module docstring)."""
    tmpdir = Path(tempfile.mkdtemp(prefix="kernelflow-env-"))
    config_path = tmpdir / "server_config.json"
    config_path.write_text(json.dumps(config.to_dict(include_token=False), indent=2))
    port_file = tmpdir / "port"
    log = Path(log_path) if log_path is not None else tmpdir / "server.log"
    log.parent.mkdir(parents=True, exist_ok=True)

    env = dict(os.environ)
    env.pop(TOKEN_ENV_VAR, None)
    if config.token:
        env[TOKEN_ENV_VAR] = config.token
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra_env or {})
    cmd = [
        sys.executable, "-m", "kernelflow.env.server",
        "--host", host, "--port", str(port), "--config", str(config_path), "--port-file", str(port_file),
        "--exit-with-parent", str(os.getpid()),  # a launcher killed outright takes the server with it (__main__.py)
    ]
    with open(log, "ab") as log_file:
        process = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )
    host_for_url = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        host_for_url = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    server = LocalServer(process, url="", token=config.token, log_path=log, tmpdir=tmpdir)

    deadline = time.monotonic() + startup_timeout_s
    try:
        while True:
            if process.poll() is not None:
                raise LocalServerError(
                    f"the environment server exited with code {process.returncode} during startup "
                    f"(command: {' '.join(cmd)}). Log tail ({log}):\n{_tail(log)}"
                )
            if not server.url and port_file.exists():
                server.url = f"http://{host_for_url}:{int(port_file.read_text())}"
            if server.url and _healthy(server.url):
                return server
            if time.monotonic() > deadline:
                raise LocalServerError(
                    f"the environment server did not answer /health within {startup_timeout_s:.0f} s "
                    f"(url {server.url or 'not bound yet'}). Log tail ({log}):\n{_tail(log)}"
                )
            time.sleep(0.2)
    except BaseException:
        server.stop(timeout_s=5)
        raise


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False
