"""`workflow_fork`: a new instance from a step, a version or a checkpoint of another, with
raw/state edits applied; run to its end through the protocol; the original untouched."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from tests.server.srv_helpers import ProtocolAgent, fails, ok


async def start(client: Any, workflow: str) -> str:
    return str((await ok(client, "workflow_start", {"workflow": workflow}))["workflow_id"])


async def state(client: Any, wid: str) -> dict[str, Any]:
    return dict((await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"])


def untouched(service: Any, wid: str) -> tuple[int, int]:
    """What `fork` must never change about the original: its version and its history."""
    return service.instances.store.version(wid), len(service.instances.history(wid))


async def test_fork_at_a_step_with_edits_runs_to_its_end_and_leaves_the_original(server, service):
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:agent")
        assert (await ProtocolAgent(client, wid).run())["status"] == "completed"
        before = untouched(service, wid)

        forked = await ok(client, "workflow_fork", {"workflow_id": wid, "at": "ask",
                                                    "edits": {"raw.count": 21, "raw.log": ["edited"]}})
        new = forked["workflow_id"]
        assert new != wid and forked["status"] == "running"
        assert forked["forked_from"] == {"workflow_id": wid, "version": forked["forked_from"]["version"],
                                         "step_id": "ask", "edits": ["raw.count", "raw.log"]}
        assert forked["state"]["doubled"] == 42 and forked["state"]["answer"] is None  # recomputed; before `ask`
        agent = ProtocolAgent(client, new)
        final = await agent.run()
        assert final["status"] == "completed"
        assert agent.log.steps == [("main", "agent_prompt", "ask")]
        done = await state(client, new)
        assert done["log"] == ["edited", "last"] and done["answer"] == "did: log has 1 entries, doubled is 42"
        status = await ok(client, "workflow_status", {"workflow_id": new})
        assert status["forked_from"]["workflow_id"] == wid and status["version"] >= 1
    assert untouched(service, wid) == before
    assert (await_state := service.state_read(wid).state)["log"] == ["first", "last"] and await_state["count"] == 0
    (event,) = service.instances.history(new, ["forked"])
    assert event.data["workflow_id"] == wid and event.step_id == "ask"


async def test_fork_at_a_step_in_a_loop_of_a_sub_agent_task(server, service):
    """`fix_1.files.apply#2` names the second iteration of `apply` in task fix_1, as
    `debug` prints it; the fork re-delivers that step with the edited state and runs on."""
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:loops")
        assert (await ProtocolAgent(client, wid).run())["status"] == "completed"
        history = (await ok(client, "workflow_debug_info", {"workflow_id": wid}))["step_history"]
        assert any(e["step_id"] == "fix_1.files.apply#2" and e["task_id"] == "fix_1" for e in history)

        forked = await ok(client, "workflow_fork", {"workflow_id": wid, "at": "fix_1.files.apply#2",
                                                    "edits": {"raw.tone": "kind"}})
        agent = ProtocolAgent(client, forked["workflow_id"])
        final = await agent.run()
        assert final["status"] == "completed"
        fork_steps = [(task, sid) for task, _, sid in agent.log.steps]
        assert ("fix_1", "fix_1.files.apply#2") in fork_steps and ("fix_1", "fix_1.files.apply#1") not in fork_steps
        done = await state(client, forked["workflow_id"])
        assert "did: fix y2 in tone kind" in done["applied"] and "did: fix y1 in tone plain" in done["applied"]
        assert len(done["applied"]) == 4


async def test_fork_from_a_version_and_from_a_checkpoint(server, service):
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:agent")
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        point = await ok(client, "workflow_checkpoint", {"workflow_id": wid, "reason": "before answering"})
        at_checkpoint = service.instances.store.version(wid)
        assert (await ProtocolAgent(client, wid).run())["status"] == "completed"

        from_checkpoint = await ok(client, "workflow_fork", {"workflow_id": wid,
                                                             "checkpoint_id": point["checkpoint_id"]})
        assert from_checkpoint["forked_from"]["version"] == at_checkpoint
        assert from_checkpoint["forked_from"]["checkpoint_id"] == point["checkpoint_id"]
        from_version = await ok(client, "workflow_fork", {"workflow_id": wid, "version": at_checkpoint})
        for made in (from_checkpoint, from_version):
            assert made["state"]["log"] == ["first"]
            assert (await ProtocolAgent(client, made["workflow_id"]).run())["status"] == "completed"
            assert (await state(client, made["workflow_id"]))["log"] == ["first", "last"]


@pytest.mark.parametrize("args,words", [
    ({"workflow_id": "wf_nope"}, ["No workflow instance with id 'wf_nope'"]),
    ({"at": "nope"}, ["never handed out or started a step 'nope'", "debug"]),
    ({"version": 999}, ["version 999 is not one of them"]),
    ({"version": 0}, ["version 0 is not one of them"]),
    ({"checkpoint_id": "cp-9"}, ["no checkpoint 'cp-9'"]),
    ({"at": "ask", "version": 2}, ["name one point to fork from"]),
    ({}, ["had already ended (completed)", "earlier step"]),
    ({"at": "ask", "edits": {"computed.doubled": 3}}, ["cannot edit computed.doubled", "recomputed"]),
    ({"at": "ask", "edits": {"doubled": 3}}, ["cannot edit doubled", "computed fields"]),
    ({"at": "ask", "edits": {"inputs.x": 3}}, ["cannot edit 'inputs.x'", "raw. or state."]),
    ({"at": "ask", "edits": {"raw.log[": 3}}, ["the edits were refused", "raw.log["]),
    ({"at": "ask", "edits": {"raw.count": "three"}}, ['cannot set raw.count to "three"', "declares count as number"]),
    ({"at": "ask", "edits": {"raw.count": True}}, ["declares count as number"]),
    ({"at": "ask", "edits": {"raw.__proto__": {}}}, ["the edits were refused"]),
])
async def test_bad_forks_are_refused_with_one_clear_paragraph_and_nothing_written(server, service, args, words):
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:agent")
        assert (await ProtocolAgent(client, wid).run())["status"] == "completed"
        before, instances = untouched(service, wid), len(service.list_instances().instances)
        text = await fails(client, "workflow_fork", {"workflow_id": wid, **args})
    for word in words:
        assert word in text, text
    assert "\n" not in text.strip() and "Traceback" not in text
    assert untouched(service, wid) == before and len(service.list_instances().instances) == instances


async def test_a_point_the_store_compacted_away_is_refused_and_checkpoints_still_serve(
        server, service, monkeypatch):
    """With a full snapshot at every commit, the store keeps no old deltas: an early version
    cannot be rebuilt (refused, saying what can), while the checkpoint a fan-out takes can."""
    from aromcp_workflows.instances import commits

    monkeypatch.setattr(commits, "MAX_DELTAS", 0)
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:fanout")
        await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [{"path": "raw.x", "value": 1}]})
        (service.project_dir / "go.txt").write_text("")
        assert (await ProtocolAgent(client, wid).run())["status"] == "completed"
        text = await fails(client, "workflow_fork", {"workflow_id": wid, "version": 1})
        assert "version 1 of workflow" in text and "can no longer be rebuilt" in text and "cp-1 (version" in text
        (point,) = service.instances.store.checkpoints(wid)
        made = await ok(client, "workflow_fork", {"workflow_id": wid, "at": "fan"})
        assert made["forked_from"]["version"] == point.snapshot["version"]
        assert (await ProtocolAgent(client, made["workflow_id"]).run())["status"] == "completed"
        assert sorted((await state(client, made["workflow_id"]))["done"]) == ["a", "b", "c"]
