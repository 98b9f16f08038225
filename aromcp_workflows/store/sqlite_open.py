"""Opening a SQLite store file: a private file, WAL, the pragmas, the migrations, clear errors.

`SqliteStore` opens its file lazily, on first use (and again in a forked child); what
opening takes is here, so the store's own module is its reads and writes.  Every way
opening can fail (a directory that cannot be made, a file that is not a store, a
read-only directory, a newer schema) becomes one `StoreOpenError` naming the file and
what to do.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from pathlib import Path

from aromcp_workflows.store.base import StoreError, StoreOpenError
from aromcp_workflows.store.queries import CURRENT_SCHEMA_VERSION, pending_migrations
from aromcp_workflows.store.schema import MIGRATIONS, SCHEMA_VERSION, migrate

BUSY_TIMEOUT_MS = 10_000


def open_file(path_text: str, synchronous: str) -> tuple[sqlite3.Connection, int]:
    """A connection to the store file at `path_text` (made, 0600, when missing) in WAL mode
    with `synchronous` and foreign keys on, its schema migrated; with the schema version
    the file had before (0: a new file)."""
    path = Path(path_text)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StoreOpenError(
            f"Cannot create the directory for the workflow store {path_text}: "
            f"{exc.strerror or exc}. Choose another location with --store or "
            "AROMCP_WORKFLOWS_STORE."
        ) from exc
    try:
        _create_private(path)
    except OSError as exc:
        raise StoreOpenError(
            f"Cannot create the workflow store {path_text}: {exc.strerror or exc}. Choose a "
            "writable location with --store or AROMCP_WORKFLOWS_STORE."
        ) from exc
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(
            path_text, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
            check_same_thread=False,
        )
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        mode = _switch_to_wal(conn)
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"journal_mode WAL refused (got {mode})")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("PRAGMA foreign_keys = ON")
        found = migrate(conn, path_text)
    except StoreError:
        if conn is not None:
            conn.close()
        raise
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        if path.is_file() and not (os.access(path.parent, os.W_OK) and os.access(path, os.W_OK)):
            return open_read_only(path_text)
        raise StoreOpenError(
            f"Cannot open the workflow store {path_text}: {exc}. If the file is not an "
            "aromcp-workflows store, move it away or choose another location with "
            "--store or AROMCP_WORKFLOWS_STORE; if the directory is read-only, choose a "
            "writable one."
        ) from exc
    return conn, found


def open_read_only(path_text: str) -> tuple[sqlite3.Connection, int]:
    """A connection that reads a store that cannot be written (a read-only file system, a
    copy kept from CI): `status`, `trace`, `debug` and `ui` work on it, and a write fails
    with the store's own error.  SQLite reads a WAL file read-only when its `-shm` file
    exists or can be made; else only as an unchanging (`immutable`) file, which would not
    see commits still in a `-wal` file, so one is refused then.  A file of an older schema
    cannot be migrated, so it is refused too, saying so."""
    conn = _connect_read_only(path_text)
    try:
        found = int(conn.execute(CURRENT_SCHEMA_VERSION).fetchone()[0])
        if pending_migrations(MIGRATIONS, found, path_text, "another store file"):
            raise StoreOpenError(
                f"The workflow store {path_text} has schema version {found}, older than this release's "
                f"{SCHEMA_VERSION}, and cannot be written, so it cannot be brought up to date: copy it "
                "somewhere writable and give that path with --store."
            )
    except sqlite3.Error as exc:
        conn.close()
        raise StoreOpenError(f"Cannot read the workflow store {path_text} (it cannot be written): {exc}. If the "
                             "file is not an aromcp-workflows store, choose another with --store.") from exc
    except BaseException:
        conn.close()
        raise
    return conn, found


def _connect_read_only(path_text: str) -> sqlite3.Connection:
    """`mode=ro`, else `immutable=1` when no `-wal` file holds commits it would miss."""
    uri = f"file:{urllib.parse.quote(path_text)}"
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
        conn.execute(CURRENT_SCHEMA_VERSION)
        return conn
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        wal = Path(f"{path_text}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreOpenError(
                f"Cannot read the workflow store {path_text}: it cannot be written, and its last commits are "
                f"still in {wal.name}, which SQLite can read only beside a {Path(path_text).name}-shm file it "
                f"may make ({exc}): copy the store and its -wal file somewhere writable and give that path "
                "with --store."
            ) from exc
    return sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None, check_same_thread=False)


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    """`PRAGMA journal_mode = WAL`, asked again while another connection holds the write lock
    of a file not yet in WAL (it is switching a new store, made at the same moment): SQLite
    answers SQLITE_BUSY there at once instead of waiting for `busy_timeout` (a wait could
    deadlock), so two servers opening one new store together failed.  Within the busy
    timeout, like every other wait for the lock; the mode the file ends up in."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def _create_private(path: Path) -> None:
    """Create a new store file readable by its owner only (0600), whatever the umask.

    Instances hold workflow state (inputs, command output, answers), which is nobody
    else's business on a shared machine.  SQLite gives the ``-wal`` and ``-shm`` files it
    creates later the database file's own permissions, so they are 0600 too.  An
    existing file is left as its owner set it.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o600)  # the umask may have removed bits, never added: this is exact
    finally:
        os.close(fd)
