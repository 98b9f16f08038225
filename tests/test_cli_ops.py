"""The serve/run/status/install commands as a user types them (real subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cli(project: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home), "AROMCP_WORKFLOWS_STORE": str(home / "store.sqlite3")}
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    home.mkdir()
    (project / ".aromcp" / "workflows" / "hello.yaml").write_text(
        'name: hello\nsteps:\n  - type: user_message\n    message: "hi {{ inputs.who }}"\n'
        'inputs:\n  who: {type: string, default: you}\n')
    return project, home


def test_install_claude_writes_config_and_is_idempotent(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    first = cli(project, home, "install", "claude")
    assert first.returncode == 0, first.stderr
    config = json.loads((project / ".mcp.json").read_text())
    server = config["mcpServers"]["aromcp-workflows"]
    assert server["type"] == "stdio" and "serve" in server["args"]
    command = (project / ".claude" / "commands" / "workflow.md").read_text()
    assert "$ARGUMENTS" in command
    second = cli(project, home, "install", "claude")
    assert second.returncode == 0 and "unchanged" in second.stdout
    (project / ".mcp.json").write_text("{ not json")
    broken = cli(project, home, "install", "claude")
    assert broken.returncode == 1 and ".mcp.json" in broken.stderr
    assert (project / ".mcp.json").read_text() == "{ not json"  # never overwritten


def test_run_then_status_lists_the_instance(dirs: tuple[Path, Path]) -> None:
    project, home = dirs
    ran = cli(project, home, "run", "hello", "--input", "who=ada")
    assert ran.returncode == 0, ran.stderr
    assert "hi ada" in ran.stdout
    listed = cli(project, home, "status", "--json")
    rows = json.loads(listed.stdout)["instances"]
    assert len(rows) == 1 and rows[0]["workflow"] == "hello" and rows[0]["status"] == "completed"
    one = cli(project, home, "status", rows[0]["workflow_id"])
    assert one.returncode == 0 and "completed" in one.stdout
    unknown = cli(project, home, "status", "wf_nope")
    assert unknown.returncode == 1 and "wf_nope" in unknown.stderr


@pytest.mark.parametrize("command", ["serve", "run", "status", "install", "explain", "graph", "trace", "debug"])
def test_every_command_has_help(dirs: tuple[Path, Path], command: str) -> None:
    project, home = dirs
    shown = cli(project, home, command, "--help")
    assert shown.returncode == 0 and "usage:" in shown.stdout
