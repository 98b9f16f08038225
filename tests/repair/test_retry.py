"""`workflow_retry`: a failed instance goes on from the step that failed, with the state as
it was before that step, and is then driven to its end through the protocol like any other."""

from __future__ import annotations

from typing import Any

from mcp import Client

from tests.server.srv_helpers import ProtocolAgent, fails, ok


async def start(client: Any, workflow: str) -> str:
    return str((await ok(client, "workflow_start", {"workflow": workflow}))["workflow_id"])


async def state(client: Any, wid: str) -> dict[str, Any]:
    return dict((await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"])


async def test_an_agent_step_runs_again_without_what_it_wrote_before_failing(server, service):
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:agent")
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["definition"]["prompt"] == "log has 1 entries, doubled is 0"
        await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.log", "operation": "append", "value": "partial"}, {"path": "raw.count", "value": 4}]})
        failed = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "ask",
                                                             "status": "failed", "error": "could not"})
        assert failed["status"] == "failed"
        broken = await state(client, wid)
        assert broken["log"] == ["first", "partial"] and broken["cleaned_up"] is True and len(broken["errors"]) == 1
        failed_at = service.instances.store.version(wid)

        retried = await ok(client, "workflow_retry", {"workflow_id": wid})
        assert retried == {"workflow_id": wid, "status": "running", "step_id": "ask",
                           "restored_version": retried["restored_version"]}
        assert retried["restored_version"] < failed_at
        again = await state(client, wid)  # the agent's writes, the error and on_failure's write are gone
        assert again["log"] == ["first"] and again["errors"] == [] and again["cleaned_up"] is False
        assert again["count"] == 0 and again["doubled"] == 0

        final = await ProtocolAgent(client, wid).run()
        assert final["status"] == "completed"
        done = await state(client, wid)
        assert done["log"] == ["first", "last"] and done["answer"] == "did: log has 1 entries, doubled is 0"
        debug = await ok(client, "workflow_debug_info", {"workflow_id": wid})
        asks = [e["status"] for e in debug["step_history"] if e["step_id"] == "ask"]
        assert asks == ["failed", "success"]
    retry = service.instances.history(wid, ["workflow_retry"])
    assert [(e.step_id, e.data["reason"], e.data["restored_version"]) for e in retry] == [
        ("ask", "retry", retried["restored_version"])]


async def test_a_step_that_failed_inside_the_server_keeps_the_state_it_failed_with(server, service):
    """`boom` ran in the call that completed `ask`, after `note`: what `note` wrote stays
    (it came before the failed step); what error handling wrote after it goes."""
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:server-side")
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        failed = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "ask", "result": "x"})
        assert failed["status"] == "failed" and "boom" in failed["error"]
        assert len((await state(client, wid))["errors"]) == 1

        retried = await ok(client, "workflow_retry", {"workflow_id": wid})
        assert retried["step_id"] == "boom" and "restored_version" not in retried
        again = await state(client, wid)
        assert again["log"] == ["after ask"] and again["errors"] == []
        await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.config", "value": {"deep": {"value": 42}}}]})
        final = await ProtocolAgent(client, wid).run()
        assert final["status"] == "completed"
        assert (await state(client, wid))["value"] == 42


async def test_a_failed_fan_out_runs_whole_again_from_the_state_before_it(server, service, project):
    async with Client(server, mode="legacy") as client:
        wid = await start(client, "repair:fanout")
        failed = await ProtocolAgent(client, wid).run()
        assert failed["status"] == "failed"
        broken = await state(client, wid)
        assert "b" in broken["done"] and len(broken["errors"]) == 1

        retried = await ok(client, "workflow_retry", {"workflow_id": wid})
        assert retried["step_id"] == "fan" and retried["restored_version"] >= 1
        assert (await state(client, wid))["done"] == [] and (await state(client, wid))["errors"] == []
        (project / "go.txt").write_text("")
        final = await ProtocolAgent(client, wid).run()
        assert final["status"] == "completed", final
        done = await state(client, wid)
        assert sorted(done["done"]) == ["a", "b", "c"] and done["finished"] is True
    created = [e.data["task_ids"] for e in service.instances.history(wid, ["tasks_created"])]
    assert created == [["work_0", "work_1", "work_2"], ["work_3", "work_4", "work_5"]]  # no late sub-agent fits
    assert [e.data["reason"] for e in service.instances.history(wid, ["checkpoint"])][:1] == [
        "before parallel_foreach fan"]


async def test_bad_retries_are_refused_with_one_clear_paragraph_and_nothing_written(server, service):
    async with Client(server, mode="legacy") as client:
        text = await fails(client, "workflow_retry", {"workflow_id": "wf_nope"})
        assert "No workflow instance with id 'wf_nope'" in text
        wid = await start(client, "repair:agent")
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        text = await fails(client, "workflow_retry", {"workflow_id": wid})
        assert f"workflow {wid} is running, not failed" in text

        exits = await start(client, "repair:exits")
        assert (await ProtocolAgent(client, exits).run())["status"] == "failed"
        version = service.instances.store.version(exits)
        history = len(service.instances.history(exits))
        text = await fails(client, "workflow_retry", {"workflow_id": exits})
        assert "its own `exit` step stop" in text and "fork it" in text
        assert service.instances.store.version(exits) == version and len(service.instances.history(exits)) == history
