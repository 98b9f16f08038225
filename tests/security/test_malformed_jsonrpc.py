"""Issue 10 item 10: every line on stdio gets an answer, and the server keeps serving.

A request nested 250 deep, one with a lone surrogate, a truncated line, or valid JSON that
is no JSON-RPC message used to get no reply at all (the SDK's stdio transport dropped what
it could not parse): a client waited forever.  Each now gets a JSON-RPC error (-32700 parse
error, -32600 invalid request) with the request's id when it can be recovered, and the
next request is answered normally.  Run over a real stdio subprocess with raw lines.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sec_stdio import start_stdio

LIVENESS = 20  # seconds to wait for a reply: a hang guard, not a speed measurement
DEEP = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"workflow_list","arguments":{"x":' \
       + "[" * 250 + "]" * 250 + "}}}"
LINES = {
    "deep": (DEEP, -32700, True),
    "surrogate": ('{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"workflow_get_info",'
                  '"arguments":{"workflow":"x\\ud800"}}}', -32700, True),
    "truncated": ('{"jsonrpc":"2.0","id":%d,"method":"tools/ca', -32700, False),
    "not_jsonrpc": ('{"id":%d,"hello":"world"}', -32600, True),
    "array": ("[%d, 2]", -32600, False),
    "garbage": ("\xff\xfe not json %d", -32700, False),
}


async def _reply_to(server, raw: str) -> dict:
    """Write one raw line; the next line the server writes that is a reply (has an id key)."""
    seen = len(server.lines)
    server.proc.stdin.write(raw.encode("utf-8", "surrogatepass") + b"\n")
    await server.proc.stdin.drain()

    async def wait() -> dict:
        while True:
            for line in server.lines[seen:]:
                message = json.loads(line)
                if "id" in message and ("error" in message or "result" in message):
                    return message
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(wait(), LIVENESS)


@pytest.mark.parametrize("name", sorted(LINES))
async def test_every_malformed_line_gets_an_error_and_the_server_keeps_serving(tmp_path: Path, name: str):
    template, code, has_id = LINES[name]
    server = await start_stdio(tmp_path)
    try:
        reply = await _reply_to(server, template % 4242 if "%d" in template else template)
        assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] == code, reply
        assert reply["id"] == (4242 if has_id else None), reply
        assert reply["error"]["message"]
        listed = await asyncio.wait_for(server.call_tool("workflow_list", {"include_global": False}), LIVENESS)
        assert listed["workflows"]
    finally:
        await server.close()
