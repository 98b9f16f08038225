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
from pathlib import Path

from aromcp_workflows.store.base import StoreError, StoreOpenError
from aromcp_workflows.store.schema import migrate

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
        raise StoreOpenError(
            f"Cannot open the workflow store {path_text}: {exc}. If the file is not an "
            "aromcp-workflows store, move it away or choose another location with "
            "--store or AROMCP_WORKFLOWS_STORE; if the directory is read-only, choose a "
            "writable one."
        ) from exc
    return conn, found


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
