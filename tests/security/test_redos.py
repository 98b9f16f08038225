"""Issue 10 item 5: a `user_input` validation pattern cannot freeze the server.

`pattern: "^(a+)+$"` against forty a's and `!` used to backtrack for hours inside Python's
`re`, holding the GIL, so no other call was answered.  Patterns now run on RE2 (linear
time); a pattern RE2 cannot run (backreferences, lookaround) is a validation error at load.
The attack runs against the real server over stdio: the reply must arrive, and the server
must answer the next call.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mcp import Client
from sec_stdio import start_stdio
from srv_helpers import ok

LIVENESS = 30  # seconds to wait for any reply: a hang guard, not a speed measurement


def _workflow(pattern: str) -> str:
    return f"""name: redos
steps:
  - id: ask
    type: user_input
    prompt: "name?"
    validation:
      pattern: '{pattern}'
      error_message: "letters only"
    max_attempts: 3
    state_update:
      path: raw.answer
"""


async def test_catastrophic_pattern_answers_and_server_stays_responsive(tmp_path: Path):
    server = await start_stdio(tmp_path, {"redos": _workflow("^(a+)+$")})
    try:
        started = await server.call_tool("workflow_start", {"workflow": "redos", "inputs": {}})
        workflow_id = started["workflow_id"]
        step = await server.call_tool("workflow_get_next_step", {"workflow_id": workflow_id})
        answer = server.request("tools/call", {"name": "workflow_step_complete", "arguments": {
            "workflow_id": workflow_id, "step_id": step["step"]["id"], "result": "a" * 40 + "!"}})
        reply = await asyncio.wait_for(answer, LIVENESS)
        assert "letters only" in str(reply), reply
        listed = await asyncio.wait_for(server.call_tool("workflow_list", {"include_global": False}), LIVENESS)
        assert any(w["name"] == "redos" for w in listed["workflows"])
        done = await server.call_tool("workflow_step_complete", {
            "workflow_id": workflow_id, "step_id": step["step"]["id"], "result": "aaaa"})
        assert done["status"] == "completed"
    finally:
        await server.close()


async def test_pattern_re2_cannot_run_is_a_load_error_with_line(make_server):
    server, _ = make_server({"redos": _workflow("^(a)\\1$")})
    async with Client(server) as client:
        report = await ok(client, "workflow_validate", {"workflow": "redos"})
    assert not report["valid"]
    errors = [e for e in report["errors"] if "pattern" in e["message"]]
    assert errors and errors[0]["line"] == 7, report
    assert "backreferences" in errors[0]["message"] and "RE2" in errors[0]["message"]

