"""The environment server: an OpenEnv FastAPI app around one shared evaluator, and `kernelflow serve`.

`create_kernel_app(config)` builds the ASGI app: OpenEnv's WebSocket session protocol on `/ws` (one
`KernelEnvironment` per connection, at most `max_sessions` at once, idle ones closed after
`session_timeout_s`), `/health`, `/schema`, `/metadata`, and `/kernelflow/info` (evaluator version,
backend, device, the eval/reward configuration hash, the workers' OS isolation level and mechanisms,
the episode settings). It refuses to start when its workers' isolation is below `eval.min_isolation`
(default: the backend's ceiling, kernelflow/eval/sandbox/policy.py), naming what the host lacks. It runs
in OpenEnv's "production" mode, which drops the stateless HTTP `/reset` and `/step` routes: an
episode lives in one WebSocket session. One `Evaluator` serves every session (its bounded worker pool and per-GPU
timing lock are the server's), or with `eval_backend: "ray"` one `RayEvaluator` spreading the
evaluations over a Ray cluster's actors; it is closed when the app shuts down.

Access (see `auth.py`): without a token the app serves loopback clients only, and `serve()` refuses
to bind a non-loopback address; with a token (`"token"` in the `--config` JSON or
$KERNELFLOW_ENV_TOKEN) every request but `/health` must present it.

Settings come from a JSON file of `EnvServerConfig` fields (`--config`, else $KERNELFLOW_ENV_CONFIG,
else defaults) and the token from the file or $KERNELFLOW_ENV_TOKEN. The module-level `app` (for
`uvicorn kernelflow.env.server.app:app`) is built from the same variables on first access.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig

from kernelflow.env.config import EnvServerConfig
from kernelflow.env.models import INFO_PATH, TOKEN_ENV_VAR, KernelAction, KernelObservation, KernelState
from kernelflow.env.server.auth import AccessMiddleware, is_loopback
from kernelflow.env.server.environment import EvaluatorLike, KernelEnvironment, build_evaluator
from kernelflow.eval import IsolationError, check_minimum

log = logging.getLogger("kernelflow.env.server")

CONFIG_ENV_VAR = "KERNELFLOW_ENV_CONFIG"
# Frames carry at most max_code_chars of text (up to 4 bytes each in UTF-8) plus JSON overhead.
MIN_WS_MAX_SIZE = 16 * 1024 * 1024


def require_isolation(evaluator: EvaluatorLike) -> None:
    """Refuse to serve below `eval.min_isolation` (IsolationError names what is missing and what to do)."""
    info = evaluator.info()
    try:
        check_minimum(info.get("isolation", "none"), info.get("min_isolation"), info["backend"],
                      info.get("isolation_missing"))
    except IsolationError:
        evaluator.close()
        raise


def create_kernel_app(config: EnvServerConfig, evaluator: EvaluatorLike | None = None) -> FastAPI:
    """The server's ASGI app (see the module docstring). `evaluator`: inject one (tests); else built."""
    from kernelflow import __version__

    if evaluator is None:
        evaluator = build_evaluator(config)  # the local pool, or Ray actors when config.eval_backend is "ray"
        require_isolation(evaluator)
    elif "isolation" in evaluator.info():
        require_isolation(evaluator)

    app = FastAPI(
        title="kernelflow environment",
        version=__version__,
        description=(
            "OpenEnv environment for writing Triton kernels. Connect a WebSocket to /ws, send "
            '{"type": "reset", "data": {"task_id": ..., "seed": ..., "shape": ...}}, then '
            '{"type": "step", "data": {"code": ...}} once per turn.'
        ),
    )
    factory = functools.partial(KernelEnvironment, config=config, evaluator=evaluator)
    server = HTTPEnvServer(
        factory,
        KernelAction,
        KernelObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=config.max_sessions, session_timeout=config.session_timeout_s
        ),
        env_name="kernelflow",
        state_cls=KernelState,
    )
    server.register_routes(app, mode="production")

    eval_info = dict(evaluator.info())
    static_info = {
        **eval_info,
        "max_turns": config.max_turns,
        "gamma": config.gamma,
        "stop_on_correct": config.stop_on_correct,
        "max_sessions": config.max_sessions,
        "max_code_chars": config.max_code_chars,
        "session_timeout_s": config.session_timeout_s,
        "worst_case_step_s": config.worst_case_step_s(),
        "auth_required": config.token is not None,
        "kernelflow_version": __version__,
        "openenv_version": _openenv_version(),
        "env_config_hash": env_config_hash(config, eval_info.get("config_hash")),
    }

    @app.get(INFO_PATH, tags=["Environment Info"], summary="Evaluator and episode settings of this server")
    def kernelflow_info() -> dict[str, Any]:
        # Live counters beside the static settings: verdicts judged, how many through a pre-warmed worker,
        # the warm pool's state and the caches' (Evaluator.stats), so a client can wait for a warm pool.
        stats = getattr(evaluator, "stats", None)
        return {**static_info, "active_sessions": server.active_sessions,
                "evaluator_stats": stats() if callable(stats) else None}

    async def _close_evaluator() -> None:
        try:
            evaluator.close()
        except Exception:  # shutdown must go on; the error is logged
            log.exception("closing the evaluator failed")

    app.router.on_shutdown.append(_close_evaluator)
    app.add_middleware(WebSocketGuard)
    app.add_middleware(AccessMiddleware, token=config.token)  # added last: runs first
    app.state.kernelflow_server = server
    app.state.kernelflow_evaluator = evaluator
    app.state.kernelflow_config = config
    return app


class WebSocketGuard:
    """Two repairs around OpenEnv's WebSocket session loop, at the ASGI level.

    - A frame that is valid JSON but not an object (`[]`, `"reset"`), or a binary frame, crashes
      OpenEnv's loop and ends the session; here it gets an `INVALID_JSON` error frame instead and is
      not passed on, so the session stays usable.
    - An object without a `type` field gets "Unknown message type: " (an empty name) from OpenEnv;
      here it gets a `VALIDATION_ERROR` frame that names the missing field and the accepted types.
    - A client that left mid-evaluation is noticed only when its reply is sent; OpenEnv's error
      handling then fails twice more and the exception reaches uvicorn as three chained tracebacks.
      By then the evaluation has finished (its worker slot is back) and the session is closed, so
      this is logged as one line instead.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        gone = False

        async def guarded_send(message) -> None:
            nonlocal gone
            try:
                await send(message)
            except Exception:
                gone = True
                raise

        async def guarded_receive():
            while True:
                message = await receive()
                if message.get("type") != "websocket.receive":
                    return message
                problem = _frame_problem(message)
                if problem is None:
                    return message
                frame = {"type": "error", "data": {"message": problem[1], "code": problem[0]}}
                await guarded_send({"type": "websocket.send", "text": json.dumps(frame)})

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception as exc:
            if not gone:
                raise
            log.info("a client left before its reply could be sent (%s); its session is closed", type(exc).__name__)


MESSAGE_TYPES = ("reset", "step", "state", "close")  # what OpenEnv's loop dispatches on (and "mcp")


def _frame_problem(message: dict) -> tuple[str, str] | None:
    """(error code, why) when a received WebSocket frame cannot be a protocol message; None when it may be."""
    text = message.get("text")
    if text is None:
        return "INVALID_JSON", "binary frames are not accepted; send JSON text such as {\"type\": \"reset\", \"data\": {...}}"
    try:
        value = json.loads(text)
    except ValueError:
        return None  # OpenEnv answers invalid JSON itself, keeping the session
    if not isinstance(value, dict):
        return ("INVALID_JSON",
                f"a message must be a JSON object such as {{\"type\": \"step\", \"data\": {{...}}}}, not {type(value).__name__}")
    if "type" not in value:
        keys = [str(k)[:40] for k in sorted(value)[:10]]  # bounded: the frame is hostile input
        return ("VALIDATION_ERROR", f"the message has no 'type' field (keys: {keys}); give one of "
                f"{', '.join(MESSAGE_TYPES)}, e.g. {{\"type\": \"reset\", \"data\": {{\"task_id\": \"19_ReLU\"}}}}")
    return None


def env_config_hash(config: EnvServerConfig, eval_config_hash: str | None) -> str:
    """sha256 of the evaluator's configuration hash and the settings that shape returns."""
    payload = {
        "eval": eval_config_hash,
        "max_turns": config.max_turns,
        "gamma": config.gamma,
        "stop_on_correct": config.stop_on_correct,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _openenv_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openenv")
    except PackageNotFoundError:
        return "unknown"


def load_server_config(path: str | os.PathLike | None) -> EnvServerConfig:
    """The config from a JSON file (defaults without one), with the token from the env var as fallback."""
    config = EnvServerConfig() if path is None else EnvServerConfig.from_json_file(path)
    return config.with_env_token()


def check_bind(host: str, config: EnvServerConfig) -> None:
    """Refuse a non-loopback address without a token: the server runs submitted code."""
    if not is_loopback(host) and config.token is None:
        raise ValueError(
            f"refusing to listen on {host!r} without an access token: this server runs submitted code. "
            f"Set ${TOKEN_ENV_VAR} (or \"token\" in the --config JSON) and give clients the same token, "
            "or listen on 127.0.0.1"
        )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def serve(args: argparse.Namespace) -> int:
    """Run the server until interrupted (used by `kernelflow serve` and `python -m kernelflow.env.server`).

    `args`: host, port, config (a JSON file; None: $KERNELFLOW_ENV_CONFIG, else defaults); optionally
    port_file (the bound port is written there, so `--port 0` can pick a free one) and log_level.
    """
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_server_config(getattr(args, "config", None) or os.environ.get(CONFIG_ENV_VAR))
        check_bind(args.host, config)
        sock = _bind(args.host, args.port)
    except ValueError as exc:
        print(f"kernelflow serve: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    try:
        app = create_kernel_app(config)
    except IsolationError as exc:
        sock.close()
        print(f"kernelflow serve: {exc}", file=sys.stderr)
        return 2
    info = app.state.kernelflow_evaluator.info()
    host_for_url = f"[{args.host}]" if ":" in args.host else args.host
    log.info(
        "kernelflow environment on http://%s:%d (backend %s, device %s, max_sessions %d, token %s)",
        host_for_url, port, info.get("backend"), info.get("device"), config.max_sessions,
        "required" if config.token else "not set: loopback clients only",
    )
    port_file = getattr(args, "port_file", None)
    if port_file:
        tmp = Path(f"{port_file}.tmp")
        tmp.write_text(str(port))
        tmp.replace(port_file)
    uv_config = uvicorn.Config(
        app,
        log_level=getattr(args, "log_level", None) or "info",
        ws_max_size=max(MIN_WS_MAX_SIZE, 4 * config.max_code_chars + 65536),
        timeout_graceful_shutdown=10,
        lifespan="on",
    )
    uvicorn.Server(uv_config).run(sockets=[sock])
    return 0


def _app_from_env() -> FastAPI:
    return create_kernel_app(load_server_config(os.environ.get(CONFIG_ENV_VAR)))


@functools.cache
def _module_app() -> FastAPI:
    return _app_from_env()


def __getattr__(name: str) -> Any:
    # Built lazily: importing this module (the CLI does, for `serve`) must not start an evaluator.
    if name == "app":
        return _module_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
