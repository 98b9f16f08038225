"""`aromcp-workflows store migrate`, and the start-up check `serve` runs on a PostgreSQL store.

The server migrates its store by itself on first use; `store migrate` does it explicitly
(before rolling out a new release to replicas, or to check a URL).  Every store problem is
one line on stderr: exit 2 for a value that cannot be a store (an unparsable URL), 1 for a
store that cannot be reached or opened.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aromcp_workflows.errors import KindedError


def register_store_commands(commands: Any) -> None:
    store = commands.add_parser("store", help="manage the instance store (a SQLite file or PostgreSQL)")
    actions = store.add_subparsers(title="store commands", metavar="ACTION")
    migrate = actions.add_parser(
        "migrate", help="create the store's tables, or upgrade them, now",
        description="Create or upgrade the schema of the store (servers also do this when they first use "
                    "it). Prints the schema version before and after.")
    migrate.add_argument("--store", metavar="PATH|URL",
                         help="SQLite file or postgresql://USER@HOST:PORT/DB (default: $AROMCP_WORKFLOWS_STORE "
                              "or the user data directory)")
    migrate.set_defaults(handler=cmd_store_migrate)
    store.set_defaults(handler=lambda args: _usage(store))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def store_error_exit(exc: KindedError) -> int:
    """Print a refusal as one line; the exit code says whose mistake it is (2: a store URL
    that cannot be one, a mistake of the command line)."""
    from aromcp_workflows.cli.common import refused
    from aromcp_workflows.store import StoreURLError

    code = refused(exc)
    return 2 if isinstance(exc, StoreURLError) else code


def cmd_store_migrate(args: argparse.Namespace) -> int:
    from aromcp_workflows.store import StoreError, open_store

    try:
        store = open_store(args.store)
        try:
            before, after = store.migrate()
        finally:
            store.close()
    except StoreError as exc:
        return store_error_exit(exc)
    change = f"migrated from version {before}" if before != after else "already up to date"
    print(f"{store.path}: schema version {after} ({change})")
    return 0


def check_shared_store(store: str | None) -> int | None:
    """Before `serve` starts: connect to a PostgreSQL store once (and migrate it), so a wrong
    URL, a missing database or a refused connection stops the server with one line instead
    of failing every tool call later; a URL of another scheme is refused here too.  A
    SQLite store stays lazy (start-up stays fast)."""
    chosen = store or os.environ.get("AROMCP_WORKFLOWS_STORE", "")  # store.ENV_VAR
    if "://" not in chosen:  # a file: not even the store package is imported (20 ms of start-up)
        return None
    from aromcp_workflows.store import StoreError, open_store

    try:
        opened = open_store(store)
        try:
            opened.open()
        finally:
            opened.close()
    except StoreError as exc:
        return store_error_exit(exc)
    return None
