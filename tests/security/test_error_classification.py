"""Issue 10 item 13: a client's mistake is reported as the client's, and no error echoes a flood.

Wrong argument types and unknown names used to come back as "internal error" (a 10 MB
workflow name reached the file system: "File name too long") and echoed the whole value.
Now a wrong argument is named with what was expected, an over-long name is refused as a
name, and no error repeats more than 200 characters of any value.
"""

from __future__ import annotations

import pytest
from mcp import Client
from srv_helpers import ok, tool_text

HUGE = "a" * 10_000_000
WRONG_TYPES = [
    ("workflow_start", {"workflow": 123}, "workflow"),
    ("workflow_start", {"workflow": "messages", "inputs": []}, "inputs"),
    ("workflow_state_read", {"workflow_id": ["x"]}, "workflow_id"),
    ("workflow_state_update", {"workflow_id": "x", "updates": "bad"}, "updates"),
    ("workflow_step_complete", {"workflow_id": "x", "step_id": 1, "status": "maybe"}, "status"),
    ("workflow_test_transformation", {"transform": 5}, "transform"),
    ("workflow_list", {"include_global": {"a": 1}}, "include_global"),
]
HUGE_NAMES = [
    ("workflow_get_info", {"workflow": HUGE}),
    ("workflow_start", {"workflow": HUGE}),
    ("workflow_validate", {"workflow": HUGE}),
    ("workflow_load_definition", {"workflow": HUGE}),
    ("workflow_explain_plan", {"workflow": HUGE}),
    ("workflow_status", {"workflow_id": HUGE}),
    ("workflow_get_next_step", {"workflow_id": "wf_" + HUGE}),
    ("workflow_state_read", {"workflow_id": HUGE, "paths": [HUGE]}),
    ("workflow_test_transformation", {"transform": "input +", "input": HUGE}),
]


@pytest.mark.parametrize("tool,args,field", WRONG_TYPES, ids=[f"{t}-{f}" for t, _, f in WRONG_TYPES])
async def test_wrong_argument_types_are_the_clients_error(make_server, tool: str, args: dict, field: str):
    server, _ = make_server()
    async with Client(server) as client:
        result = await client.call_tool(tool, args)
        text = tool_text(result)
        assert result.is_error
        assert text.startswith(f"invalid arguments for {tool}:"), text
        assert f"`{field}`" in text and "internal error" not in text and "errors.pydantic.dev" not in text, text
        await ok(client, "workflow_list", {"include_global": False})


@pytest.mark.parametrize("tool,args", HUGE_NAMES, ids=[f"{t}-{'-'.join(a)}" for t, a in HUGE_NAMES])
async def test_huge_values_are_refused_without_being_echoed(make_server, tool: str, args: dict):
    server, _ = make_server()
    async with Client(server) as client:
        result = await client.call_tool(tool, args)
        text = tool_text(result) + str(result.structured_content or "")
        data = result.structured_content or {}
        assert result.is_error or data.get("valid") is False or data.get("success") is False, text[:300]
        assert "internal error" not in text, text[:500]
        assert len(text) < 6000, f"{len(text)} characters echoed"
        assert "a" * 201 not in text
        await ok(client, "workflow_list", {"include_global": False})


async def test_unknown_tool_is_named(make_server):
    server, _ = make_server()
    async with Client(server) as client:
        result = await client.call_tool("workflow_strat", {})
        assert result.is_error and "workflow_strat" in tool_text(result)
