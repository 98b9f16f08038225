"""Compare-and-set conflicts between server processes never reach a client.

Two servers (two services, each with its own live-instance cache, as two processes have)
share one store and take 300 concurrent increments of one instance.  Before the fix a
share of the calls failed with "another server process changed workflow …".
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from lead_helpers import ok, project_with, server_for, service_for
from mcp import Client

WORKFLOW = """
name: counter
default_state:
  raw: {n: 0, seen: []}
steps:
  - {id: ask, type: agent_prompt, prompt: "n={{ n }}"}
"""


async def test_concurrent_writers_on_two_servers_see_no_conflict(tmp_path: Path) -> None:
    project = project_with(tmp_path / "p", {"counter": WORKFLOW})
    (tmp_path / "h").mkdir()
    store = tmp_path / "s.sqlite3"
    first = server_for(service_for(project, store, tmp_path / "h"))
    second = server_for(service_for(project, store, tmp_path / "h"))
    async with Client(first, mode="legacy") as a, Client(second, mode="legacy") as b:
        wid = (await ok(a, "workflow_start", {"workflow": "counter"}))["workflow_id"]

        async def bump(client: Client, k: int) -> None:
            await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [
                {"path": "raw.n", "operation": "increment", "value": 1},
                {"path": "raw.seen", "operation": "append", "value": k}]})

        await asyncio.gather(*[bump(a if k % 2 else b, k) for k in range(300)])
        for client in (a, b):
            state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
            assert state["n"] == 300
            assert sorted(state["seen"]) == list(range(300))
