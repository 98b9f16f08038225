"""A tool call's last save on PostgreSQL is sent without waiting and confirmed before the reply
leaves (`app.confirm`): the reply never acknowledges what was not committed, and a save that
lost to another writer reruns the call on the current instance instead of answering from a
change that was not kept.

Two servers on one database stand for two replicas.  The first serves an instance long
enough to trust its copy (it then relies on the save's compare-and-set, with no read first);
the second changes the instance behind its back; the first's next call is applied to its
stale copy, sent, found in conflict when confirmed — and answered correctly all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aromcp_workflows.instances.live import TRUST_AFTER
from aromcp_workflows.server.mcp import build_server
from aromcp_workflows.store import PostgresStore

pytestmark = pytest.mark.slow

COUNTED = """\
name: counted
default_state:
  raw: {n: 0, said: []}
steps:
  - id: loop
    type: foreach
    items: "{{ Array.from({length: 40}, (_, i) => i) }}"
    steps:
      - id: think
        type: agent_prompt
        prompt: "part {{ item }}"
        state_update: {path: raw.said, operation: append}
"""


def replica(tmp_path: Path, url: str, name: str) -> Any:
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True, exist_ok=True)
    (project / ".aromcp" / "workflows" / "counted.yaml").write_text(COUNTED, encoding="utf-8")

    def factory() -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=project, store_path=url, home=tmp_path / name)

    return build_server(factory)


async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def trusted(client: Any) -> tuple[str, dict[str, Any]]:
    """An instance this server has found current often enough to stop asking the store."""
    wid = (await call(client, "workflow_start", {"workflow": "counted"}))["workflow_id"]
    step = (await call(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
    for _ in range(TRUST_AFTER + 2):
        step = (await call(client, "workflow_step_complete", {"workflow_id": wid, "step_id": step["id"],
                                                              "result": step["id"]}))["next_step"]
    return wid, step


def completions(url: str, wid: str, step_id: str) -> int:
    store = PostgresStore(url)
    try:
        return sum(1 for e in store.history(wid, kinds=["step_completed"]) if e.step_id == step_id)
    finally:
        store.close()


async def test_a_resent_completion_that_loses_to_another_replica_is_answered_from_the_store(
        tmp_path: Path, pg_url: str) -> None:
    async with Client(replica(tmp_path, pg_url, "a")) as one, Client(replica(tmp_path, pg_url, "b")) as two:
        wid, step = await trusted(one)
        moved = await call(two, "workflow_step_complete", {"workflow_id": wid, "step_id": step["id"],
                                                           "result": step["id"]})
        # the first server's copy still has `step` pending: it completes it again on that copy,
        # its save conflicts, and the call runs again on the instance as stored
        again = await call(one, "workflow_step_complete", {"workflow_id": wid, "step_id": step["id"],
                                                           "result": step["id"]})
        assert again["success"] is True and again["next_step"]["id"] == moved["next_step"]["id"]
        state = (await call(one, "workflow_state_read", {"workflow_id": wid}))["state"]
    assert completions(pg_url, wid, step["id"]) == 1
    assert state["said"].count(step["id"]) == 1


async def test_an_update_that_loses_to_another_replica_is_applied_to_the_current_state(
        tmp_path: Path, pg_url: str) -> None:
    async with Client(replica(tmp_path, pg_url, "a")) as one, Client(replica(tmp_path, pg_url, "b")) as two:
        wid, _ = await trusted(one)
        for _ in range(TRUST_AFTER + 1):  # state updates the first server also trusts its copy for
            await call(one, "workflow_state_update", {"workflow_id": wid, "updates": [
                {"path": "raw.n", "operation": "increment", "value": 1}]})
        await call(two, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 100}]})
        await call(one, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 1}]})
        state = (await call(two, "workflow_state_read", {"workflow_id": wid}))["state"]
    assert state["n"] == TRUST_AFTER + 1 + 100 + 1  # every increment once: none lost, none twice
