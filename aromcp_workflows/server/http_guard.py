"""Serving streamable HTTP: which Host and Origin are served, and what one client may hold.

The MCP SDK builds the app (sessions, the bearer middleware of `http_auth`); around it:

- **Host and Origin** are checked on every bind, not only the three loopback names the
  SDK knows, and for the whole app (`/mcp`, and `/ui` when the web view is mounted): the
  one rule of `http.hosts` (the bind address, the `--allowed-host` names, loopback).  A
  foreign Host gets 421 and a foreign Origin 403 before the request is read, so a web page
  that rebinds its name to this server's address reaches nothing.
- **Sessions** (the session-based protocol generation, up to 2025-11-25) cost the server
  a task and its buffers each: one client (its token and its address) may hold
  `AROMCP_HTTP_SESSIONS_PER_CLIENT` at once (503 beyond), all clients together
  `AROMCP_HTTP_MAX_SESSIONS`, and a session idle for `AROMCP_HTTP_SESSION_IDLE_S` ends.
- **Requests** must arrive in time: the headers within `AROMCP_HTTP_HEADER_TIMEOUT_S` of
  the connection (or of the previous answer on it), else the connection is closed; the
  body whole within `AROMCP_HTTP_BODY_TIMEOUT_S`, else 408 and the connection closed.  So
  a client cannot hold connections by trickling a request in.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aromcp_workflows.http import HostEntryError, HostGuard, HostRule, listening_socket, respond
from aromcp_workflows.server.http_auth import HttpOptions, HttpSetupError

# The SDK's own Host/Origin check stays off: `HostGuard` in front of the whole app (/mcp and
# /ui alike) applies the one rule, with one wording, before any app reads the request.
SDK_HOSTS_OFF = TransportSecuritySettings(enable_dns_rebinding_protection=False)
SESSION_GRACE_S = 1.0  # the SDK's idle timer starts a moment after ours: count a session a little longer
LIMITS = {  # variable: (default, what it bounds)
    "AROMCP_HTTP_SESSIONS_PER_CLIENT": (32, "open sessions of one client (token and address)"),
    "AROMCP_HTTP_MAX_SESSIONS": (1000, "open sessions of all clients together"),
    "AROMCP_HTTP_SESSION_IDLE_S": (600, "seconds a session may stay idle before it ends"),
    "AROMCP_HTTP_BODY_TIMEOUT_S": (30, "seconds a request body may take to arrive"),
    "AROMCP_HTTP_HEADER_TIMEOUT_S": (10, "seconds a request's headers may take to arrive"),
}


@dataclass(frozen=True)
class HttpLimits:
    sessions_per_client: int
    max_sessions: int
    session_idle_s: float
    body_timeout_s: float
    header_timeout_s: float
    max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> HttpLimits:
        """The limits, each from its variable or its default; a bad value names the variable."""
        values = []
        for name, (default, what) in LIMITS.items():
            text = environ.get(name, "").strip()
            try:
                value = float(text) if text else float(default)
            except ValueError:
                value = -1.0
            if not value > 0:
                raise HttpSetupError(f"{name}={text!r} is not a positive number ({what}; default {default})")
            values.append(value)
        per_client, total, idle, body, headers = values
        return cls(int(per_client), int(total), idle, body, headers)


# -- Host and Origin -------------------------------------------------------------------------
def host_rule(options: HttpOptions) -> HostRule:
    """The one Host/Origin rule (`http.hosts`) for this bind and its `--allowed-host` names,
    or `HttpSetupError` for an entry that names no host."""
    try:
        return HostRule.for_bind(options.host, options.allowed_hosts)
    except HostEntryError as exc:
        raise HttpSetupError(str(exc)) from None


# -- responses of our own --------------------------------------------------------------------
def json_rpc_error(message: str) -> bytes:
    """A JSON-RPC error without an id, as the SDK answers a request it refuses."""
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message}}).encode()


# -- request bodies ------------------------------------------------------------------------------
class BodyDeadline:
    """Reads each request's body within the deadline (and at most `max_body_bytes`) before
    the app sees the request; a body still arriving at the deadline gets 408, and the
    connection is closed."""

    def __init__(self, app: ASGIApp, limits: HttpLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        with anyio.move_on_after(self.limits.body_timeout_s) as timer:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > self.limits.max_body_bytes:
                    await respond(send, 413, b"Request body too large", b"text/plain; charset=utf-8", close=True)
                    return
                if not message.get("more_body", False):
                    break
        if timer.cancelled_caught:
            text = (f"the request body did not arrive within {self.limits.body_timeout_s:g} s "
                    "(AROMCP_HTTP_BODY_TIMEOUT_S sets this limit)")
            await respond(send, 408, text.encode(), b"text/plain; charset=utf-8", close=True)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


# -- sessions per client -----------------------------------------------------------------------
@dataclass
class SessionUse:
    """One open session as seen from outside the SDK: whose it is, and when it was last used."""

    client: str
    in_flight: int = 0
    last_seen: float = 0.0


def client_key(scope: Scope, headers: Headers) -> str:
    """Who a request comes from: its credential (hashed) and its address."""
    credential = hashlib.sha256(headers.get("authorization", "").encode("latin-1", "replace")).hexdigest()[:16]
    peer = scope.get("client") or ("?", 0)
    return f"{credential}@{peer[0]}"


def may_open_session(scope: Scope, headers: Headers) -> bool:
    """A POST without a session id in the session-based generation may open a session."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    version = headers.get("mcp-protocol-version")
    return scope.get("method") == "POST" and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS)


class SessionQuota:
    """At most `sessions_per_client` open sessions per client.  A session counts from the
    answer that opened it until the client deletes it, the SDK answers 404 for it (ended),
    or it has been idle as long as the SDK lets it be."""

    def __init__(self, app: ASGIApp, limits: HttpLimits, path: str = "/mcp"):
        self.app = app
        self.limits = limits
        self.path = path
        self.sessions: dict[str, SessionUse] = {}
        self.opening: dict[str, int] = defaultdict(int)  # requests of a client that may open one now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != self.path:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get("mcp-session-id")
        if session_id is not None:
            await self._in_session(session_id, scope, receive, send)
        elif may_open_session(scope, headers):
            await self._opening(client_key(scope, headers), scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def held(self, client: str) -> int:
        """Sessions `client` holds now (ended ones forgotten first) plus those it is opening."""
        now = time.monotonic()
        expired = [sid for sid, use in self.sessions.items()
                   if use.in_flight == 0 and now - use.last_seen > self.limits.session_idle_s + SESSION_GRACE_S]
        for sid in expired:
            del self.sessions[sid]
        return sum(1 for use in self.sessions.values() if use.client == client) + self.opening[client]

    async def _opening(self, client: str, scope: Scope, receive: Receive, send: Send) -> None:
        cap = self.limits.sessions_per_client
        if self.held(client) >= cap:
            text = (f"this client already holds {cap} sessions, the most one client may "
                    "(AROMCP_HTTP_SESSIONS_PER_CLIENT sets it): reuse one, end one (DELETE), or wait until an idle "
                    f"one ends after {self.limits.session_idle_s:g} s")
            await respond(send, 503, json_rpc_error(text), b"application/json")
            return
        self.opening[client] += 1
        opened: list[str] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = Headers(raw=message.get("headers", [])).get("mcp-session-id")
                if session_id:
                    self.sessions[session_id] = SessionUse(client, in_flight=1)
                    opened.append(session_id)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.opening[client] -= 1
            for session_id in opened:
                self._ended_request(session_id)

    async def _in_session(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        use = self.sessions.get(session_id)
        if use is None:  # not one we saw opened: the SDK answers it (404 when it does not exist)
            await self.app(scope, receive, send)
            return
        use.in_flight += 1
        status: list[int] = []

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self._ended_request(session_id)
            answered = status[0] if status else None
            if answered == 404 or (scope.get("method") == "DELETE" and answered is not None and answered < 300):
                self.sessions.pop(session_id, None)

    def _ended_request(self, session_id: str) -> None:
        use = self.sessions.get(session_id)
        if use is not None:
            use.in_flight -= 1
            use.last_seen = time.monotonic()


def bind(options: HttpOptions) -> socket.socket:
    """The server's socket, bound but not listening yet (the server listens once it can answer:
    see `server.mcp`), or `HttpSetupError` (exit status 1) saying why not."""
    try:
        return listening_socket(options.host, options.port, listen=False)
    except OSError as exc:
        raise HttpSetupError(f"cannot listen on {options.host} port {options.port}: {exc.strerror or exc}",
                             exit_code=1) from None


def header_deadline_protocol(seconds: float) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol (h11) with a deadline for each request's headers: it
    waits for them without one, so a client sending a byte now and then held a
    connection for ever.  Armed when the connection opens and after each answer; a
    request whose headers are in (a new request-response cycle) disarms it."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _timer: Any = None
        _armed_at: Any = None  # the cycle that was current when the deadline was set

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self._timer is not None and self.cycle is not self._armed_at:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._armed_at = self.cycle
            self._timer = self.loop.call_later(seconds, self._late)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _late(self) -> None:
            self._timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadline


def mcp_app(server: Any, limits: HttpLimits) -> Any:
    """The SDK's streamable-HTTP app (sessions, the bearer middleware), with our limits;
    Host and Origin are left to `serve_http`'s guard."""
    return server.streamable_http_app(session_idle_timeout=limits.session_idle_s, max_sessions=limits.max_sessions,
                                      transport_security=SDK_HOSTS_OFF, max_request_body_size=limits.max_body_bytes)


async def serve_http(app: Any, options: HttpOptions, limits: HttpLimits, rule: HostRule, sock: socket.socket,
                     log_level: str) -> None:
    """Run `app` (/mcp, and /ui when mounted) behind the checks above, on uvicorn, on
    `sock`: the Host/Origin rule first, so a refused request is not even read."""
    import uvicorn

    guarded = HostGuard(BodyDeadline(SessionQuota(app, limits), limits), rule)
    config = uvicorn.Config(guarded, host=options.host, port=options.port, log_level=log_level.lower(),
                            http=header_deadline_protocol(limits.header_timeout_s), timeout_graceful_shutdown=1)
    await uvicorn.Server(config).serve(sockets=[sock])
