"""A stdio server answers the handshake and `tools/list` before it imports what only a tool
call needs: Claude Code starts the server in every session, so each module imported at
start is paid every day (docs/performance.md, "Start-up").

The real CLI runs under `python -X importtime`; what it imported by the time `tools/list`
was answered is read from its stderr.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from srv_helpers import PYTHON, make_project, serve_args, server_env

pytestmark = pytest.mark.slow

NOT_AT_START = (
    "aromcp_workflows.store",  # the store package: opened on the first call that needs it
    "aromcp_workflows.app.service",  # the service: built on first use
    "aromcp_workflows.interpreter",
    "aromcp_workflows.expressions.engine",  # V8: its child starts on first use
    "aromcp_workflows.definition.loader",  # workflow discovery
    "aromcp_workflows.importer.translate",  # the importer (its CLI command registers, light)
)


def imported_at_start(tmp_path: Path, **env: str) -> set[str]:
    project, home, store = make_project(tmp_path / "project"), tmp_path / "home", tmp_path / "s.sqlite3"
    home.mkdir()
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
    ]
    proc = subprocess.Popen([PYTHON, "-X", "importtime", *serve_args(project, store)], cwd=project,
                            env=server_env(home, store, AROMCP_COMMANDS_DIR=str(tmp_path / "commands"), **env),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
        proc.stdin.flush()
        while True:  # the answer to tools/list: everything imported so far was imported at start
            line = proc.stdout.readline()
            assert line, "the server ended before answering tools/list"
            if json.loads(line).get("id") == 2:
                break
    finally:
        _, err = proc.communicate(timeout=30)  # closes stdin: the server ends
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)", err.decode(), re.MULTILINE))


def test_a_stdio_start_imports_nothing_a_tool_call_needs(tmp_path: Path) -> None:
    imported = imported_at_start(tmp_path)
    assert "aromcp_workflows.server.mcp" in imported  # the measurement works
    early = sorted(name for name in NOT_AT_START if name in imported)
    assert early == [], f"imported before the first tool call: {early}"
