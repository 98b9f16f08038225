"""A `state_update.value` template that throws is a step failure: `on_error` applies, and
the command before it does not run again.

Before the fix the tool answered "internal error", `on_error` was ignored, and every later
`workflow_get_next_step` ran the shell command again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lead_helpers import ok, project_with, server_for, service_for
from mcp import Client

WORKFLOW = """
name: NAME
default_state:
  raw: {kept: null}
steps:
  - id: run_it
    type: shell_command
    command: "echo ran >> runs.log && echo '{\\"a\\": 1}'"
    output_format: json
    on_error: ON_ERROR
    fallback_value: fell-back
    state_update:
      path: raw.kept
      value: "{{ result.output.missing.deeper }}"
  - type: user_message
    message: "kept={{ kept }}"
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[object, Path]:
    project = project_with(tmp_path / "p", {
        "throws": WORKFLOW.replace("NAME", "throws").replace("ON_ERROR", "fail"),
        "throws-continue": WORKFLOW.replace("NAME", "throws-continue").replace("ON_ERROR", "continue"),
    })
    (tmp_path / "h").mkdir()
    return server_for(service_for(project, tmp_path / "s.sqlite3", tmp_path / "h")), project


async def test_throwing_value_fails_the_step_once(setup: tuple[object, Path]) -> None:
    server, project = setup
    async with Client(server, mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "throws"}))["workflow_id"]
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["status"] == "failed"
        assert "run_it" in answer["error"] and "could not store the result" in answer["error"]
        assert "deeper" in answer["error"]
        for _ in range(3):
            assert (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["status"] == "failed"
    assert (project / "runs.log").read_text().splitlines() == ["ran"]


async def test_throwing_value_obeys_on_error_continue(setup: tuple[object, Path]) -> None:
    server, project = setup
    async with Client(server, mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "throws-continue"}))["workflow_id"]
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["status"] == "completed"
        assert answer["messages"] == ["kept=fell-back"]
    assert (project / "runs.log").read_text().splitlines() == ["ran"]


COMMAND_THROWS = """
name: NAME
default_state:
  raw: {kept: null}
steps:
  - id: build_it
    type: shell_command
    command: "echo {{ nothing.here.at_all }}"
    on_error: ON_ERROR
    fallback_value: fell-back
    state_update: {path: raw.kept}
  - type: user_message
    message: "kept={{ kept }}"
"""


@pytest.mark.parametrize(("on_error", "status", "messages"), [("continue", "completed", ["kept=fell-back"]),
                                                              ("fail", "failed", [])])
async def test_a_command_that_cannot_be_built_obeys_on_error(tmp_path: Path, on_error: str, status: str,
                                                             messages: list[str]) -> None:
    project = project_with(tmp_path / "p", {"cmd": COMMAND_THROWS.replace("NAME", "cmd").replace("ON_ERROR", on_error)})
    (tmp_path / "h").mkdir()
    server = server_for(service_for(project, tmp_path / "s.sqlite3", tmp_path / "h"))
    async with Client(server, mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "cmd"}))["workflow_id"]
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert answer["status"] == status and answer["messages"] == messages
        if status == "failed":
            assert "build_it" in answer["error"] and "could not be built" in answer["error"]
