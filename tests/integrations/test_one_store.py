"""Claude Code's server and the command line use one default store: a run started through
the server started as the plugin starts it (plugin/.mcp.json names no store) is what
`aromcp-workflows status` lists.  When a store is named, both say which: the server's
`workflow_status` answers with `store`, `status` and `ui` print a `store:` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]
PLUGIN_SERVER = json.loads((REPO / "plugin" / ".mcp.json").read_text())["mcpServers"]["workflows"]

pytestmark = pytest.mark.slow  # server and CLI subprocesses


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A user with nothing set: the default store lives in their data directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AROMCP_", "XDG_"))}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"), PYTHONPATH=str(REPO), **extra)
    env.update(PLUGIN_SERVER.get("env", {}))  # what the plugin's .mcp.json adds (no store)
    return env


def project_in(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "ask.yaml").write_text(
        'name: ask\nsteps:\n  - {id: q, type: agent_prompt, prompt: "go"}\n')
    return project


async def started_through_the_server(project: Path, env: dict[str, str]) -> tuple[str, dict[str, object]]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "aromcp_workflows", "serve"], env=env,
                                   cwd=str(project))
    async with Client(stdio_client(params)) as client:
        started = await client.call_tool("workflow_start", {"workflow": "ask"})
        listed = await client.call_tool("workflow_status", {})
    return str(started.structured_content["workflow_id"]), dict(listed.structured_content)


def status(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "status", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


async def test_the_plugins_server_and_the_cli_share_the_default_store(tmp_path: Path):
    project, env = project_in(tmp_path), environment(tmp_path)
    workflow_id, listed = await started_through_the_server(project, env)
    assert "store" not in listed  # the default store is not named
    shown = status(project, env)
    assert shown.returncode == 0 and shown.stdout.split()[0] == workflow_id, shown.stdout + shown.stderr
    assert "store:" not in shown.stdout
    assert (tmp_path / "data" / "aromcp-workflows" / "workflows.sqlite3").is_file()


async def test_a_named_store_is_said_by_the_server_and_the_cli(tmp_path: Path):
    project, store = project_in(tmp_path), tmp_path / "elsewhere.sqlite3"
    env = environment(tmp_path, AROMCP_WORKFLOWS_STORE=str(store))
    workflow_id, listed = await started_through_the_server(project, env)
    assert listed["store"] == str(store)
    shown = status(project, env)
    assert shown.stdout.splitlines()[:2] == [f"store: {store}", shown.stdout.splitlines()[1]]
    assert workflow_id in shown.stdout
    assert json.loads(status(project, env, "--json").stdout)["store"] == str(store)
    by_flag = status(project, environment(tmp_path), "--store", str(store))
    assert by_flag.stdout.splitlines()[0] == f"store: {store}" and workflow_id in by_flag.stdout
    default = status(project, environment(tmp_path))  # the default store: not this run's
    assert default.stdout.strip() == f"No workflow instances for {project}."

    ui = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "ui", "--port", "0"], cwd=project, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert ui.stdout is not None
        assert ui.stdout.readline().startswith("aromcp-workflows web view (read-only) at http://127.0.0.1:")
        assert ui.stdout.readline().strip() == f"store: {store}"
    finally:
        ui.terminate()
        ui.wait(timeout=30)
