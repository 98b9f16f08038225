"""A long server-side shell step sends `notifications/progress` to a client that asked.

Real `mcp.Client`, both protocol eras, with a `progress_callback`; the report interval is
shortened through `AROMCP_PROGRESS_INTERVAL` so the test does not wait seconds."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from srv_helpers import make_project, ok

SLOW = """
name: slow
description: "A shell step that takes a while, then a quick one"
version: "1.0.0"
steps:
  - id: build
    type: shell_command
    command: "sleep 1.5; echo built"
  - id: quick
    type: shell_command
    command: "true"
  - id: after
    type: agent_prompt
    prompt: "say done"
"""


@pytest.fixture
def project(tmp_path: Any) -> Any:
    return make_project(tmp_path / "project", {"slow": SLOW})


async def test_a_long_shell_step_reports_progress_with_its_name(server, mode, monkeypatch):
    monkeypatch.setenv("AROMCP_PROGRESS_INTERVAL", "0.2")
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with Client(server, mode=mode) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "slow"}))["workflow_id"]
        result = await client.call_tool("workflow_get_next_step", {"workflow_id": wid}, progress_callback=on_progress)
        assert result.structured_content["step"]["id"] == "after"
    assert seen, "no progress notification during a 1.5 s command"
    assert all(message and message.startswith("step build: command running for ") for _, _, message in seen)
    values = [progress for progress, _, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values)  # strictly increasing, as MCP requires
    assert all(total is None for _, total, _ in seen)

