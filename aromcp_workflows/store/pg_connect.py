"""Naming and reaching a PostgreSQL store: URL checks, redaction, one-line errors.

Kept apart from `postgres.py` (the store itself) so `open_store` can recognise a URL and
report a bad one without importing psycopg, which is an optional extra.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote

from aromcp_workflows.store.base import StoreOpenError

POOL_ENV_VAR = "AROMCP_WORKFLOWS_STORE_POOL"
DEFAULT_POOL_SIZE = 10
URL_PREFIXES = ("postgresql://", "postgres://")


class StoreURLError(StoreOpenError):
    """The store value cannot name a store at all (a usage error, not an outage)."""


def is_postgres_url(value: object) -> bool:
    """Whether a ``--store`` value names a PostgreSQL database rather than a SQLite file."""
    return isinstance(value, str) and value.startswith(URL_PREFIXES)


# Any scheme: a mistaken one (mysql://user:pw@...) is echoed in the error that refuses it.
_USERINFO_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^:/@?]*):([^@/?]*)@")
_PARAMETER = re.compile(r"([?&])([^=&#]*)=([^&#]*)")


def redact_url(url: str) -> str:
    """The URL as it may appear in messages and logs: any password replaced by ``***``.

    libpq decodes percent-escapes in parameter names too, so `pass%77ord=` is a password."""
    url = _USERINFO_PASSWORD.sub(r"\1:***@", url)
    return _PARAMETER.sub(lambda m: f"{m[1]}{m[2]}=***" if _is_password(m[2]) else m[0], url)


def has_password(url: str) -> bool:
    """Whether the URL carries a password (in its user part or as a parameter)."""
    found = _USERINFO_PASSWORD.match(url)
    return bool(found and found[2]) or any(_is_password(m[2]) and m[3] for m in _PARAMETER.finditer(url))


def _is_password(name: str) -> bool:
    return unquote(name).strip().lower() == "password"


def one_line(exc: BaseException) -> str:
    """libpq's messages span lines (``…failed: Connection refused\\n\\tIs the server…``)."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__


def import_psycopg() -> Any:
    """The psycopg modules, or a one-line StoreOpenError saying which extra to install."""
    try:
        import psycopg
        import psycopg.conninfo
        import psycopg_pool
    except ImportError as exc:
        raise StoreOpenError(
            f"A postgresql:// store needs psycopg, which is not installed ({exc.name} is missing). "
            "Install the extra: pip install 'aromcp-workflows[postgres]'."
        ) from None
    return psycopg, psycopg_pool


def pool_size_from_env() -> int:
    raw = os.environ.get(POOL_ENV_VAR, "")
    if not raw:
        return DEFAULT_POOL_SIZE
    if not raw.isdigit() or int(raw) < 1:
        raise StoreURLError(f"{POOL_ENV_VAR}={raw!r} is not understood: give a whole number of connections, >= 1.")
    return int(raw)


def open_message(where: str, exc: BaseException) -> str:
    """The one line a user sees when the store cannot be opened: what failed and the fix."""
    text = one_line(exc)
    # libpq's text is the only handle on a connection that failed before any SQLSTATE: one of
    # the two messages of another library this package reads (the other: shell/runner.py)
    if "does not exist" in text and "database" in text:
        todo = "create it (createdb, or CREATE DATABASE) or fix the database name in the URL"
    elif "refused" in text or "No such file" in text or "timeout" in text or "could not translate" in text:
        todo = "start PostgreSQL, or fix the host, port or ?host=/socket/dir in the URL"
    else:
        todo = "check the URL (postgresql://USER@HOST:PORT/DB), the user and its permissions"
    return (f"Cannot open the workflow store {where}: {text}. Fix: {todo} "
            "(--store or AROMCP_WORKFLOWS_STORE).")
