"""Serving streamable HTTP: the checks in front of `/mcp` (and `/ui`), and what one client may hold.

The MCP SDK builds the app (sessions, the bearer middleware of `http_auth`); in front of
it, `http.serving` puts the access log, the one Host/Origin rule of `http.hosts` (421/403
before the request is read, on every bind, for `/mcp` and `/ui` alike), the credential
checked from the headers before any body is read (`http.gate`: `/mcp` by
`http_auth.BearerAdmission`, `/ui` by the web view's own admission), the body deadline,
and uvicorn's connection limits (`http.connections`).  Here, what is MCP's own:

- **Sessions** (the session-based protocol generation, up to 2025-11-25) cost the server
  a task and its buffers each: one client (its token and its address) may hold
  `AROMCP_HTTP_SESSIONS_PER_CLIENT` at once (503 beyond), all clients together
  `AROMCP_HTTP_MAX_SESSIONS`, and a session idle for `AROMCP_HTTP_SESSION_IDLE_S` ends.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aromcp_workflows.http import (
    Admission,
    ConnectionLimits,
    HostEntryError,
    HostRule,
    LimitError,
    client_key,
    guarded,
    listening_socket,
    read_limits,
    respond,
    uvicorn_config,
)
from aromcp_workflows.server.http_auth import HttpOptions, HttpSetupError

# The SDK's own Host/Origin check stays off: `HostGuard` in front of the whole app (/mcp and
# /ui alike) applies the one rule, with one wording, before any app reads the request.
SDK_HOSTS_OFF = TransportSecuritySettings(enable_dns_rebinding_protection=False)
SESSION_GRACE_S = 1.0  # the SDK's idle timer starts a moment after ours: count a session a little longer
LIMITS = {  # variable: (default, what it bounds)
    "AROMCP_HTTP_SESSIONS_PER_CLIENT": (32, "open sessions of one client (token and address)"),
    "AROMCP_HTTP_MAX_SESSIONS": (1000, "open sessions of all clients together"),
    "AROMCP_HTTP_SESSION_IDLE_S": (600, "seconds a session may stay idle before it ends"),
}


@dataclass(frozen=True)
class HttpLimits:
    sessions_per_client: int
    max_sessions: int
    session_idle_s: float
    connections: ConnectionLimits

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> HttpLimits:
        """The limits, each from its variable or its default; a bad value names the variable."""
        try:
            values = read_limits(LIMITS, environ)
            connections = ConnectionLimits.from_env(environ)
        except LimitError as exc:
            raise HttpSetupError(str(exc)) from None
        return cls(int(values["AROMCP_HTTP_SESSIONS_PER_CLIENT"]), int(values["AROMCP_HTTP_MAX_SESSIONS"]),
                   values["AROMCP_HTTP_SESSION_IDLE_S"], connections)


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


# -- sessions per client -----------------------------------------------------------------------
@dataclass
class SessionUse:
    """One open session as seen from outside the SDK: whose it is, and when it was last used."""

    client: str
    in_flight: int = 0
    last_seen: float = 0.0


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
            await self._opening(client_key(scope, headers.get("authorization", "")), scope, receive, send)
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


def mcp_app(server: Any, limits: HttpLimits) -> Any:
    """The SDK's streamable-HTTP app (sessions, the bearer middleware), with our limits;
    Host and Origin are left to `serve_http`'s guard."""
    return server.streamable_http_app(session_idle_timeout=limits.session_idle_s, max_sessions=limits.max_sessions,
                                      transport_security=SDK_HOSTS_OFF,
                                      max_request_body_size=limits.connections.max_body_bytes)


async def serve_http(app: Any, options: HttpOptions, limits: HttpLimits, rule: HostRule, sock: socket.socket,
                     log_level: str, admissions: Sequence[tuple[str, Admission]]) -> None:
    """Run `app` (/mcp, and /ui when mounted) on uvicorn, on `sock`, behind the checks of
    `http.serving`: each path's credential (`admissions`) from the headers, before its body."""
    import uvicorn

    front = guarded(SessionQuota(app, limits), rule, admissions, limits.connections)
    config = uvicorn_config(front, limits.connections, log_level, host=options.host, port=options.port)
    await uvicorn.Server(config).serve(sockets=[sock])
