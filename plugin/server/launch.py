#!/usr/bin/env python3
"""Start the aromcp-workflows MCP server for the Claude Code plugin (stdio).

Claude Code runs ``python3 ${CLAUDE_PLUGIN_ROOT}/server/launch.py``. This file makes sure of
a Python 3.11 or newer (an older ``python3`` looks for ``python3.14`` … ``python3.11`` on
PATH and hands over to it), then ``venvs.py`` does the rest: the plugin version's venv,
made on the first start while ``proxy.py`` answers the client, then the server itself.

Written for any Python 3 (no annotations, f-strings or library newer than 3.0), so that an
old ``python3`` — RHEL 8's is 3.6 — gets as far as saying what it needs. stdout is the MCP
channel: everything here goes to stderr. Options: ``--prepare`` installs and exits; any
other argument is passed to ``serve``.
"""

import os
import shutil
import sys

MIN_PYTHON = (3, 11)
CANDIDATES = ("python3.14", "python3.13", "python3.12", "python3.11")


def say(text):  # type: (str) -> None
    try:
        sys.stderr.write("aromcp-workflows plugin: " + text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def newer_python():  # type: () -> str | None
    """A Python >= 3.11 on PATH, for when `python3` itself is older."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def main(argv):  # type: (list[str]) -> int
    if sys.version_info < MIN_PYTHON:
        other = newer_python()
        if other is None:
            say("needs Python 3.11 or newer; " + sys.executable + " is " + sys.version.split()[0] + ". Install "
                "Python 3.11+ (python3.11 on PATH is enough) and restart the server with /mcp.")
            return 1
        os.execv(other, [other, os.path.abspath(__file__)] + argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import venvs  # beside this file; Python 3.11+ from here on

    return venvs.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
