"""How many connections a server of ours holds, and for how long one may say nothing.

uvicorn accepts every connection and waits for its request headers without a deadline.
Here, on its HTTP/1.1 protocol (h11):

- **headers in time**: each request's headers must arrive within `header_timeout_s` of the
  connection (or of the previous answer on it), else the connection is closed;
- **connections in all**: at most `max_connections` at once; one more is answered with a
  one-line 503 and closed;
- **unauthenticated connections**: one that has not yet carried a request with a valid
  credential (the `http.gate` marks it) is *unauthenticated*; at most
  `max_unauthenticated` are kept, and a new one closes the oldest.  A client without a
  credential can hold a few connections for a few seconds, never the server's memory,
  and a client with one gets through: its connection is marked on its first request.

A request reaches its connection's record through the ASGI scope's `state` (the
`CONNECTION` key), which uvicorn copies from the protocol for every request.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

CONNECTION = "aromcp.connection"  # in scope["state"]: the `Connection` a request came on
LINGER_S = 1.0  # how long a refused connection's further bytes are read and dropped before it closes


@dataclass(eq=False)
class Connection:
    """One open connection, as the book counts it."""

    book: ConnectionBook
    transport: asyncio.Transport
    authenticated: bool = False

    def mark_authenticated(self) -> None:
        """A request on it carried a valid credential: it no longer counts as unauthenticated."""
        if not self.authenticated:
            self.authenticated = True
            self.book.unauthenticated.pop(self, None)


@dataclass
class ConnectionBook:
    """The connections open now: all of them, and the unauthenticated ones oldest first."""

    max_connections: int
    max_unauthenticated: int
    open: int = 0
    unauthenticated: OrderedDict[Connection, None] = field(default_factory=OrderedDict)

    def opened(self, transport: asyncio.Transport) -> Connection | None:
        """Count a new connection, closing the oldest unauthenticated one beyond that cap;
        None when the server already holds `max_connections` (the caller refuses it)."""
        if self.open >= self.max_connections:
            return None
        while len(self.unauthenticated) >= self.max_unauthenticated:
            oldest, _ = self.unauthenticated.popitem(last=False)
            oldest.transport.close()
        connection = Connection(self, transport)
        self.open += 1
        self.unauthenticated[connection] = None
        return connection

    def closed(self, connection: Connection) -> None:
        self.open -= 1
        self.unauthenticated.pop(connection, None)

    def refusal(self) -> bytes:
        """The whole answer to a connection beyond the cap (written before any request is read)."""
        text = (f"this server already holds {self.max_connections} connections, the most it takes at once "
                "(AROMCP_HTTP_MAX_CONNECTIONS sets it): try again in a moment\n").encode()
        return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(text)) + text


class ConnectionGuard:
    """What `guarded_protocol` adds to uvicorn's h11 protocol (it is mixed in there, so this
    module imports no uvicorn until a server starts).  The deadline is armed when the
    connection opens and after each answer; a request whose headers are in (a new
    request-response cycle) disarms it."""

    book: ConnectionBook
    header_timeout_s: float
    _timer: Any = None
    _armed_at: Any = None  # the cycle that was current when the deadline was set
    _record: Connection | None = None
    _refused = False
    # uvicorn's, for the type checker
    transport: asyncio.Transport
    loop: Any
    cycle: Any
    app_state: dict[str, Any]

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._record = self.book.opened(transport)
        if self._record is None:
            self._refuse()
            return
        self.app_state = {**self.app_state, CONNECTION: self._record}
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self._refused:  # a refused connection's bytes are dropped until it closes
            super().data_received(data)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()  # type: ignore[misc]
        if self._timer is not None and self.cycle is not self._armed_at:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._record is not None:
            self.book.closed(self._record)
            self._record = None
        super().connection_lost(exc)  # type: ignore[misc]

    def _refuse(self) -> None:
        """The 503 whole on the wire, the write side shut, then what the client still sends
        is read and dropped for `LINGER_S`: closing at once would reset the connection and
        could lose the answer before the client reads it."""
        self._refused = True
        self.transport.write(self.book.refusal())
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _arm(self) -> None:
        self._disarm()
        self._armed_at = self.cycle
        self._timer = self.loop.call_later(self.header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _late(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(book: ConnectionBook, header_timeout_s: float) -> type[Any]:
    """uvicorn's h11 protocol with `ConnectionGuard`: the book's caps and the header deadline."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return type("GuardedH11Protocol", (ConnectionGuard, H11Protocol),
                {"book": book, "header_timeout_s": header_timeout_s})
