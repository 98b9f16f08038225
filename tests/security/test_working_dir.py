"""`working_dir` of an agent-side shell command is where the command runs.

The attack (a data loss, no attacker needed): `rm -rf ./*` with `working_dir: build`.  The
field validated and was documented, but the atomic step dropped it, the agent was told to
run the command "in the project root", and `aromcp-workflows run` did exactly that: the
project was emptied instead of `build/`.  Now the atomic step's definition carries
`working_dir` (absolute: the project root, or the step's directory inside it), the runner
runs the command there, and a directory that escapes the project or does not exist fails
the step before anything runs — for server-side `shell_command` steps too.  `run
--resume ID` runs agent steps in the instance's own project, wherever it is started.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lead_helpers import ok, project_with, server_for
from mcp import Client

from aromcp_workflows.app.service import WorkflowService

AGENT_SHELL = """
name: clean
description: "clean the build directory"
version: "1.0.0"
inputs:
  dir: {{type: string, default: "build"}}
steps:
  - id: wipe
    type: agent_shell_command
    command: "{command}"
    working_dir: "{working_dir}"
  - type: user_message
    message: "cleaned"
"""

SERVER_SHELL = """
name: here
description: "a server-side command in a directory"
version: "1.0.0"
inputs:
  dir: {{type: string, default: "build"}}
steps:
  - id: where
    type: shell_command
    command: "touch made-here && pwd"
    working_dir: "{working_dir}"
    state_update: {{path: raw.where}}
"""


def a_project(root: Path, workflows: dict[str, str]) -> Path:
    project = project_with(root, workflows)
    (project / "build").mkdir()
    (project / "build" / "out.o").write_text("object")
    (project / "src.c").write_text("int main(void) { return 0; }")
    return project


def service_for(project: Path, tmp_path: Path) -> WorkflowService:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home)


async def next_step(service: WorkflowService, workflow: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    async with Client(server_for(service)) as client:
        wid = (await ok(client, "workflow_start", {"workflow": workflow, "inputs": inputs or {}}))["workflow_id"]
        return await ok(client, "workflow_get_next_step", {"workflow_id": wid})


async def test_the_atomic_step_carries_the_directory(tmp_path: Path) -> None:
    project = a_project(tmp_path / "p", {"clean": AGENT_SHELL.format(command="rm -rf ./*", working_dir="build"),
                                         "plain": AGENT_SHELL.format(command="ls", working_dir=".")})
    service = service_for(project, tmp_path)
    answer = await next_step(service, "clean")
    assert answer["step"]["definition"]["working_dir"] == str((project / "build").resolve())
    assert "working_dir" in answer["step"]["instructions"]
    assert "project root" not in answer["step"]["instructions"]
    plain = await next_step(service, "plain")
    assert plain["step"]["definition"]["working_dir"] == str(project.resolve())


@pytest.mark.parametrize(("working_dir", "problem"), [
    ("../outside", "outside the project"),
    ("/tmp", "outside the project"),
    ("linked", "outside the project"),  # a symbolic link out of the project
    ("missing", "does not exist"),
    ("src.c", "not a directory"),
    ("{{ inputs.dir }}", "outside the project"),  # a value, rendered: ../outside
])
async def test_a_directory_outside_the_project_or_missing_fails_the_step(tmp_path: Path, working_dir: str,
                                                                          problem: str) -> None:
    marker = tmp_path / "ran"
    project = a_project(tmp_path / "p", {"clean": AGENT_SHELL.format(command=f"touch {marker}",
                                                                     working_dir=working_dir),
                                         "here": SERVER_SHELL.format(working_dir=working_dir)})
    (tmp_path / "outside").mkdir()
    (project / "linked").symlink_to(tmp_path / "outside")
    service = service_for(project, tmp_path)
    inputs = {"dir": "../outside"}
    agent = await next_step(service, "clean", inputs)
    assert agent["step"] is None and agent["status"] == "failed", agent
    assert problem in agent["error"] and "working_dir" in agent["error"], agent["error"]
    server = await next_step(service, "here", inputs)
    assert server["status"] == "failed" and problem in server["error"], server
    assert not (tmp_path / "outside" / "made-here").exists() and not marker.exists(), "nothing ran"


def test_an_imported_workflows_working_directory_reaches_the_agent(tmp_path: Path) -> None:
    from aromcp_workflows.importer.translate import translate_text

    original = """
name: "imp:where"
description: "AroMCP client shell with a working directory"
version: "1.0.0"
steps:
  - id: "list"
    type: "shell_command"
    execution_context: "client"
    command: "ls"
    working_directory: "build"
"""
    translated = translate_text(original, "imp:where.yaml")
    assert translated.ok and translated.text is not None, translated.lines()
    project = a_project(tmp_path / "p", {"imp:where": translated.text})
    answer = asyncio.run(next_step(service_for(project, tmp_path), "imp:where"))
    assert answer["step"]["type"] == "agent_shell_command"
    assert answer["step"]["definition"]["working_dir"] == str((project / "build").resolve())


@pytest.mark.slow  # the runner starts a server subprocess
def test_the_runner_runs_rm_rf_in_the_steps_directory_only(tmp_path: Path) -> None:
    from aromcp_workflows.runner.run import run_workflow

    project = a_project(tmp_path / "p", {"clean": AGENT_SHELL.format(command="rm -rf ./*", working_dir="build")})
    with open(os.devnull, "w") as quiet:
        outcome = asyncio.run(run_workflow("clean", {}, {}, project, tmp_path / "s.sqlite3", quiet))
    assert outcome.status == "completed", outcome.error
    assert (project / "src.c").exists() and (project / ".aromcp").exists(), "the project was emptied"
    assert (project / "build").is_dir() and list((project / "build").iterdir()) == []


@pytest.mark.slow  # `aromcp-workflows run --resume` starts a server subprocess
def test_resume_runs_agent_steps_in_the_instances_own_project(tmp_path: Path) -> None:
    where = """
name: where
description: "an agent command that records where it ran"
version: "1.0.0"
steps:
  - id: first
    type: agent_prompt
    prompt: "anything"
  - id: pwd
    type: agent_shell_command
    command: "pwd > ran-here.txt"
"""
    project = a_project(tmp_path / "p", {"where": where})
    store = tmp_path / "s.sqlite3"
    home = tmp_path / "home"
    home.mkdir()
    service = WorkflowService(project_dir=project, store_path=store, home=home)
    workflow_id = service.start("where").workflow_id
    service.next_step(workflow_id)
    service.step_complete(workflow_id, "first", result="done")  # as a client that stopped here would leave it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(HOME=str(home), AROMCP_WORKFLOWS_STORE=str(store))
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "run", "--resume", workflow_id], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (project / "ran-here.txt").read_text().strip() == str(project.resolve())
    assert not (elsewhere / "ran-here.txt").exists()
