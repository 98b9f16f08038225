"""A workflow's commands do not inherit the server's credentials.

The attack (issue 31): every `shell_command` ran with the server's whole environment, so a
workflow could print `AROMCP_HTTP_TOKEN` (the HTTP server's bearer token) or the store
URL with its password, and send them anywhere.  Now every command the server runs, and
every `agent_shell_command` the headless runner performs, gets the environment without
`AROMCP_HTTP_TOKEN`, any `AROMCP_*` variable whose name says it holds a secret, and the
store's password (taken out of the store URL, and any variable holding it dropped).  A
workflow that needs a value declares it in the step's `env:`.

Also (issue 31): `AROMCP_COMMANDS_DIR`, where commands keep their output and exit status,
was used as given; a directory others can write let them plant or read a command's
files.  It now gets the owner and mode checks of the default directory, and a server
refuses to start on one others can write, in one line.

Real shell commands through a real MCP client (in memory) and real server subprocesses.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lead_helpers import ok, project_with, server_for
from mcp import Client

from aromcp_workflows.app.service import WorkflowService

PASSWORD = "pg-Secret-pw-8812"
STORE_URL = f"postgresql://deployer:{PASSWORD}@db.internal:5432/workflows"
HTTP_TOKEN = "http-token-Zx81-0123456789abcdef"
OTHER_SECRET = "aromcp-api-key-Q77"
SERVER_SIDE = """
name: leak
description: "prints its environment"
version: "1.0.0"
steps:
  - id: dump
    type: shell_command
    command: "env"
    env:
      DECLARED: "given-on-purpose"
    state_update: {path: raw.env}
"""
AGENT_SIDE = """
name: leak-agent
description: "asks the agent to print its environment"
version: "1.0.0"
steps:
  - id: dump
    type: agent_shell_command
    command: "env > seen-env.txt"
"""
CREDENTIALS = {"AROMCP_HTTP_TOKEN": HTTP_TOKEN, "AROMCP_WORKFLOWS_STORE": STORE_URL, "PGPASSWORD": PASSWORD,
               "AROMCP_DEPLOY_API_KEY": OTHER_SECRET, "AROMCP_LOG_LEVEL": "WARNING", "UNRELATED": "kept"}


def assert_scrubbed(seen: str) -> None:
    for secret in (HTTP_TOKEN, PASSWORD, OTHER_SECRET):
        assert secret not in seen, f"{secret} reached the command"
    assert "UNRELATED=kept" in seen and "AROMCP_LOG_LEVEL=WARNING" in seen  # the rest is left as it was
    assert "AROMCP_WORKFLOWS_STORE=postgresql://deployer@db.internal:5432/workflows" in seen


async def test_server_side_commands_get_no_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    project = project_with(tmp_path / "p", {"leak": SERVER_SIDE})
    (tmp_path / "home").mkdir()
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path / "home")
    async with Client(server_for(service)) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "leak"}))["workflow_id"]
        done = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert done["status"] == "completed", done
    seen = service.state_read(wid).state["env"]
    assert_scrubbed(seen)
    assert "DECLARED=given-on-purpose" in seen


@pytest.mark.slow  # the runner starts a server subprocess
def test_the_headless_runners_agent_commands_get_no_credential(tmp_path: Path) -> None:
    project = project_with(tmp_path / "p", {"leak-agent": AGENT_SIDE})
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(CREDENTIALS, HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "run",
                           "leak-agent", "--store", str(tmp_path / "s.sqlite3")], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_scrubbed((project / "seen-env.txt").read_text())


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_commands_dir_others_can_write_is_refused_in_one_line(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared-commands"
    shared.mkdir()
    shared.chmod(mode)
    project = project_with(tmp_path / "p", {"leak": SERVER_SIDE})
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(HOME=str(tmp_path), AROMCP_COMMANDS_DIR=str(shared), AROMCP_WORKFLOWS_STORE=str(tmp_path / "s.db"))
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "serve"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "AROMCP_COMMANDS_DIR" in done.stderr and str(shared) in done.stderr and "chmod" in done.stderr


def test_a_commands_dir_of_another_owner_or_a_link_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aromcp_workflows.shell.roots import CommandsDirError, commands_root

    private = tmp_path / "mine"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(private)
    monkeypatch.setenv("AROMCP_COMMANDS_DIR", str(link))
    with pytest.raises(CommandsDirError, match="symbolic link"):
        commands_root()
    if os.geteuid() == 0:
        os.chown(private, 65534, 65534)  # nobody's
        monkeypatch.setenv("AROMCP_COMMANDS_DIR", str(private))
        with pytest.raises(CommandsDirError, match="owned by"):
            commands_root()
    fresh = tmp_path / "made" / "here"
    monkeypatch.setenv("AROMCP_COMMANDS_DIR", str(fresh))
    assert commands_root() == fresh and (fresh.stat().st_mode & 0o777) == 0o700  # made private when missing


def test_a_private_commands_dir_runs_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("AROMCP_COMMANDS_DIR", str(private))
    project = project_with(tmp_path / "p", {"leak": SERVER_SIDE})
    (tmp_path / "home").mkdir()
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path / "home")

    async def run() -> str:
        async with Client(server_for(service)) as client:
            wid = (await ok(client, "workflow_start", {"workflow": "leak"}))["workflow_id"]
            return (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["status"]

    assert asyncio.run(run()) == "completed"


def test_a_credential_set_after_commands_ran_is_still_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The names of this process's environment are looked at again only when they change
    (`safety.names_with_prefix`): one added after earlier commands is seen at the next."""
    from aromcp_workflows.safety import command_environment
    from aromcp_workflows.shell.rundir import needs_subshell

    monkeypatch.delenv("AROMCP_HTTP_TOKEN", raising=False)
    before = command_environment()
    assert before is None or "AROMCP_HTTP_TOKEN" not in before
    assert not needs_subshell("true", os.environ) or any(name.startswith("BASH_FUNC_") for name in os.environ)
    monkeypatch.setenv("AROMCP_HTTP_TOKEN", HTTP_TOKEN)
    monkeypatch.setenv("BASH_FUNC_greet%%", "() {  echo hi\n}")
    after = command_environment()
    assert after is not None and "AROMCP_HTTP_TOKEN" not in after and after["PATH"] == os.environ["PATH"]
    assert needs_subshell("true", os.environ)  # an exported function could replace the status trap
    monkeypatch.delenv("AROMCP_HTTP_TOKEN")
    again = command_environment()
    assert again is None or "AROMCP_HTTP_TOKEN" not in again
