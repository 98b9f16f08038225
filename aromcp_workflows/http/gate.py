"""The credential first: who is asking is decided from the headers, before any body is read.

In front of every app we serve (`/mcp`, `/ui`, the web view alone), `CredentialGate` asks
the admission of the request's path (the MCP server's bearer check, the web view's
session or bearer) and, from the headers alone:

- refuses at once what has no valid credential (401; the admission words it), unless the
  path is one that needs none (the page's own files, the login), and then with no more
  than `PUBLIC_BODY_BYTES` of body;
- refuses at once a body declared over the limit (413), before a byte of it is read;
- marks the connection as authenticated (`http.connections`), so an unauthenticated
  client cannot crowd out one with a credential.

A refusal is whole on the wire before the connection closes: what the client still sends
is read and dropped for a moment (`LINGER_S`), never kept, so a client busy sending a large
body still reads its answer instead of a reset.  Only then does `BodyDeadline` read the
body of an admitted request, within its deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aromcp_workflows.http.connections import CONNECTION, LINGER_S

CREDENTIAL = "aromcp.credential"  # in the scope: the `Admitted` the gate decided on
PUBLIC_BODY_BYTES = 4096  # the most a request without a credential may carry (a login form)
LINGER_BYTES = 1024 * 1024  # the most a refused request's body is read (and dropped) before the connection closes
TEXT = b"text/plain; charset=utf-8"


@dataclass(frozen=True)
class Admitted:
    """Let in.  `principal`: who, as a key for per-client quotas (None: no credential, on a
    path that needs none); `via`: how (`bearer`, `session`, `open` without auth);
    `session`: the web view's session, when that is how."""

    principal: str | None = None
    via: str = ""
    session: Any = None


@dataclass(frozen=True)
class NotAdmitted:
    """Answered at once, body unread: status, one-line body, its type, more headers."""

    status: int
    body: bytes
    content_type: bytes = TEXT
    headers: tuple[tuple[bytes, bytes], ...] = ()


Admission = Callable[[Scope], Awaitable[Admitted | NotAdmitted]]


async def refuse(refused: NotAdmitted, receive: Receive, send: Send, linger_s: float = LINGER_S) -> None:
    """Answer `refused` whole, then drop what the client still sends for `linger_s` and
    `LINGER_BYTES` at most (never more than one chunk held: uvicorn pauses reading until it
    is taken), then close.  A small body sent in one go ends cleanly; a client that sends on
    past that gets the connection closed, its answer already on the wire."""
    headers = [(b"content-type", refused.content_type), (b"content-length", str(len(refused.body)).encode()),
               (b"connection", b"close"), *refused.headers]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": refused.body, "more_body": True})
    dropped = 0
    with anyio.move_on_after(linger_s):
        while dropped <= LINGER_BYTES:
            message = await receive()
            dropped += len(message.get("body", b""))
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
    await send({"type": "http.response.body", "body": b""})


def declared_length(headers: Headers) -> int | None:
    """The body length the headers declare (None: none declared, or chunked)."""
    text = headers.get("content-length")
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class CredentialGate:
    """The admission of each path prefix (first match; "" matches all), then the body size,
    from the headers alone; an admitted request goes on with its `Admitted` in the scope."""

    def __init__(self, app: ASGIApp, admissions: Sequence[tuple[str, Admission]], max_body_bytes: int):
        self.app = app
        self.admissions = admissions
        self.max_body_bytes = max_body_bytes

    def admission(self, path: str) -> Admission:
        for prefix, admission in self.admissions:
            if not prefix or path == prefix or path.startswith(prefix + "/"):
                return admission
        raise LookupError(path)  # the last admission's prefix is "" by construction

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # we serve none: refused before anything is read
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        verdict = await self.admission(scope.get("path", ""))(scope)
        if isinstance(verdict, Admitted):
            verdict = self.sized(verdict, Headers(scope=scope)) or verdict
        if isinstance(verdict, NotAdmitted):
            await refuse(verdict, receive, send)
            return
        if verdict.principal is not None:
            connection = scope.get("state", {}).get(CONNECTION)
            if connection is not None:
                connection.mark_authenticated()
        scope[CREDENTIAL] = verdict
        await self.app(scope, receive, send)

    def sized(self, admitted: Admitted, headers: Headers) -> NotAdmitted | None:
        """A body the headers declare too large for who is asking, or one without a length
        from a client without a credential: refused before it is read."""
        limit = self.max_body_bytes if admitted.principal is not None else PUBLIC_BODY_BYTES
        declared = declared_length(headers)
        if declared is None and admitted.principal is None and "chunked" in headers.get("transfer-encoding", ""):
            return NotAdmitted(411, b"a request without a credential must declare its body's length (Content-Length)")
        if declared is not None and declared > limit:
            return NotAdmitted(413, f"the request body is {declared} bytes; the most this server reads is {limit}"
                           .encode())
        return None


class BodyDeadline:
    """Reads each admitted request's body within the deadline (and at most
    `max_body_bytes`) before the app sees it; a body still arriving at the deadline gets
    408, one growing past the limit (sent without a length) 413, and the connection closes."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, timeout_s: float):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        size = 0
        with anyio.move_on_after(self.timeout_s) as timer:
            while True:
                message = await receive()
                messages.append(message)
                if message["type"] != "http.request":
                    break
                size += len(message.get("body", b""))
                if size > self.max_body_bytes:
                    text = f"the request body is over {self.max_body_bytes} bytes, the most this server reads"
                    await refuse(NotAdmitted(413, text.encode()), receive, send)
                    return
                if not message.get("more_body", False):
                    break
        if timer.cancelled_caught:
            text = (f"the request body did not arrive within {self.timeout_s:g} s "
                    "(AROMCP_HTTP_BODY_TIMEOUT_S sets this limit)")
            await refuse(NotAdmitted(408, text.encode()), receive, send, linger_s=0)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)
