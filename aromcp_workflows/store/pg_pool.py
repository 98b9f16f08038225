"""A PostgreSQL store's connections, and how a call outlives a restart of PostgreSQL.

One psycopg pool per process (made on first use, after the migrations; a pool inherited
through fork() is never used by the child), connections in autocommit.  A read whose
connection breaks is sent again on a fresh one until PostgreSQL answers
(`RECONNECT_PATIENCE_S`).  A write whose connection breaks may or may not have been
committed, so it is never simply sent again: every write leaves a random token
(`new_token`) on what it writes, and `StorePool.write_once` asks the write's own `outcome`
read which it was: committed (the call goes on), or not (sent again; its compare-and-set
still guards it).
What the statements are is `pg_statements.py`'s business; this module never builds SQL.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aromcp_workflows.store.base import ConflictError, NotFoundError, OutcomeUnknownError, StoreError, StoreOpenError
from aromcp_workflows.store.pg_connect import POOL_ENV_VAR, import_psycopg, one_line, open_message
from aromcp_workflows.store.pg_schema import migrate

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

T = TypeVar("T")
CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
RECONNECT_PATIENCE_S = POOL_TIMEOUT_S  # how long a call waits for PostgreSQL to come back
RETRY_PAUSES_S = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8)  # between attempts on a broken connection; then 1 s
log = logging.getLogger("aromcp_workflows")


class StorePool:
    """The connections of one `PostgresStore`: safe to share between threads; a forked child
    makes its own on first use."""

    def __init__(self, url: str, path: str, pool_size: int) -> None:
        self.url, self.path, self.pool_size = url, path, pool_size
        self.migrated_from: int | None = None  # the schema version found by the first connection
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._pid = 0
        self._inherited: list[Any] = []  # pools copied by fork(): kept, never closed by the child

    def get(self) -> ConnectionPool[Any]:
        """This process's pool, made on first use: the database is migrated first, and a
        pool inherited through fork() is set aside (its sockets are the parent's)."""
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            if self._pool is not None:  # inherited through fork(): its sockets are the parent's
                self._inherited.append(self._pool)
                self._pool = None
            psycopg, psycopg_pool = import_psycopg()
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                    self.migrated_from = migrate(conn, self.path)
            except psycopg.Error as exc:
                raise StoreOpenError(open_message(self.path, exc)) from exc
            _quick_reconnects(psycopg_pool)
            pool = psycopg_pool.ConnectionPool(
                self.url, min_size=1, max_size=self.pool_size, open=False, timeout=POOL_TIMEOUT_S,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S}, name="aromcp-workflows",
            )
            pool.open(wait=False)
            self._pool, self._pid = pool, os.getpid()
            return pool

    @contextmanager
    def connection(self, action: str) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; database failures become a StoreError naming the store."""
        pool = self.get()
        psycopg, psycopg_pool = import_psycopg()
        try:
            with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise StoreError(
                f"Could not {action} the workflow store {self.path}: no connection within "
                f"{POOL_TIMEOUT_S:g}s ({one_line(exc)}); check that PostgreSQL is up, or raise "
                f"{POOL_ENV_VAR} if the server is busy."
            ) from exc
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError):
                pool.check()  # PostgreSQL restarted? drop the other dead idle connections now
            raise StoreError(
                f"Could not {action} the workflow store {self.path}: {one_line(exc)}; check that "
                "PostgreSQL is up and reachable, then retry."
            ) from exc

    def fetch(self, action: str, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one read.  A connection the server dropped (PostgreSQL restarted) is
        replaced and the read sent again until PostgreSQL answers: reads are safe to repeat."""
        deadline = time.monotonic() + RECONNECT_PATIENCE_S
        attempt = 0
        while True:
            try:
                with self.connection(action) as conn:
                    return conn.execute(sql, params).fetchall()
            except StoreError as exc:
                if not _broken(exc) or time.monotonic() >= deadline:
                    raise
            _pause(attempt)
            attempt += 1

    def write_once(self, action: str, attempt: Callable[[psycopg.Connection[Any]], T],
                    outcome: Callable[[], Committed[T] | None], lost: BaseException | None = None) -> T:
        """Run a write exactly once.  When its connection breaks, the write may have been
        committed or not: `outcome` (a read, which waits for PostgreSQL) tells which —
        committed, with what the write returned; or not, and it is sent again.  `lost`: the
        write was sent already and its connection broke with this error (find out first)."""
        deadline = time.monotonic() + RECONNECT_PATIENCE_S
        while True:
            if lost is None:
                try:
                    with self.connection(action) as conn:
                        return attempt(conn)
                except StoreError as exc:
                    if not _broken(exc) or time.monotonic() >= deadline:
                        raise
                    lost = exc
            done = self._found_out(outcome, lost)
            log.warning("PostgreSQL connection lost while trying to %s %s: the write was %s", action, self.path,
                        "committed" if done is not None else "not committed; sending it again")
            if done is not None:
                return done.value
            lost = None

    def _found_out(self, outcome: Callable[[], Committed[T] | None], lost: BaseException) -> Committed[T] | None:
        """`outcome()`, or why it cannot be known (PostgreSQL did not come back in time)."""
        try:
            return outcome()
        except (NotFoundError, ConflictError, OutcomeUnknownError):
            raise
        except StoreError as exc:
            raise OutcomeUnknownError(
                f"The connection to the workflow store {self.path} broke while this change was being "
                f"saved ({one_line(lost.__cause__ or lost)}), and PostgreSQL did not answer again within "
                f"{RECONNECT_PATIENCE_S:g}s ({exc}): whether the change was saved is unknown. Check "
                "that PostgreSQL is up, look at the instance, then retry.") from exc

    def close(self) -> None:
        """Close this process's pool; idempotent (a later call opens a new one)."""
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None


@dataclass(frozen=True)
class Committed(Generic[T]):
    """A write found committed after its connection broke, with what the write returns."""

    value: T


def new_token() -> str:
    """The random token a write leaves on what it writes (see the module's docstring)."""
    return secrets.token_hex(8)


def _broken(exc: StoreError) -> bool:
    """Whether a store error is a lost or refused connection (PostgreSQL restarting, say),
    after which the same request may succeed; not a refusal of the request itself."""
    psycopg, _ = import_psycopg()
    return isinstance(exc.__cause__, psycopg.OperationalError)


def _quick_reconnects(psycopg_pool: Any) -> None:
    """The pool tries to reconnect 1, 2, 4, 8 … s after losing PostgreSQL; after a restart of
    a second or two a replica could then wait for several seconds more — past the lease of
    the commands it runs, which another replica would then run again.  Start at 0.1 s and
    grow by half: a replica is back within about half a second of PostgreSQL."""
    attempt = psycopg_pool.base.AttemptWithBackoff
    attempt.INITIAL_DELAY, attempt.DELAY_BACKOFF = 0.1, 1.5


def _pause(attempt: int) -> None:
    time.sleep(RETRY_PAUSES_S[attempt] if attempt < len(RETRY_PAUSES_S) else 1.0)
