"""Durable workflow instances: where they live and how to open the store.

`open_store()` resolves the location (explicit value > ``AROMCP_WORKFLOWS_STORE`` >
the platform's user data directory) and returns a lazily opened store: a
``postgresql://`` URL selects `PostgresStore` (shared by server replicas), anything else
is a path to a `SqliteStore` file (the embedded default).  No file is created and no
connection made until the first call that needs it, so server start-up stays fast.
Cheap checks that need no file (the path is a directory, its parent is a file) fail
here, at once, with the path and what to do.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from aromcp_workflows.store.base import (
    ConflictError,
    KeyTakenError,
    NotFoundError,
    OutcomeUnknownError,
    SavesLater,
    SentSave,
    Store,
    StoreError,
    StoreOpenError,
    apply_deltas,
    note_caught_up,
)
from aromcp_workflows.store.pg_connect import (
    POOL_ENV_VAR,
    StoreURLError,
    has_password,
    is_postgres_url,
    pool_size_from_env,
    redact_url,
)
from aromcp_workflows.store.postgres import PostgresStore
from aromcp_workflows.store.records import (
    STATUSES,
    Body,
    Checkpoint,
    CommitsSince,
    HistoryEvent,
    InstanceFilter,
    InstanceGroup,
    InstancePage,
    InstanceRecord,
    InstanceSummary,
    StartKey,
    StatusValue,
    utc_now,
)
from aromcp_workflows.store.sqlite import SqliteStore

ENV_VAR = "AROMCP_WORKFLOWS_STORE"
SYNC_ENV_VAR = "AROMCP_WORKFLOWS_STORE_SYNC"
APP_NAME = "aromcp-workflows"
FILE_NAME = "workflows.sqlite3"
_URL_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")

__all__ = [
    "APP_NAME",
    "ENV_VAR",
    "FILE_NAME",
    "POOL_ENV_VAR",
    "STATUSES",
    "SYNC_ENV_VAR",
    "Body",
    "Checkpoint",
    "CommitsSince",
    "ConflictError",
    "HistoryEvent",
    "InstanceFilter",
    "InstanceGroup",
    "InstancePage",
    "InstanceRecord",
    "InstanceSummary",
    "KeyTakenError",
    "NotFoundError",
    "OutcomeUnknownError",
    "PostgresStore",
    "SavesLater",
    "SentSave",
    "SqliteStore",
    "StartKey",
    "StatusValue",
    "Store",
    "StoreError",
    "StoreOpenError",
    "StoreURLError",
    "apply_deltas",
    "default_store_path",
    "has_password",
    "is_postgres_url",
    "is_url",
    "named_store",
    "note_caught_up",
    "open_store",
    "redact_url",
    "resolve_store_path",
    "store_location",
    "utc_now",
]


def default_store_path() -> Path:
    """Where instances live when nothing else is said: the user data dir, per platform.

    Linux ``~/.local/share/aromcp-workflows/workflows.sqlite3`` (honours XDG_DATA_HOME),
    macOS ``~/Library/Application Support/aromcp-workflows/...``, Windows
    ``%LOCALAPPDATA%\\aromcp-workflows\\...``.
    """
    import platformdirs  # imported here: only needed when no path is given

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False)) / FILE_NAME


def resolve_store_path(path: str | os.PathLike[str] | None = None) -> Path:
    """Explicit path > ``AROMCP_WORKFLOWS_STORE`` > `default_store_path()`; ``~`` expanded."""
    if path is not None and str(path) != "":
        chosen = str(path)
    elif os.environ.get(ENV_VAR):
        chosen = os.environ[ENV_VAR]
    else:
        return default_store_path()
    _refuse_other_urls(chosen, "--store" if path else ENV_VAR)
    return Path(chosen).expanduser().absolute()


def is_url(text: str) -> bool:
    """Whether `text` is a URL (`scheme://…`) rather than a file path: a store names a
    PostgreSQL database so, and any other scheme is refused, never taken as a path."""
    return _URL_SCHEME.match(text) is not None


def _refuse_other_urls(chosen: str, source: str) -> None:
    """A URL of another scheme (`mysql://…`, `sqlite:///f`) is a mistake, not a file name:
    taken as a path it would make a store in a folder named `mysql:` of the project."""
    scheme = _URL_SCHEME.match(chosen)
    if scheme is not None and not is_postgres_url(chosen):
        raise StoreURLError(
            f"The workflow store {redact_url(chosen)} ({source}) is a {scheme.group(1)}:// URL; a store is "
            "a SQLite file path or a postgresql://USER@HOST:PORT/DB URL."
            + (f" For a SQLite file, give its path: {chosen[len('sqlite://'):] or 'FILE'}."
               if scheme.group(1).lower() == "sqlite" else "")
        )


def named_store(path: str | os.PathLike[str] | None = None) -> str | None:
    """The location of the store `path` or ``AROMCP_WORKFLOWS_STORE`` names, or None when
    neither does (the default store, in the user data directory, which the CLI and the
    Claude Code plugin's server share): what `status` and `ui` say when a store is named."""
    if (path is None or str(path) == "") and not os.environ.get(ENV_VAR):
        return None
    return store_location(path)


def store_location(path: str | os.PathLike[str] | None = None) -> str:
    """What a store opened from `path` (see `open_store`) gives as its location
    (`Store.path`): the URL with its password masked, or the resolved file."""
    chosen = str(path) if path is not None and str(path) != "" else os.environ.get(ENV_VAR, "")
    if is_postgres_url(chosen):
        from aromcp_workflows.store.pg_connect import redact_url

        return redact_url(chosen)
    return str(resolve_store_path(path))


def open_store(
    path: str | os.PathLike[str] | None = None, *, synchronous: str | None = None
) -> Store:
    """The store at the resolved path (see `resolve_store_path`), opened lazily.

    `synchronous` (else ``AROMCP_WORKFLOWS_STORE_SYNC``, else ``NORMAL``): in WAL mode
    NORMAL makes every commit durable against a killed or crashed server (what the README's
    "Durability and concurrency" promises) without an fsync per commit; FULL also survives power loss or an OS
    crash, at the price of an fsync per save (0.4-3 ms on the machines measured, which
    alone breaks the 1 ms per-step budget; see docs/store-and-claude.md).

    A ``postgresql://USER@HOST:PORT/DB`` URL (also ``?host=/socket/dir``), given or in
    ``AROMCP_WORKFLOWS_STORE``, opens `PostgresStore` instead; `synchronous` does not apply
    to it (PostgreSQL's own ``synchronous_commit`` does, see docs/deploy.md).

    Raises StoreOpenError now if the path obviously cannot hold a store; other problems
    (permissions, a file that is not a database, a refused connection) surface on first
    use, or at once if the caller calls ``.open()`` on the result.
    """
    chosen = str(path) if path is not None and str(path) != "" else os.environ.get(ENV_VAR, "")
    if is_postgres_url(chosen):
        return _open_postgres(chosen)
    resolved = resolve_store_path(path)
    source = "given path" if path else (ENV_VAR if os.environ.get(ENV_VAR) else "default")
    if resolved.is_dir():
        raise StoreOpenError(
            f"The workflow store path {resolved} ({source}) is a directory. Give a file path, "
            f"for example {resolved / FILE_NAME}."
        )
    for parent in resolved.parents:
        if parent.exists():
            if not parent.is_dir():
                raise StoreOpenError(
                    f"The workflow store path {resolved} ({source}) cannot be created: "
                    f"{parent} is a file, not a directory. Choose another location with "
                    f"--store or {ENV_VAR}."
                )
            break
    sync = synchronous or os.environ.get(SYNC_ENV_VAR) or "NORMAL"
    if sync.upper() not in ("FULL", "NORMAL"):
        raise StoreOpenError(
            f"{SYNC_ENV_VAR}={sync!r} is not understood: use NORMAL (default) or FULL."
        )
    return SqliteStore(resolved, synchronous=sync)


def _open_postgres(url: str) -> PostgresStore:
    """A lazily connected `PostgresStore`; a URL libpq cannot parse fails here, in one line."""
    from aromcp_workflows.store.pg_connect import StoreURLError, import_psycopg, one_line, redact_url

    psycopg, _ = import_psycopg()
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise StoreURLError(
            f"The workflow store URL {redact_url(url)} is not understood: {one_line(exc)}. Use "
            "postgresql://USER@HOST:PORT/DB or postgresql://USER@/DB?host=/socket/dir "
            f"(--store or {ENV_VAR})."
        ) from exc
    return PostgresStore(url, pool_size=pool_size_from_env())
