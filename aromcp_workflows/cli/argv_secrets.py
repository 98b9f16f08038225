"""Keeping a store password out of the process's command line.

Every local user can read every process's arguments (`/proc/PID/cmdline`, `ps -ef`), for as
long as the process runs.  `aromcp-workflows serve --store postgresql://user:PASSWORD@…` would
publish the password for the server's whole life.  So before anything else, a command whose
`--store` carries a password starts itself again — `exec`: the same process id, the same
stdin and stdout (a client's pipes keep working) — with the URL in `AROMCP_WORKFLOWS_STORE`,
which only the process's owner can read (`/proc/PID/environ` is mode 0400), and without the
option.  It costs one interpreter start, only when a password was given.

The URL still sat in the command line for the moment before the `exec`; docs/deploy.md says
how to give none at all (the variable, or libpq's `~/.pgpass`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

ENV_VAR = "AROMCP_WORKFLOWS_STORE"  # store.ENV_VAR, without importing the store package here
OPTION = "--store"


def without_store_password(args: Sequence[str]) -> tuple[list[str], str] | None:
    """(the arguments without `--store`, its URL) when a `--store` URL holds a password, else None.

    Every spelling argparse accepts is recognised: `--store URL`, `--store=URL`, and an
    unambiguous prefix such as `--sto URL`.  With several, the last one counts (as in argparse)."""
    kept: list[str] = []
    url: str | None = None
    index = 0
    while index < len(args):
        name, equals, value = args[index].partition("=")
        if len(name) >= 3 and OPTION.startswith(name) and (equals or index + 1 < len(args)):
            url = value if equals else args[index + 1]
            index += 1 if equals else 2
            continue
        kept.append(args[index])
        index += 1
    if url is None or not url.startswith(("postgresql://", "postgres://")):
        return None
    from aromcp_workflows.store import has_password  # the store package, only for a URL

    return (kept, url) if has_password(url) else None


def restart_without_store_password(argv: Sequence[str] | None = None, orig_argv: Sequence[str] | None = None,
                                   environ: Mapping[str, str] | None = None) -> None:
    """Exec this command again with the store URL in the environment, when `--store` holds a
    password; return (doing nothing) otherwise.  On a failed exec, say so and go on."""
    argv = list(sys.argv if argv is None else argv)
    orig_argv = list(sys.orig_argv if orig_argv is None else orig_argv)
    found = without_store_password(argv[1:])
    if found is None:
        return
    kept, url = found
    launcher = orig_argv[:len(orig_argv) - len(argv) + 1]  # the interpreter, its options, the script or -m module
    command = [sys.executable, *launcher[1:], *kept]
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, command, {**(os.environ if environ is None else environ), ENV_VAR: url})
    except OSError as exc:
        print(f"aromcp-workflows: could not restart without the store password in the command line ({exc}); "
              f"it stays visible to local users in `ps`. Give the URL in {ENV_VAR} instead.", file=sys.stderr)
