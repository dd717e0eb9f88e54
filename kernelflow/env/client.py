"""Clients of the environment server: typed, synchronous or asyncio, with clear errors.

- `KernelEnvSession(base_url, token=None, ...)`: blocking `reset(task_id, seed, shape)`, `step(code)`,
  `state()`, `close()`, and a context manager (what the trainer uses). One session is one WebSocket,
  one server-side environment, one episode at a time; use one per thread.
- `AsyncKernelEnvSession`: the same methods as coroutines, for many concurrent sessions on one loop.
- `KernelEnvClient`: the OpenEnv `EnvClient` subclass both build on (returns OpenEnv `StepResult`s).
- `fetch_server_info(base_url, token=None)`: GET the server's evaluator and episode settings, so a
  caller can refuse a server whose configuration hash differs from its own.

The token comes from the argument, else from $KERNELFLOW_ENV_TOKEN, and is sent as a bearer header.
Errors are typed: `EnvUnavailableError` (cannot connect: names the URL and what to do),
`EnvAuthError` (token missing or wrong), `EnvCapacityError` (all sessions taken), `EnvTimeoutError`
(no reply within `message_timeout_s`; the session is gone), and `EnvServerError` for anything else
the server rejected (the message says what; the session stays usable). The default message timeout
(900 s) is above one evaluation's worst case at the default settings; `fetch_server_info` reports
the server's own bound (`worst_case_step_s`) for crowded servers. This module imports no evaluator code.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from websockets.exceptions import ConnectionClosed

from kernelflow.env.models import INFO_PATH, TOKEN_ENV_VAR, KernelAction, KernelObservation, KernelState

DEFAULT_MESSAGE_TIMEOUT_S = 900.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
_OBS_FIELDS = frozenset(KernelObservation.model_fields)


class EnvUnavailableError(ConnectionError):
    """The environment server could not be reached."""


class EnvServerError(RuntimeError):
    """The server answered with an error frame: `code` (OpenEnv's error code) and `message`."""

    def __init__(self, message: str, code: str = "UNKNOWN", details: dict[str, Any] | None = None):
        self.message = message
        self.code = code
        self.details = details or {}
        super().__init__(f"{message} (code: {code})")


class EnvAuthError(EnvServerError):
    """The server requires an access token and none, or a wrong one, was presented."""


class EnvCapacityError(EnvServerError):
    """Every session slot of the server is taken; retry later or raise its max_sessions."""


class EnvTimeoutError(TimeoutError):
    """No reply within the message timeout; the connection was dropped with its server session."""


def normalize_base_url(base_url: str) -> str:
    """`http(s)://host:port[/prefix]` from any of http, https, ws, wss, with or without `/ws`."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/ws"):
        url = url[: -len("/ws")]
    if url.startswith("ws://"):
        url = "http://" + url[len("ws://"):]
    elif url.startswith("wss://"):
        url = "https://" + url[len("wss://"):]
    elif not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url


def _resolve_token(token: str | None) -> str | None:
    return token if token is not None else (os.environ.get(TOKEN_ENV_VAR) or None)


def _error_from_frame(data: dict[str, Any]) -> EnvServerError:
    message = str(data.get("message", "unknown error"))
    code = str(data.get("code", "UNKNOWN"))
    details = {k: v for k, v in data.items() if k not in ("message", "code")}
    if code == "VALIDATION_ERROR" and details.get("errors"):
        parts = []
        for err in details["errors"]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc or 'message'}: {err.get('msg', '')}")
        message = f"{message}: " + "; ".join(parts)
    if code == "CAPACITY_REACHED":
        return EnvCapacityError(message + "; retry later or start the server with a larger max_sessions", code, details)
    if code == "UNAUTHORIZED":
        return EnvAuthError(message, code, details)
    return EnvServerError(message, code, details)


class KernelEnvClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """OpenEnv client for the kernelflow environment (async; `.sync()` gives OpenEnv's blocking wrapper)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        **kwargs: Any,
    ):
        token = _resolve_token(token)
        headers = dict(kwargs.pop("headers", None) or {})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http_url = normalize_base_url(base_url)
        super().__init__(
            base_url=self._http_url,
            connect_timeout_s=connect_timeout_s,
            message_timeout_s=message_timeout_s,
            headers=headers or None,
            **kwargs,
        )

    # -- OpenEnv hooks -----------------------------------------------------------------------------

    def _step_payload(self, action: KernelAction) -> dict[str, Any]:
        return {"code": action.code}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        fields = {k: v for k, v in (payload.get("observation") or {}).items() if k in _OBS_FIELDS}
        fields["reward"] = payload.get("reward")
        fields["done"] = bool(payload.get("done", False))
        obs = KernelObservation.model_validate(fields)
        return StepResult(observation=obs, reward=obs.reward, done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> KernelState:
        return KernelState.model_validate(payload)

    # -- clearer errors than the base class's RuntimeError / ConnectionError -------------------------

    async def _connect_async(self) -> KernelEnvClient:
        try:
            return await super()._connect_async()
        except ConnectionError as exc:
            raise EnvUnavailableError(
                f"cannot reach the kernelflow environment server at {self._http_url} ({exc.__cause__ or exc}). "
                "Start one with `kernelflow serve --port PORT` (or check the URL and that it is running)."
            ) from exc

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            await self._send(message)
        except ConnectionClosed:
            pass  # a refused session sends an error frame and closes; read that frame below
        try:
            response = await self._receive()
        except TimeoutError:  # asyncio's is the builtin since 3.11
            raise EnvTimeoutError(
                f"no reply from {self._http_url} within {self._message_timeout:.0f} s to a {message.get('type')!r} "
                "message; the connection and its episode were dropped. Reset to start again, and raise "
                "message_timeout_s above the server's worst_case_step_s (see fetch_server_info)."
            ) from None
        except ConnectionClosed as exc:
            raise EnvUnavailableError(
                f"the kernelflow environment server at {self._http_url} closed the connection ({exc}); "
                "reset to start a new session"
            ) from exc
        if response.get("type") == "error":
            raise _error_from_frame(response.get("data") or {})
        return response


def _reset_kwargs(task_id: str, seed: int, shape: str | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"task_id": task_id, "seed": seed}
    if shape is not None:
        kwargs["shape"] = shape
    return kwargs


def _action(code: str) -> KernelAction:
    if not isinstance(code, str):
        raise TypeError(f"code must be a string (the model's answer), got {type(code).__name__}")
    return KernelAction(code=code)


class KernelEnvSession:
    """A blocking session: `reset`, then one `step` per turn until the observation says done."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        self.base_url = normalize_base_url(base_url)
        self._client = KernelEnvClient(
            self.base_url, token=token, message_timeout_s=message_timeout_s, connect_timeout_s=connect_timeout_s
        )
        self._sync = self._client.sync()

    def reset(self, task_id: str, seed: int = 0, shape: str | None = None) -> KernelObservation:
        """Start an episode of `task_id`; returns the prompt (`prompt`, `messages`)."""
        return self._sync.reset(**_reset_kwargs(task_id, seed, shape)).observation

    def step(self, code: str) -> KernelObservation:
        """Submit one answer; returns its verdict, reward and, once done, the returns."""
        return self._sync.step(_action(code)).observation

    def state(self) -> KernelState:
        return self._sync.state()

    def close(self) -> None:
        self._sync.close()

    def __enter__(self) -> KernelEnvSession:
        self._sync.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncKernelEnvSession:
    """The asyncio form of `KernelEnvSession` (use many of them with `asyncio.gather`)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ):
        self.base_url = normalize_base_url(base_url)
        self._client = KernelEnvClient(
            self.base_url, token=token, message_timeout_s=message_timeout_s, connect_timeout_s=connect_timeout_s
        )

    async def connect(self) -> AsyncKernelEnvSession:
        await self._client.connect()
        return self

    async def reset(self, task_id: str, seed: int = 0, shape: str | None = None) -> KernelObservation:
        return (await self._client.reset(**_reset_kwargs(task_id, seed, shape))).observation

    async def step(self, code: str) -> KernelObservation:
        return (await self._client.step(_action(code))).observation

    async def state(self) -> KernelState:
        return await self._client.state()

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> AsyncKernelEnvSession:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def fetch_server_info(base_url: str, token: str | None = None, timeout_s: float = 10.0) -> dict[str, Any]:
    """The server's settings: evaluator_version, backend, device, config_hash, max_turns, gamma, ..."""
    url = normalize_base_url(base_url) + INFO_PATH
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    token = _resolve_token(token)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read().decode()).get("detail", exc.reason)
        except (ValueError, AttributeError):
            detail = exc.reason
        if exc.code == 401:
            raise EnvAuthError(str(detail), "UNAUTHORIZED") from None
        raise EnvServerError(f"GET {url} failed with HTTP {exc.code}: {detail}", f"HTTP_{exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EnvUnavailableError(
            f"cannot reach the kernelflow environment server at {url} ({reason}). "
            "Start one with `kernelflow serve --port PORT` (or check the URL and that it is running)."
        ) from None
