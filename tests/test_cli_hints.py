"""Errors say what to do next in the words of the surface that shows them: the command line
names its commands (`aromcp-workflows status`), the MCP tools name tools
(`workflow_status`).  The service's errors are shared by both; each carries its hint as a
kind (`instances.errors.Hint`) that the surface words, never a text matched afterwards.

And `run` refuses what its server would refuse at once — an unknown workflow or
instance, missing or mistyped inputs, an unknown checkpoint — before it starts a server."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from aromcp_workflows.instances.errors import Hint, ServiceError
from tests.e2e.e2e_helpers import ROOT

TOOLS = re.compile(r"\bworkflow_(list|get_info|start|get_next_step|step_complete|state_\w+|checkpoint|resume|"
                   r"complete|status|load_definition|trace_transformations|debug_info|test_transformation|"
                   r"explain_plan|validate)\b")
WORKFLOW = """\
name: needs
inputs:
  count: {type: integer, required: true}
default_state: {raw: {n: 0}}
state_schema:
  computed:
    doubled: {from: raw.n, transform: "input * 2"}
steps:
  - {id: ask, type: agent_prompt, prompt: "count is {{ inputs.count }}"}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "needs.yaml").write_text(WORKFLOW)
    return tmp_path / "project"


def cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = project.parent / "home"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}, "HOME": str(home),
           "AROMCP_WORKFLOWS_STORE": str(project.parent / "store.sqlite3"), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), *args],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def started(project: Path) -> str:
    from aromcp_workflows.app.service import WorkflowService

    service = WorkflowService(project_dir=project, store_path=project.parent / "store.sqlite3",
                              home=project.parent / "home")
    workflow_id = service.start("needs", {"count": 2}).workflow_id
    service.next_step(workflow_id)
    return workflow_id


def test_a_hint_is_worded_by_the_surface():
    error = ServiceError("invalid inputs for fan: input 'n' is required (integer)", hint=Hint.DECLARED_INPUTS,
                         subject="fan")
    assert str(error) == error.said("mcp") == ("invalid inputs for fan: input 'n' is required (integer); "
                                               "workflow_get_info shows the declared inputs.")
    assert error.said("cli") == ("invalid inputs for fan: input 'n' is required (integer); "
                                 "`aromcp-workflows info fan` shows the declared inputs.")
    assert ServiceError("plain.").said("cli") == "plain."
    for hint in Hint:  # every hint has both wordings, and the command line's names no tool
        assert TOOLS.search(hint.say("mcp", "x")) and not TOOLS.search(hint.say("cli", "x")), hint


@pytest.mark.slow
@pytest.mark.parametrize("args,expected", [
    (("status", "wf_nope"), "`aromcp-workflows status` lists the instances"),
    (("cancel", "wf_nope"), "`aromcp-workflows status` lists the instances"),
    (("debug", "wf_nope"), "`aromcp-workflows status` lists the instances"),
    (("retry", "wf_nope"), "`aromcp-workflows status` lists the instances"),
    (("run", "needs"), "`aromcp-workflows info needs` shows the declared inputs"),
    (("run", "needs", "--input", "count=many"), "`aromcp-workflows info needs` shows the declared inputs"),
    (("run", "--resume", "wf_nope"), "`aromcp-workflows status` lists the instances"),
    (("explain", "needs", "--input", "count=x"), "`aromcp-workflows info needs` shows the declared inputs"),
])
def test_command_line_errors_name_commands_not_tools(project: Path, args: tuple[str, ...], expected: str):
    done = cli(project, *args)
    assert done.returncode != 0
    assert expected in done.stderr + done.stdout, done.stderr + done.stdout
    assert not TOOLS.search(done.stderr + done.stdout), done.stderr + done.stdout


@pytest.mark.slow
def test_errors_about_an_instance_name_commands_too(project: Path):
    workflow_id = started(project)
    resumed = cli(project, "run", "--resume", workflow_id, "--checkpoint", "cp-9")
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert f"`aromcp-workflows run --resume {workflow_id}` without --checkpoint" in resumed.stdout
    forked = cli(project, "fork", workflow_id, "--set", "computed.doubled=3")
    assert forked.returncode == 1 and "the field's `from` in the workflow file names it" in forked.stderr
    assert not TOOLS.search(resumed.stdout + resumed.stderr + forked.stderr)


async def test_the_mcp_tools_still_name_tools(project: Path):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    service = WorkflowService(project_dir=project, store_path=project.parent / "s.sqlite3", home=project.parent)
    async with Client(build_server(lambda: service)) as client:
        missing = await client.call_tool("workflow_status", {"workflow_id": "wf_nope"})
        bad = await client.call_tool("workflow_start", {"workflow": "needs"})
    assert missing.is_error and "workflow_status without an id lists the instances" in missing.content[0].text
    assert bad.is_error and "workflow_get_info shows the declared inputs" in bad.content[0].text


@pytest.mark.parametrize("given,resume", [({}, None), ({"count": "many"}, None), ({"count": "2"}, "wf_nope")])
def test_run_refuses_before_it_starts_a_server(project: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str], given: dict[str, str],
                                               resume: str | None):
    from aromcp_workflows.runner import run

    def no_server(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a server was started for a run that is refused")

    monkeypatch.setattr(run, "run_workflow", no_server)
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(project.parent / "store.sqlite3"))
    args = argparse.Namespace(workflow=None if resume else "needs", input=[f"{k}={v}" for k, v in given.items()],
                              answers=None, resume=resume, checkpoint=None, project_dir=str(project), store=None,
                              json=True, quiet=False)
    assert run.run_from_cli(args) == 2
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "not_started" and "aromcp-workflows " in outcome["error"]


@pytest.mark.parametrize("command", [("list",), ("status",), ("run", "needs", "-i", "count=1")])
def test_a_project_dir_that_is_not_a_folder_is_a_usage_error(tmp_path: Path, command: tuple[str, ...]):
    """Found by a bad-input probe: `run` exited 1 with "lost the connection to the server", and
    `list` and `status` 0 without a word (and `status` made a store there)."""
    for folder, why in ((tmp_path / "missing", "does not exist"), (tmp_path / "file", "is a file, not a folder")):
        if why.startswith("is a file"):
            folder.write_text("x\n")
        done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(folder), *command],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                              env={**os.environ, "HOME": str(tmp_path / "home"),
                                   "AROMCP_WORKFLOWS_STORE": str(tmp_path / "store.sqlite3")})
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"--project-dir {folder} {why}" in done.stderr
        assert not (tmp_path / "missing").exists() and not (tmp_path / "store.sqlite3").exists()
