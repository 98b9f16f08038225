"""The issue-6 MCP tools as a client sees them (in-memory `mcp.Client` over
`build_server`), for what the service-level tests cannot show: the structured content
carries every field (extra ones too), masking holds on the wire and in the server's
DEBUG logs, and user mistakes are actionable errors rather than internal ones."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from explain_helpers import REPO, Project
from mcp import Client
from test_inspect import PASSWORD, TOKEN, TRACED


@pytest.fixture
def server(project: Project) -> Any:
    from aromcp_workflows.server.mcp import build_server

    project.put("test:traced", TRACED)
    return build_server(project.service)


async def ok(client: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, f"{name}: {result.content}"
    return dict(result.structured_content)


async def error_text(client: Any, name: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error, f"{name} should fail: {result.structured_content}"
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def run_traced(client: Any) -> str:
    workflow_id = (await ok(client, "workflow_start", {"workflow": "test:traced",
                                                       "inputs": {"api_token": TOKEN}}))["workflow_id"]
    await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
    await ok(client, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": "ask", "result": "bob"})
    return str(workflow_id)


async def test_trace_and_debug_over_mcp_match_the_service_and_mask(server: Any, project: Project) -> None:
    async with Client(server, mode="legacy") as client:
        workflow_id = await run_traced(client)
        traces = await ok(client, "workflow_trace_transformations",
                          {"workflow_id": workflow_id, "field": "auth", "include_timing": True})
        debug = await ok(client, "workflow_debug_info", {"workflow_id": workflow_id})
    service = project.service()
    assert traces == service.trace_transformations(workflow_id, "auth", True).model_dump()
    assert [t["output"] for t in traces["traces"]] == ["***", "***"]  # fed by inputs.api_token: secret whole
    assert debug["current_steps"] == {"main": "wait_here"}  # beyond the contract's keys, still sent
    statuses = {h["step_id"]: h["status"] for h in debug["step_history"]}
    assert statuses == {"bump": "success", "never": "skipped", "ask": "success", "failing": "failed",
                        "wait_here": "running"}
    for payload in (traces, debug):
        text = json.dumps(payload)
        assert TOKEN not in text and PASSWORD not in text


async def test_explain_plan_over_mcp(server: Any, project: Project) -> None:
    # over MCP a workflow is named (a path is refused): install the example in the project
    project.put("examples:parallel-batches",
                (REPO / "examples" / "examples:parallel-batches.yaml").read_text(encoding="utf-8"))
    async with Client(server, mode="legacy") as client:
        plan = await ok(client, "workflow_explain_plan",
                        {"workflow": "examples:parallel-batches", "inputs": {"files": ["a", "b", "c", "d", "e"]}})
    assert plan["estimated_sub_agents"] == {"total": 3, "by_step": {"fan_out": 3}}
    assert "raw.batch_errors" in plan["state_paths_written"]
    assert plan["program"]["examples:parallel-batches"]["main"]


async def test_explain_plan_bad_inputs_are_a_user_error_not_an_internal_one(server: Any) -> None:
    async with Client(server, mode="legacy") as client:
        text = await error_text(client, "workflow_explain_plan", {"workflow": "standards:fix",
                                                                  "inputs": {"batch_size": "three"}})
    assert "batch_size" in text
    assert "internal error" not in text


async def test_input_errors_do_not_echo_secret_values(server: Any) -> None:
    async with Client(server, mode="legacy") as client:
        text = await error_text(client, "workflow_start", {"workflow": "test:traced",
                                                           "inputs": {"api_token": [TOKEN]}})
    assert "api_token" in text
    assert TOKEN not in text


async def test_server_debug_logs_do_not_contain_secrets(project: Project, tmp_path: Path) -> None:
    """A real server over stdio at AROMCP_LOG_LEVEL=DEBUG: nothing it logs to stderr
    (the MCP SDK's own debug lines included) carries the token or the password."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    project.put("test:traced", TRACED)
    env = {**os.environ, "AROMCP_LOG_LEVEL": "DEBUG", "AROMCP_WORKFLOWS_STORE": str(project.store),
           "HOME": str(project.home), "PYTHONPATH": str(REPO)}
    params = StdioServerParameters(command=sys.executable, env=env,
                                   args=["-m", "aromcp_workflows", "--project-dir", str(project.root), "serve"])
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            workflow_id = await asyncio.wait_for(run_traced(session), 60)
            for tool in ("workflow_trace_transformations", "workflow_debug_info", "workflow_state_read"):
                await session.call_tool(tool, {"workflow_id": workflow_id})
            await session.call_tool("workflow_explain_plan", {"workflow": "test:traced",
                                                              "inputs": {"api_token": TOKEN}})
    text = log.read_text()
    assert "DEBUG" in text  # the level took effect
    assert TOKEN not in text and PASSWORD not in text


async def test_load_definition_names_the_file_and_its_imports(server: Any) -> None:
    async with Client(server, mode="legacy") as client:
        loaded = await ok(client, "workflow_load_definition", {"workflow": "standards:check"})
    assert loaded["name"] == "standards:check"
    assert Path(loaded["loaded_from"]) == REPO / "workflows" / "standards:check.yaml"
    assert {k: Path(v) for k, v in loaded["imports"].items()} == {
        "shared:check-standards": REPO / "workflows" / "shared" / "check-standards.yaml"}
    include = next(s for s in loaded["steps"] if s.get("type") == "include_workflow")
    assert include["workflow"] == "shared:check-standards"
