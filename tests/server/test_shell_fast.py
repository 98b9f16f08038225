"""Through the real server: a shell step dash may run and one that needs bash both give bash's
results, with the fast path on (default) and off (`AROMCP_SHELL_FAST=off`)."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from srv_helpers import make_project, ok

from aromcp_workflows.shell.dialect import posix_words, sh_path

SHELLS = """
name: shells
description: "One command inside the sh subset, two that need bash"
version: "1.0.0"
steps:
  - id: plain
    type: shell_command
    command: "echo \\"hi $?\\"; ls missing-file 2>&1 | wc -l; exit 0"
    state_update:
      path: raw.plain
  - id: test_bracket
    type: shell_command
    command: "[[ 1 == 1 ]] && echo yes"
    state_update:
      path: raw.brackets
  - id: version
    type: shell_command
    command: "echo ${BASH_VERSION:+bash}"
    state_update:
      path: raw.version
  - id: after
    type: agent_prompt
    prompt: "done"
"""


@pytest.fixture
def project(tmp_path: Any) -> Any:
    return make_project(tmp_path / "project", {"shells": SHELLS})


@pytest.mark.skipif(sh_path() is None, reason="/bin/sh is not dash")
@pytest.mark.parametrize("fast", ["auto", "off"])
async def test_shell_steps_give_bash_results_either_way(server, fast, monkeypatch):
    monkeypatch.setenv("AROMCP_SHELL_FAST", fast)
    assert posix_words("echo \"hi $?\"; ls missing-file 2>&1 | wc -l; exit 0") is not None
    assert posix_words("[[ 1 == 1 ]] && echo yes") is None
    async with Client(server, mode="auto") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "shells"}))["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["id"] == "after"
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
    assert state["plain"] == "hi 0\n1"  # ls's error went through the pipe, not to stderr
    assert state["brackets"] == "yes" and state["version"] == "bash"
