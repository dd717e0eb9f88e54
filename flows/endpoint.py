"""The flow's way to the evaluator: an embedded environment server, or a checked remote one.

`open_endpoint(env, log_path)` is a context manager giving an `Endpoint` (url, token, the server's
info). With `env.url` unset it starts `python -m kernelflow.env.server` on 127.0.0.1 at a free port
with the experiment's `EnvServerConfig` and stops it, by its PID, on exit. With `env.url` it fetches
the server's info and refuses to run unless the server judges exactly as this experiment would: the
evaluator configuration hash (eval settings, reward constants, evaluator version) and the episode
settings (max_turns, gamma, stop_on_correct) must match. Every stage reaches the evaluator through
this endpoint, so training, both evaluations, validation and rejudging share one judging path.

This module starts and checks servers; it does not create sessions (the trainer and `stages.py` do).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flows.config import EnvAccess
from kernelflow.env.client import fetch_server_info
from kernelflow.eval import EVALUATOR_VERSION, config_hash

log = logging.getLogger("kernelflow.flows")

EPISODE_KEYS = ("max_turns", "gamma", "stop_on_correct")


class EnvMismatchError(RuntimeError):
    """A remote environment server judges differently from this experiment's configuration."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    token: str | None
    info: dict[str, Any]
    embedded: bool

    def session_kwargs(self) -> dict[str, Any]:
        return {"base_url": self.url, "token": self.token}


def expected_info(env: EnvAccess) -> dict[str, Any]:
    """What a server with this experiment's settings reports in its info (the keys that are compared)."""
    server = env.server
    return {
        "config_hash": config_hash(server.eval, EVALUATOR_VERSION),
        "evaluator_version": EVALUATOR_VERSION,
        **{k: getattr(server, k) for k in EPISODE_KEYS},
    }


def check_server(info: dict[str, Any], env: EnvAccess, url: str) -> None:
    """Raise EnvMismatchError naming every difference between the server and this experiment."""
    expected = expected_info(env)
    diffs = [f"{k}: server {info.get(k)!r}, experiment {v!r}" for k, v in expected.items() if info.get(k) != v]
    if diffs:
        raise EnvMismatchError(
            f"the environment server at {url} does not judge as this experiment would ({'; '.join(diffs)}). "
            f"Its backend is {info.get('backend')!r} on {info.get('device')!r}, shape {info.get('shape')!r}. "
            "Start the server with this experiment's settings (`kernelflow serve --config <run>/env_server.json`), "
            "or set this experiment's eval.* and env.* to the server's; results judged differently are not comparable."
        )


def server_config_json(env: EnvAccess) -> str:
    """The server settings as `kernelflow serve --config` reads them (no token)."""
    return json.dumps(env.server.to_dict(include_token=False), indent=2, sort_keys=True)


@contextmanager
def open_endpoint(env: EnvAccess, log_path: str | Path | None = None,
                  pid_file: str | Path | None = None) -> Iterator[Endpoint]:
    """The environment for one flow: embedded (started, then stopped) or remote (checked).

    `pid_file` records the embedded server's PID while it runs, so the next attempt of a run whose
    process was killed can stop the server it left behind.
    """
    if env.url:
        info = fetch_server_info(env.url, token=env.token)
        check_server(info, env, env.url)
        log.info("using the environment server at %s (%s on %s, config %s)", env.url, info.get("backend"),
                 info.get("device"), str(info.get("config_hash"))[:12])
        yield Endpoint(url=env.url, token=env.token, info=info, embedded=False)
        return

    from kernelflow.env.server.launch import start_local_server

    pid_file = Path(pid_file) if pid_file else None
    if pid_file is not None:
        reap_stale_server(pid_file)
    log.info("starting an embedded environment server (log: %s)", log_path or "temporary")
    server = start_local_server(env.server, log_path=log_path, startup_timeout_s=env.startup_timeout_s)
    if pid_file is not None:
        pid_file.write_text(f"{server.pid}\n")
    try:
        info = server.info()
        check_server(info, env, server.url)  # the embedded one must agree too: a cheap guard against drift
        log.info("embedded environment server pid %d at %s (%s on %s)", server.pid, server.url,
                 info.get("backend"), info.get("device"))
        yield Endpoint(url=server.url, token=server.token, info=info, embedded=True)
    finally:
        server.stop()
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
        log.info("embedded environment server pid %d stopped", server.pid)


def reap_stale_server(pid_file: Path) -> None:
    """Stop the embedded server a killed earlier attempt left running (it runs in its own session).

    Only a live process whose command line is `... -m kernelflow.env.server ...` is stopped, so a PID
    reused by an unrelated process is left alone.
    """
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        pid_file.unlink(missing_ok=True)
        return
    if b"kernelflow.env.server" not in cmdline:
        pid_file.unlink(missing_ok=True)
        return
    log.warning("stopping the environment server pid %d left by an earlier, killed attempt", pid)
    try:
        os.killpg(pid, signal.SIGTERM)  # its own process group: the server and its evaluator workers
        for _ in range(100):
            time.sleep(0.1)
            if not Path(f"/proc/{pid}").exists():
                break
        else:
            os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    pid_file.unlink(missing_ok=True)
