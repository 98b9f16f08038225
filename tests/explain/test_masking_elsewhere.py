"""Secrets outside traces and debug output: a failure message (status) and the headless
runner's final state, both of which once printed a secret the masker knew about."""

from __future__ import annotations

from typing import Any

import pytest
from explain_helpers import Project
from test_cli_real_store import cli
from test_inspect import TOKEN

LEAKY = """
name: "test:leaky"
inputs:
  api_token: {type: string, required: true}
steps:
  - id: boom
    type: shell_command
    command: "echo 'auth failed for {{ inputs.api_token }}' >&2; exit 4"
"""


@pytest.fixture
def failed(project: Project, service: Any) -> str:
    project.put("test:leaky", LEAKY)
    workflow_id = service.start("test:leaky", {"api_token": TOKEN}).workflow_id
    assert service.next_step(workflow_id).status == "failed"
    return str(workflow_id)


def test_debug_masks_a_secret_in_the_failure_message(service: Any, failed: str) -> None:
    info = service.debug_info(failed).model_dump()
    assert info["error"] == "step boom failed: command exited with code 4: auth failed for ***"
    assert TOKEN not in str(info)


def test_status_masks_a_secret_in_the_failure_message(service: Any, failed: str) -> None:
    assert TOKEN not in str(service.status(failed))


def test_runner_final_state_masks_secrets(project: Project) -> None:
    project.put("test:echo", """
        name: "test:echo"
        inputs:
          api_token: {type: string, required: true}
        steps:
          - type: user_message
            message: "hello"
        """)
    done = cli(project, "run", "test:echo", "--input", f"api_token={TOKEN}", "--store", str(project.store))
    assert done.returncode == 0, done.stderr[-500:]
    assert TOKEN not in done.stdout + done.stderr
