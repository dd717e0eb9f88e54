"""Access control for the environment server, as a plain ASGI middleware.

The server runs submitted code. Without a configured token it serves loopback peers only (whatever
address it was bound to, so `uvicorn --host 0.0.0.0` cannot expose it by accident); with a token,
every request must present it. A client presents it in one of three ways (the first found wins):

- a header: `Authorization: Bearer <token>` or `X-Kernelflow-Token: <token>` (what `KernelEnvClient`
  and `fetch_server_info` send);
- a query parameter: `...?token=<token>`;
- a path prefix: `http://host:8000/token/<token>` as the base URL, for clients that can set neither
  headers nor query parameters (openenv-core 0.3.0's EnvClient appends `/ws` to its base URL).

The token is removed from the request's path and query before the app (and uvicorn's access log)
sees them. `/health` stays open for container health checks; it reveals nothing. A rejected HTTP
request gets 401 with a JSON `detail`; a rejected WebSocket is accepted, sent one OpenEnv error frame
(`{"type": "error", "data": {"message": ..., "code": "UNAUTHORIZED"}}`, which every OpenEnv client
raises as an error) and closed with code 1008, so the client sees why instead of a bare handshake
failure. `serve()` in `app.py` also refuses to bind a non-loopback address without a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})
PATH_PREFIX = "/token/"
UNAUTHORIZED = "UNAUTHORIZED"
TOKEN_HEADER = "x-kernelflow-token"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _take_token(scope: Scope) -> str | None:
    """The presented token, removing it from the scope's path and query string (see the docstring)."""
    path = scope.get("path", "")
    if path.startswith(PATH_PREFIX):
        rest = path[len(PATH_PREFIX):]
        token, _, tail = rest.partition("/")
        new_path = "/" + tail
        scope["path"] = new_path
        scope["raw_path"] = new_path.encode()
        return token
    auth = _header(scope, b"authorization")
    if auth and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    header = _header(scope, TOKEN_HEADER.encode())
    if header:
        return header.strip()
    query = scope.get("query_string", b"").decode("latin-1")
    if "token=" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        token = next((v for k, v in pairs if k == "token"), None)
        scope["query_string"] = urlencode([(k, v) for k, v in pairs if k != "token"]).encode()
        return token
    return None


def is_loopback(host: str | None) -> bool:
    """Whether `host` (an IP literal or 'localhost') is a loopback address."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AccessMiddleware:
    """Without a token: serve loopback peers only. With one: require it (see the module docstring)."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None):
        self.app = app
        self._token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        # Always strip a presented token, even on open paths, so it is never logged.
        presented = _take_token(scope)
        if scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        if self._token is None:
            client = scope.get("client")
            if client is None or is_loopback(client[0]):
                await self.app(scope, receive, send)
                return
            message = (
                f"this kernelflow environment server has no access token, so it serves loopback clients only "
                f"(you connected from {client[0]}); start it with a token ($KERNELFLOW_ENV_TOKEN or \"token\" "
                "in --config) and present that token"
            )
        elif presented is not None and hmac.compare_digest(presented.encode(), self._token):
            await self.app(scope, receive, send)
            return
        elif presented is None:
            message = (
                "this kernelflow environment server requires an access token; present it as the header "
                "'Authorization: Bearer <token>' (KernelEnvSession(token=...) or $KERNELFLOW_ENV_TOKEN)"
            )
        else:
            message = "the access token presented to this kernelflow environment server is wrong"
        if scope["type"] == "http":
            await _reject_http(send, message)
        else:
            await _reject_websocket(receive, send, message)


async def _reject_http(send: Send, message: str) -> None:
    body = json.dumps({"detail": message, "code": UNAUTHORIZED}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _reject_websocket(receive: Receive, send: Send, message: str) -> None:
    event = await receive()
    if event.get("type") != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    frame = {"type": "error", "data": {"message": message, "code": UNAUTHORIZED}}
    await send({"type": "websocket.send", "text": json.dumps(frame)})
    await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
