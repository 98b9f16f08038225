"""A save on its way to PostgreSQL, answered later: `PendingSave` (`PostgresStore.begin_save`).

The save's one statement is sent without waiting (`pg_send`), so the server builds its
reply while the commit travels; `result()` reads the answer.  When the connection breaks
on the way, the save may or may not have been committed: `PendingSave` reads which write
made the version after the expected one (its own token, nobody's, or another writer's) and
sends the statement again only when nothing was committed (`StorePool.write_once`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aromcp_workflows.store import pg_send
from aromcp_workflows.store.base import ConflictError, NotFoundError, OutcomeUnknownError, StoreError
from aromcp_workflows.store.pg_connect import import_psycopg
from aromcp_workflows.store.pg_pool import POOL_TIMEOUT_S, Committed, StorePool
from aromcp_workflows.store.pg_statements import SAVED, VERSION
from aromcp_workflows.store.records import InstanceRecord
from aromcp_workflows.store.writes import PlannedSave, note_committed, save_refused

if TYPE_CHECKING:
    import psycopg


@dataclass(frozen=True)
class PendingWrite:
    """One save statement, and what tells it apart from every other writer's (its token)."""

    workflow_id: str
    expected: int
    token: str
    events: int
    sql: str
    params: tuple[Any, ...]


class PendingSave:
    """A save on its way to PostgreSQL (`PostgresStore.begin_save`).

    The statement is sent at once on a pooled connection, through libpq's asynchronous calls
    (`pg_send.Sent`).  `poll()` tells without waiting whether its answer is in; `result()`
    reads it — the new version, or `ConflictError`/`NotFoundError` as `save` raises them —
    and gives the connection back.  A connection that breaks on the way is handled as in
    every write (`StorePool.write_once`): the store finds out whether the save was
    committed and sends it again only when it was not.  `result()` may be called from any
    thread and any number of times: the first call does the work, the others get its outcome."""

    def __init__(self, db: StorePool, write: PendingWrite, record: InstanceRecord, plan: PlannedSave) -> None:
        self.db, self.write, self.record, self.plan = db, write, record, plan
        self._lock = threading.Lock()
        self._outcome: tuple[int | None, BaseException | None] | None = None
        self._conn: Any = None
        self._sent: Any = None
        try:
            self._conn = db.get().getconn(timeout=POOL_TIMEOUT_S)
            self._sent = pg_send.Sent(self._conn, pg_send.numbered(write.sql), write.params)
        except Exception:  # nothing reached PostgreSQL for sure: `result()` takes the road of every write
            self._sent = None

    def poll(self) -> str:
        """Without waiting (never even for the lock: the event loop asks): "in" when
        `result()` would only read an answer that has come (or give an outcome known
        already), "waiting" while the answer is on its way (`watch` turns readable as it
        comes), "broken" when `result()` has a failure to handle or another thread is at it
        (it may wait for PostgreSQL to come back)."""
        if not self._lock.acquire(blocking=False):
            return "broken"  # another thread is reading it (maybe waiting for PostgreSQL): wait in a thread
        try:
            if self._outcome is not None:
                return "in"
            return "broken" if self._sent is None else str(self._sent.poll())
        finally:
            self._lock.release()

    def watch(self) -> int | None:
        """A duplicate of the connection's socket, readable as its answer comes; the caller
        closes it.  A duplicate, because another thread may find the connection broken and
        close it meanwhile: the event loop must never watch a descriptor number that was
        closed (the loop refuses it) or reused by another socket (the loop would take it
        from whoever owns it).  None when there is nothing to wait for on the loop."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._sent is None or self._outcome is not None:
                return None
            try:
                return os.dup(self._sent.fileno())
            except OSError:
                return None
        finally:
            self._lock.release()

    def result(self) -> int:
        with self._lock:
            if self._outcome is None:
                try:
                    self._outcome = (self._finish(), None)
                except BaseException as exc:
                    self._outcome = (None, exc)
            version, error = self._outcome
        if error is not None:
            raise error
        assert version is not None
        return version

    def _finish(self) -> int:
        write, db = self.write, self.db
        first: int | None
        try:
            if self._sent is None:
                raise pg_send.Broken("no connection")
            first = min(self._sent.rows(), default=None)
            if first is None:  # compare-and-set found another version (or no instance): which?
                raise save_refused(write.workflow_id, write.expected, self._winner(), db.path)
        except pg_send.Refused as exc:
            raise StoreError(f"Could not save an instance in the workflow store {db.path}: {exc}") from None
        except pg_send.Broken as exc:
            self._release(broken=True)
            first = db.write_once("save an instance in", self._send_again, self._saved, exc)
        finally:
            self._release()
        return note_committed(self.record, self.plan, first)

    def _winner(self) -> Any:
        """The instance's `version` row after a compare-and-set that wrote nothing (None: no
        such instance), read on the save's own connection; when that connection breaks (PostgreSQL
        restarted just then), read again through the pool, which waits for PostgreSQL: nothing
        was committed, so the caller is owed the conflict, not the broken connection."""
        psycopg, _ = import_psycopg()
        params = (self.write.workflow_id,)
        try:
            return self._conn.execute(VERSION, params).fetchone()
        except psycopg.OperationalError:  # the connection broke; any other error is a bug to see
            self._release(broken=True)
        rows = self.db.fetch("read", VERSION, params)
        return rows[0] if rows else None

    def _send_again(self, conn: psycopg.Connection[Any]) -> int | None:
        """The statement once more, the ordinary way (after a broken connection, nothing committed)."""
        write = self.write
        first = min((int(r[0]) for r in conn.execute(write.sql, write.params).fetchall()), default=None)
        if first is None:
            raise save_refused(write.workflow_id, write.expected,
                               conn.execute(VERSION, (write.workflow_id,)).fetchone(), self.db.path)
        return first

    def _saved(self) -> Committed[int | None] | None:
        """After a broken connection: whether this save (its `token`) made version `expected + 1`
        (with its first history seq when that can still be read), or nothing was committed."""
        write = self.write
        wid, expected, token, count = write.workflow_id, write.expected, write.token, write.events
        rows = self.db.fetch("read", SAVED, (expected + 1, wid))
        if not rows:
            raise NotFoundError(wid, self.db.path)
        found, last, last_seq, delta_commit = int(rows[0][0]), rows[0][1], int(rows[0][2]), rows[0][3]
        if found == expected:
            return None
        if last == token:
            return Committed(last_seq - count + 1)
        if delta_commit == token:
            return Committed(None)  # ours, and others wrote since: its seq numbers are not at hand
        if found == expected + 1 or delta_commit is not None:
            raise ConflictError(wid, expected, found)
        raise OutcomeUnknownError(
            f"The connection to the workflow store {self.db.path} broke while instance {wid} was being saved, and "
            f"{found - expected} later versions were written since: whether this change was one of them cannot "
            "be told any more. Look at the instance before retrying.")

    def _release(self, broken: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if broken:
            with contextlib.suppress(Exception):
                conn.close()  # the pool sees it closed and replaces it
        self.db.get().putconn(conn)


