"""`tools/list`, `prompts/list` and resource templates as a client receives them.

The tool list is compared with a committed wire snapshot (like modelcontextprotocol/servers'
tests/snapshots/list_tools.json).  After an intended change to a tool, regenerate it:

    UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest tests/server/test_tools_list.py
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from srv_helpers import ok

SNAPSHOT = Path(__file__).parent / "snapshots" / "list_tools.json"
BUDGET_BYTES = 8 * 1024

TOOLS = {  # docs/mcp.md, in its order
    "workflow_list", "workflow_get_info", "workflow_validate", "workflow_start", "workflow_get_next_step",
    "workflow_step_complete", "workflow_state_read", "workflow_state_update", "workflow_state_dependencies",
    "workflow_checkpoint", "workflow_resume", "workflow_complete", "workflow_retry", "workflow_fork",
    "workflow_status", "workflow_load_definition", "workflow_trace_transformations", "workflow_debug_info",
    "workflow_test_transformation", "workflow_explain_plan",
}
READ_ONLY = {
    "workflow_list", "workflow_get_info", "workflow_validate", "workflow_state_read",
    "workflow_state_dependencies", "workflow_status", "workflow_load_definition",
    "workflow_trace_transformations", "workflow_debug_info", "workflow_test_transformation",
    "workflow_explain_plan",
}
ARGUMENTS = {  # the contract's argument names (required ones marked *)
    "workflow_list": {"include_global"},
    "workflow_get_info": {"workflow*"},
    "workflow_validate": {"workflow", "yaml"},
    "workflow_start": {"workflow*", "inputs", "idempotency_key"},
    "workflow_get_next_step": {"workflow_id*", "task_id", "sub_agent_context"},
    "workflow_step_complete": {"workflow_id*", "step_id*", "status", "result", "error", "task_id"},
    "workflow_state_read": {"workflow_id*", "paths", "task_id"},
    "workflow_state_update": {"workflow_id*", "updates*", "task_id"},
    "workflow_state_dependencies": {"workflow_id*", "field*"},
    "workflow_checkpoint": {"workflow_id*", "reason", "step_id"},
    "workflow_resume": {"workflow_id*", "checkpoint_id"},
    "workflow_complete": {"workflow_id*", "status"},
    "workflow_retry": {"workflow_id*"},
    "workflow_fork": {"workflow_id*", "at", "version", "checkpoint_id", "edits"},
    "workflow_status": {"workflow_id"},
    "workflow_load_definition": {"workflow*"},
    "workflow_trace_transformations": {"workflow_id*", "field", "include_timing"},
    "workflow_debug_info": {"workflow_id*"},
    "workflow_test_transformation": {"transform*", "input", "context"},
    "workflow_explain_plan": {"workflow*", "inputs"},
}


def wire(model: Any) -> Any:
    """A result model as its JSON-RPC wire form (camelCase, no nulls)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def canonical(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return json.loads(json.dumps(sorted(tools, key=lambda t: t["name"]), sort_keys=True))


async def list_tools(server: Any, mode: str) -> list[dict[str, Any]]:
    async with Client(server, mode=mode) as client:
        return list(wire(await client.list_tools())["tools"])


async def test_tools_list_matches_snapshot(server):
    tools = canonical(await list_tools(server, "legacy"))
    text = json.dumps(tools, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get("UPDATE_SNAPSHOTS") or not SNAPSHOT.exists():
        SNAPSHOT.write_text(text, encoding="utf-8")
        if not os.environ.get("UPDATE_SNAPSHOTS"):
            pytest.fail(f"snapshot {SNAPSHOT} did not exist; written now - review and commit it")
    expected = SNAPSHOT.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            "snapshots/list_tools.json", "tools/list (now)"))
        print(diff)
        pytest.fail("tools/list differs from the snapshot (diff above); if the change is intended, "
                    "rerun with UPDATE_SNAPSHOTS=1 and commit the snapshot:\n" + diff[:6000])


async def test_tools_list_same_in_both_protocol_generations(server):
    assert canonical(await list_tools(server, "auto")) == canonical(await list_tools(server, "legacy"))


async def test_tools_list_payload_within_budget(server):
    tools = await list_tools(server, "legacy")
    payload = json.dumps({"tools": tools}, separators=(",", ":"), ensure_ascii=False).encode()
    print(f"tools/list payload: {len(payload)} bytes (budget {BUDGET_BYTES})")
    assert len(payload) <= BUDGET_BYTES, f"tools/list is {len(payload)} bytes, over the 8 KB budget"


RUNS_STEPS = {"workflow_start", "workflow_get_next_step", "workflow_step_complete"}  # commands, other tools


async def test_every_contract_tool_with_schemas_and_hints(server):
    tools = {t["name"]: t for t in await list_tools(server, "legacy")}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.get("description"), name
        assert tool["inputSchema"]["type"] == "object", name
        assert "outputSchema" not in tool, f"{name} lists an output schema (docs/mcp.md says why none is)"
        hints = tool.get("annotations", {})  # a hint left out has the protocol's default
        assert hints.get("readOnlyHint", False) is (name in READ_ONLY), f"{name}: readOnlyHint {hints}"
        if name not in READ_ONLY:  # destructive means something only for a tool that writes
            assert hints.get("destructiveHint", True) is (name in RUNS_STEPS), f"{name}: destructiveHint {hints}"
        assert hints.get("openWorldHint", True) is (name in RUNS_STEPS), f"{name}: openWorldHint {hints}"
        props = set(tool["inputSchema"].get("properties", {}))
        required = set(tool["inputSchema"].get("required", []))
        expected = ARGUMENTS[name]
        assert props == {a.rstrip("*") for a in expected}, f"{name} arguments {sorted(props)}"
        assert required == {a.rstrip("*") for a in expected if a.endswith("*")}, f"{name} required {required}"
        assert "ctx" not in props, name


async def test_prompts_and_resource_template(server):
    async with Client(server, mode="legacy") as client:
        prompts = {p["name"]: p for p in wire(await client.list_prompts())["prompts"]}
        templates = wire(await client.list_resource_templates())["resourceTemplates"]
    assert set(prompts) == {"workflow", "sub_agent"}
    assert [(a["name"], a.get("required", False)) for a in prompts["workflow"]["arguments"]] == [
        ("action", False), ("target", False)]
    assert [(a["name"], a.get("required", False)) for a in prompts["sub_agent"]["arguments"]] == [
        ("workflow_id", True), ("task_id", True)]
    assert [t["uriTemplate"] for t in templates] == ["workflow://{name}"]


async def test_prompts_render_their_arguments(server, mode):
    async with Client(server, mode=mode) as any_client:
        await _prompts_render(any_client)


async def _prompts_render(any_client):
    sub = await any_client.get_prompt("sub_agent", {"workflow_id": "wf_abc123", "task_id": "work_7"})
    text = sub.messages[0].content.text
    assert "wf_abc123" in text and "work_7" in text and "workflow_get_next_step" in text
    orch = await any_client.get_prompt("workflow", {"action": "start", "target": "messages"})
    text = orch.messages[0].content.text
    assert "messages" in text and "workflow_start" in text


async def test_workflow_resource_returns_the_yaml(server, mode, project):
    async with Client(server, mode=mode) as any_client:
        await _resource(any_client, project)


async def _resource(any_client, project):
    result = await any_client.read_resource("workflow://messages")
    content = result.contents[0]
    assert content.text == (project / ".aromcp" / "workflows" / "messages.yaml").read_text()
    assert content.mime_type == "application/yaml"
    # and the server still answers tools after reading a resource
    assert (await ok(any_client, "workflow_get_info", {"workflow": "messages"}))["name"] == "messages"


async def test_unknown_workflow_resource_is_an_error(server, mode):
    from mcp.shared.exceptions import MCPError

    async with Client(server, mode=mode) as any_client:
        with pytest.raises(MCPError, match="nope"):
            await any_client.read_resource("workflow://nope")


async def test_unknown_workflow_resource_error_says_where_it_looked(server):
    from mcp.shared.exceptions import MCPError

    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError) as caught:
            await client.read_resource("workflow://nope")
    assert "not found" in str(caught.value) and "looked in" in str(caught.value)


@pytest.mark.parametrize("tool", sorted(t for t, args in ARGUMENTS.items() if any(a.endswith("*") for a in args)))
async def test_missing_required_arguments_are_tool_errors_naming_them(tool):
    from aromcp_workflows.server.mcp import build_server

    server = build_server(lambda: pytest.fail("arguments are checked before the service is built"))
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool(tool, {})
    assert result.is_error
    text = result.content[0].text
    for name in (a.rstrip("*") for a in ARGUMENTS[tool] if a.endswith("*")):
        assert name in text, (tool, text)


@pytest.mark.parametrize("tool,args,word", [
    ("workflow_list", {"include_global": "maybe"}, "include_global"),
    ("workflow_state_update", {"workflow_id": "wf_x", "updates": "raw.a=1"}, "updates"),
    ("workflow_step_complete", {"workflow_id": "wf_x", "step_id": "s", "status": "done"}, "status"),
    ("workflow_complete", {"workflow_id": "wf_x", "status": "bogus"}, "status"),
    ("workflow_start", {"workflow": "x", "inputs": ["a"]}, "inputs"),
    ("workflow_fork", {"workflow_id": "wf_x", "version": "latest"}, "version"),
    ("workflow_fork", {"workflow_id": "wf_x", "edits": ["raw.a=1"]}, "edits"),
])
async def test_wrongly_typed_arguments_are_tool_errors_naming_them(tool, args, word):
    from aromcp_workflows.server.mcp import build_server

    server = build_server(lambda: pytest.fail("arguments are checked before the service is built"))
    async with Client(server, mode="auto") as client:
        result = await client.call_tool(tool, args)
    assert result.is_error and word in result.content[0].text


async def test_server_name_version_and_instructions(server):
    from aromcp_workflows import __version__

    async with Client(server, mode="legacy") as client:
        assert client.server_info is not None
        assert (client.server_info.name, client.server_info.version) == ("aromcp-workflows", __version__)
        assert client.instructions and "workflow_step_complete" in client.instructions
        assert client.server_capabilities.tools is not None and client.server_capabilities.prompts is not None
        assert client.server_capabilities.resources is not None
