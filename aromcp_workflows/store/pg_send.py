"""One statement sent to PostgreSQL now, its answer read later: how a save overlaps its round trip.

A save is one statement, and the reply to the tool call that made it must wait for its
commit — but nothing else must.  `Sent` puts the statement on the wire through libpq's
asynchronous calls (`send_query_params`/`send_query_prepared` and `flush`) and returns at
once; `ready()` says, without waiting, whether the answer is in, and `rows()` reads it
(waiting if it must).  Meanwhile the server builds and encodes its reply: the commit's
round trip is paid once, in parallel with work that was to be done anyway.

Statements are sent as text with explicit parameter types; a statement is sent in full its
first uses on a connection (as psycopg does) and prepared on the server after that, so
PostgreSQL parses and plans it once per connection.  A connection is one caller's at a
time (checked out of the pool), so nothing here locks.  Any failure on the way is `Broken`
(the statement may or may not have been committed: the store finds out) or `Refused` (the
database refused it, nothing committed).
"""

from __future__ import annotations

import hashlib
import select
from typing import Any

PREPARE_AFTER = 2  # uses of a statement on one connection before it is prepared there
_INT8, _TEXT = 20, 25  # type OIDs of the parameters
MAX_CONNECTIONS_KNOWN = 1000  # connections whose statements are remembered (forgotten all at once beyond)
_prepared: dict[tuple[int, int], dict[bytes, int]] = {}  # (connection, backend pid) -> statement -> uses
_names: dict[bytes, bytes] = {}  # statement -> the name it is prepared under


class Broken(Exception):
    """The connection failed while the statement was on its way or its answer was."""


class Refused(Exception):
    """PostgreSQL answered with an error: the statement took no effect."""


def numbered(sql: str) -> bytes:
    """`%s` placeholders as libpq's `$1, $2, …` (the store's SQL has no other `%`)."""
    parts = sql.split("%s")
    return "".join(part + (f"${n + 1}" if n < len(parts) - 1 else "") for n, part in enumerate(parts)).encode()


def _value(param: Any) -> tuple[bytes | None, int]:
    if param is None:
        return None, 0
    if isinstance(param, bool):
        return (b"t" if param else b"f"), 16
    if isinstance(param, int):
        return str(param).encode(), _INT8
    return str(param).encode(), _TEXT


def _name(sql: bytes) -> bytes:
    """The name a statement is prepared under: the same for the same text, on every connection."""
    return b"aromcp_" + hashlib.sha1(sql).hexdigest()[:20].encode()


class Sent:
    """A statement on its way; `rows()` gives the first column of its rows."""

    def __init__(self, conn: Any, sql: bytes, params: tuple[Any, ...]) -> None:
        self.pgconn = conn.pgconn
        key = (id(self.pgconn), int(self.pgconn.backend_pid))
        if key not in _prepared and len(_prepared) >= MAX_CONNECTIONS_KNOWN:
            _prepared.clear()  # a statement then goes in full a few times again, and is prepared again
        statements = _prepared.setdefault(key, {})
        values, types = zip(*(_value(p) for p in params), strict=True) if params else ((), ())
        uses = statements.get(sql, 0)
        try:
            if uses < PREPARE_AFTER:
                self.pgconn.send_query_params(sql, list(values), list(types))
            else:
                name = _names.get(sql) or _names.setdefault(sql, _name(sql))
                if uses == PREPARE_AFTER:
                    self.pgconn.send_prepare(name, sql, list(types))
                    self._wait()
                    self._collect()
                self.pgconn.send_query_prepared(name, list(values))
            while self.pgconn.flush():
                select.select([], [self.pgconn.socket], [])
        except Broken:
            raise
        except Refused:
            statements.pop(sql, None)
            raise
        except Exception as exc:  # OperationalError from libpq: the connection is gone
            raise Broken(str(exc)) from exc
        statements[sql] = uses + 1

    def poll(self) -> str:
        """Where the answer stands, without waiting: "in", "waiting", or "broken" (the
        connection failed: `rows` will say how)."""
        try:
            self.pgconn.consume_input()
            return "waiting" if self.pgconn.is_busy() else "in"
        except Exception:
            return "broken"

    def fileno(self) -> int:
        """The connection's socket: readable when (more of) the answer has come."""
        return int(self.pgconn.socket)

    def rows(self) -> list[int]:
        """The first column of the statement's rows, as integers; waits for them."""
        self._wait()
        return self._collect()

    def _wait(self) -> None:
        try:
            self.pgconn.consume_input()
            while self.pgconn.is_busy():
                select.select([self.pgconn.socket], [], [])
                self.pgconn.consume_input()
        except Exception as exc:
            raise Broken(str(exc)) from exc

    def _collect(self) -> list[int]:
        from psycopg import pq

        found: list[int] = []
        error = None
        while (result := self.pgconn.get_result()) is not None:
            if result.status == pq.ExecStatus.TUPLES_OK:
                found += [int(result.get_value(n, 0) or 0) for n in range(result.ntuples)]
            elif result.status == pq.ExecStatus.FATAL_ERROR:
                error = result
        if self.pgconn.status != pq.ConnStatus.OK:
            raise Broken("the connection to PostgreSQL was lost")
        if error is not None:
            state = error.error_field(pq.DiagnosticField.SQLSTATE) or b""
            message = (error.error_message or b"").decode("utf-8", "replace").strip()
            if not state or state.startswith((b"08", b"57P")) or state == b"26000":
                raise Broken(message)  # connection lost, server shutting down, or a prepared statement gone
            raise Refused(message)
        return found
