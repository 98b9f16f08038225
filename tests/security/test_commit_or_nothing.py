"""A call either commits or changes nothing — in memory and on disk.

The attack (a faulty disk): the store cannot write.  Before the fix the update stayed in
the live instance, the reply said the change was "saved as before", and the next commit
persisted it together with the next change: a double increment.  Disk full is made real
here with SQLite's own limit on the database size (`PRAGMA max_page_count`), which fails
writes with SQLITE_FULL exactly as a full disk does.
"""

from __future__ import annotations

from pathlib import Path

from lead_helpers import fails, ok, project_with, server_for, service_for
from mcp import Client

WORKFLOW = """
name: counter
default_state:
  raw: {n: 0}
state_schema:
  computed:
    doubled: {from: raw.n, transform: "input * 2"}
steps:
  - id: ask
    type: agent_prompt
    prompt: "n is {{ n }}"
"""


async def test_a_failed_commit_leaves_memory_and_disk_unchanged(tmp_path: Path) -> None:
    project = project_with(tmp_path / "p", {"counter": WORKFLOW})
    (tmp_path / "h").mkdir()
    service = service_for(project, tmp_path / "s.sqlite3", tmp_path / "h")
    async with Client(server_for(service), mode="legacy") as client:
        wid = (await ok(client, "workflow_start", {"workflow": "counter"}))["workflow_id"]
        conn = service.instances.store._connection()
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from now on
        text = await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 1},
            {"path": "raw.blob", "value": "x" * 300_000}]})
        assert "nothing of this call was kept" in text
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["n"] == 0 and state["doubled"] == 0 and "blob" not in state
        step = await ok(client, "workflow_get_next_step", {"workflow_id": wid})  # small writes may still fit
        assert step["step"]["definition"]["prompt"] == "n is 0"

        conn.execute("PRAGMA max_page_count = 1073741823")  # space again
        await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 1}]})
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["n"] == 1 and state["doubled"] == 2  # exactly once, not twice
        step = await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        assert step["step"]["definition"]["prompt"] == "n is 0"  # delivered before the update: same step again

    service.instances.forget(wid)  # what is on disk agrees with what the server showed
    assert service.state_read(wid).state["n"] == 1
