"""Every MCP tool (docs/mcp.md) through a real client: its success and its main error.

The client is `mcp.Client` connected in memory to `build_server(WorkflowService(...))`:
`mode="legacy"` runs the initialize handshake and real JSON-RPC framing, `mode="auto"`
the 2026 direct path.  Assertions are on `structured_content` (what a client's model
reads) and, for failures, on `isError` plus the text of the message.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from srv_helpers import AgentLog, ProtocolAgent, answer_for, fails, make_project, ok

EXPECTED_MESSAGES = [
    "m1 hello world",
    "m2",
    "m3 you said did: Say something about world",
    "m4 doubled=2",
    "round 0",
    "round 1",
    "m5 end main",
]
AGENT_STEP_TYPES = {"agent_shell_command", "mcp_call", "user_input", "agent_prompt", "parallel_tasks", "wait"}
SECRET = "sk-live-7f3a9c1e5b2d4680"


async def start(client: Any, workflow: str, inputs: dict[str, Any] | None = None) -> str:
    answer = await ok(client, "workflow_start", {"workflow": workflow, "inputs": inputs or {}})
    assert answer["status"] == "running"
    assert answer["workflow_id"] and " " not in answer["workflow_id"]
    return str(answer["workflow_id"])


async def next_step(client: Any, workflow_id: str, task_id: str | None = None) -> dict[str, Any]:
    args = {"workflow_id": workflow_id} | ({"task_id": task_id} if task_id else {})
    return await ok(client, "workflow_get_next_step", args)


async def complete(client: Any, workflow_id: str, step_id: str, result: Any = None, **extra: Any) -> dict[str, Any]:
    return await ok(client, "workflow_step_complete",
                    {"workflow_id": workflow_id, "step_id": step_id, "result": result, **extra})


# -- the two agent loops ----------------------------------------------------------------
@pytest.mark.parametrize("economical", [True, False], ids=["economical", "seed"])
async def test_loop_sees_every_message_once(server, mode, economical):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages")
        agent = ProtocolAgent(client, workflow_id, economical=economical)
        end = await agent.run()
        assert end["step"] is None and end["status"] == "completed"
        assert agent.log.messages == EXPECTED_MESSAGES
        kinds = {kind for _, kind, _ in agent.log.steps}
        assert kinds == {"agent_prompt", "agent_shell_command", "mcp_call", "user_input"}
        assert "user_message" not in kinds
        ids = [step_id for _, _, step_id in agent.log.steps]
        assert len(ids) == len(set(ids)), "step ids are unique within the instance"
        assert all(" " not in i for i in ids)
        # economical: 1 get_next_step + one complete per agent step; seed: one more get per step
        steps = len(agent.log.steps)
        expected_calls = 1 + steps if economical else 1 + 2 * steps
        assert agent.log.total_calls == expected_calls
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["n"] == 1 and state["doubled"] == 2
        assert state["echoed"] == "world"
        assert [h["params"]["round"] for h in state["hits"]] == [0, 1]
        assert state["inputs"] == {"who": "world", "rounds": 2}
        # after the end, get_next_step keeps answering the end
        again = await next_step(client, workflow_id)
        assert again["step"] is None and again["status"] == "completed"


async def test_seed_agent_gets_the_same_next_step_and_messages_again(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "messages")
        first = await next_step(client, workflow_id)
        assert first["messages"] == ["m1 hello world", "m2"]
        assert first["step"]["id"] == "ask" and first["step"]["type"] == "agent_prompt"
        assert first["step"]["definition"]["prompt"] == "Say something about world"  # rendered
        assert set(first["step"]) == {"id", "type", "instructions", "definition"}
        redelivered = await next_step(client, workflow_id)
        assert redelivered == first  # nothing skipped: same id, same messages
        reply = await complete(client, workflow_id, "ask", "hi")
        assert reply["success"] is True and reply["status"] == "running"
        assert reply["messages"] == ["m3 you said hi"]
        assert reply["next_step"]["type"] == "agent_shell_command"
        assert reply["next_step"]["definition"]["command"] == "echo world"
        seed = await next_step(client, workflow_id)
        assert seed["step"] == reply["next_step"] and seed["messages"] == reply["messages"]


async def test_completing_a_step_twice_is_harmless(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages", {"rounds": 2})
        step = (await next_step(client, workflow_id))["step"]
        while step["type"] != "mcp_call":
            step = (await complete(client, workflow_id, step["id"], answer_for(step)))["next_step"]
        assert step["id"] == "loop.lint#1"
        first = await complete(client, workflow_id, step["id"], {"x": 1})
        second = await complete(client, workflow_id, step["id"], {"x": 1})
        assert first["success"] is True and second["success"] is True
        assert "error" not in second or not second["error"]
        assert first["next_step"]["id"] == "loop.lint#2"
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.hits"]}))
        assert state["state"] == {"raw.hits": [{"x": 1}]}, "the append was applied once"
        assert (await next_step(client, workflow_id))["step"]["id"] == "loop.lint#2"


async def test_invalid_answer_reissues_the_step_not_a_tool_error(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages", {"rounds": 0})
        step = (await next_step(client, workflow_id))["step"]
        while step["type"] != "user_input":
            step = (await complete(client, workflow_id, step["id"], answer_for(step)))["next_step"]
        bad = await complete(client, workflow_id, "pick", "feature")
        assert bad["success"] is False
        assert "Answer main or dev" in bad["error"]
        assert bad["next_step"]["id"] == "pick"
        assert "Answer main or dev" in bad["next_step"]["instructions"]
        good = await complete(client, workflow_id, "pick", "dev")
        assert good["success"] is True and good["next_step"] is None
        assert good["messages"] == ["m5 end dev"] and good["status"] == "completed"


async def test_agent_reports_failure_and_the_workflow_fails_naming_the_step(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "messages")
        await next_step(client, workflow_id)
        reply = await complete(client, workflow_id, "ask", None, status="failed", error="model refused")
        assert reply["next_step"] is None and reply["status"] == "failed"
        answer = await next_step(client, workflow_id)
        assert answer["step"] is None and answer["status"] == "failed"
        assert "ask" in answer["error"] and "model refused" in answer["error"]


# -- a failed workflow --------------------------------------------------------------------
async def test_failed_shell_step_answers_null_step_with_exit_code_and_stderr(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "failing")
        answer = await next_step(client, workflow_id)
        assert answer["step"] is None
        assert answer["status"] == "failed"
        error = answer["error"]
        assert "boom" in error, error
        assert "3" in error and "exit" in error.lower(), error
        assert "disk quota exceeded on /srv" in error, error
        assert answer["messages"] == []  # "never shown" was never reached
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        assert status["status"] == "failed" and "disk quota" in status["error"]
        # nothing is lost on error: the state before the failure is still readable
        state = await ok(client, "workflow_state_read", {"workflow_id": workflow_id, "paths": ["raw.before"]})
        assert state["state"] == {"raw.before": 1}
        debug = await ok(client, "workflow_debug_info", {"workflow_id": workflow_id})
        boom = [h for h in debug["step_history"] if h["step_id"] == "boom"]
        assert boom and boom[-1]["status"] == "failed"


# -- errors for unknown things ----------------------------------------------------------------
async def test_unknown_workflow_is_an_actionable_error(server, mode):
    async with Client(server, mode=mode) as client:
        for tool, args in [("workflow_get_info", {"workflow": "no-such-flow"}),
                           ("workflow_start", {"workflow": "no-such-flow"}),
                           ("workflow_load_definition", {"workflow": "no-such-flow"}),
                           ("workflow_explain_plan", {"workflow": "no-such-flow"})]:
            text = await fails(client, tool, args)
            assert "no-such-flow" in text, (tool, text)
            assert "workflow_list" in text or ".aromcp" in text or "not found" in text.lower(), (tool, text)
        text = await fails(client, "workflow_start", {"workflow": "../../etc/passwd"})
        assert "passwd" in text or ".." in text


async def test_unknown_workflow_id_is_an_actionable_error(server, mode):
    async with Client(server, mode=mode) as client:
        for tool, extra in [("workflow_get_next_step", {}), ("workflow_step_complete", {"step_id": "x"}),
                            ("workflow_state_read", {}), ("workflow_state_update",
                                                         {"updates": [{"path": "raw.a", "value": 1}]}),
                            ("workflow_state_dependencies", {"field": "x"}), ("workflow_checkpoint", {}),
                            ("workflow_resume", {}), ("workflow_complete", {}), ("workflow_status", {}),
                            ("workflow_trace_transformations", {}), ("workflow_debug_info", {})]:
            text = await fails(client, tool, {"workflow_id": "wf_doesnotexist", **extra})
            assert "wf_doesnotexist" in text, (tool, text)


async def test_unknown_task_id_and_step_id(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages")
        text = await fails(client, "workflow_get_next_step", {"workflow_id": workflow_id, "task_id": "ghost_1"})
        assert "ghost_1" in text and "task_id" in text
        text = await fails(client, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": "nope"})
        assert "nope" in text and "workflow_get_next_step" in text
        await next_step(client, workflow_id)
        text = await fails(client, "workflow_step_complete", {"workflow_id": workflow_id, "step_id": "nope"})
        assert "nope" in text and "'ask'" in text, text  # names the step that is current
        text = await fails(client, "workflow_state_read", {"workflow_id": workflow_id, "task_id": "ghost_1"})
        assert "ghost_1" in text


async def test_invalid_inputs_are_all_listed(server, mode):
    async with Client(server, mode=mode) as client:
        text = await fails(client, "workflow_start", {"workflow": "messages",
                                                      "inputs": {"rounds": "many", "who": 5}})
        assert "rounds" in text and "who" in text, text
        assert "workflow_get_info" in text
        text = await fails(client, "workflow_start", {"workflow": "secrets"})
        assert "api_token" in text and "required" in text.lower(), text


# -- state ------------------------------------------------------------------------------------
async def test_state_read_update_dependencies(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages", {"who": "ann"})
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["n"] == 0 and state["doubled"] == 0 and state["inputs"]["who"] == "ann"
        update = await ok(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 5},
            {"path": "raw.hits", "operation": "append", "value": "h"},
            {"path": "state.note", "value": "x"}]})
        assert update["success"] is True
        assert set(update["updated"]) >= {"raw.n", "raw.hits", "state.note"}
        assert update["computed_changed"] == {"doubled": 10}
        read = await ok(client, "workflow_state_read", {"workflow_id": workflow_id,
                                                         "paths": ["raw.n", "doubled", "state.note", "inputs.who"]})
        assert read["state"] == {"raw.n": 5, "doubled": 10, "state.note": "x", "inputs.who": "ann"}
        deps = await ok(client, "workflow_state_dependencies", {"workflow_id": workflow_id, "field": "doubled"})
        assert deps["direct_deps"] == ["raw.n"] and deps["all_deps"] == ["raw.n"] and deps["dependents"] == []
        text = await fails(client, "workflow_state_dependencies", {"workflow_id": workflow_id, "field": "nosuch"})
        assert "nosuch" in text


@pytest.mark.parametrize("path,words", [
    ("computed.doubled", ["computed"]),
    ("inputs.who", ["inputs"]),
    ("raw.__proto__.polluted", ["__proto__"]),
    ("raw.constructor", ["constructor"]),
    ("secret.x", ["secret"]),
])
async def test_state_update_refuses_bad_paths(server, path, words):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "messages")
        text = await fails(client, "workflow_state_update",
                           {"workflow_id": workflow_id, "updates": [{"path": "raw.n", "value": 7},
                                                                    {"path": path, "value": 1}]})
        for word in words:
            assert word in text, text
        assert "raw." in text or "state." in text, f"should say what is writable: {text}"
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["n"] == 0, "a refused batch changes nothing"
        assert "polluted" not in json.dumps(state)


async def test_state_update_needs_updates(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "messages")
        text = await fails(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": []})
        assert "updates" in text
        text = await fails(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [{"value": 1}]})
        assert "path" in text
        text = await fails(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.n", "operation": "increment", "value": "lots"}]})
        assert "increment" in text or "number" in text


# -- checkpoints, resume, complete, status -----------------------------------------------------
async def test_checkpoint_and_resume_rolls_back(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages")
        step = (await next_step(client, workflow_id))["step"]
        reply = await complete(client, workflow_id, step["id"], "one")
        run_step = reply["next_step"]
        assert run_step["type"] == "agent_shell_command"
        point = await ok(client, "workflow_checkpoint", {"workflow_id": workflow_id, "reason": "before run",
                                                         "step_id": run_step["id"]})
        assert point["checkpoint_id"] and point["state_path"]
        after = await complete(client, workflow_id, run_step["id"], "world\n")
        assert after["next_step"]["type"] == "mcp_call"
        await ok(client, "workflow_state_update", {"workflow_id": workflow_id, "updates": [
            {"path": "raw.n", "operation": "increment", "value": 10}]})
        resumed = await ok(client, "workflow_resume", {"workflow_id": workflow_id,
                                                       "checkpoint_id": point["checkpoint_id"]})
        assert resumed["workflow_id"] == workflow_id and resumed["status"] == "running"
        assert resumed["state"]["n"] == 1 and resumed["state"]["echoed"] == ""
        assert resumed["state"]["said"] == "one"
        assert resumed["last_checkpoint"]["checkpoint_id"] == point["checkpoint_id"]
        assert resumed["last_checkpoint"]["reason"] == "before run"
        again = await next_step(client, workflow_id)
        assert again["step"]["id"] == run_step["id"], "the rolled-back step is delivered again"
        text = await fails(client, "workflow_resume", {"workflow_id": workflow_id, "checkpoint_id": "cp_nope"})
        assert "cp_nope" in text and "checkpoint" in text


async def test_resume_after_restart_returns_last_checkpoint(project, store_path, home):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    def server() -> Any:
        return build_server(lambda: WorkflowService(project_dir=project, store_path=store_path, home=home))

    async with Client(server(), mode="legacy") as client:
        workflow_id = await start(client, "messages")
        first = await next_step(client, workflow_id)
        point = await ok(client, "workflow_checkpoint", {"workflow_id": workflow_id, "reason": "r1"})
        await ok(client, "workflow_state_update", {"workflow_id": workflow_id,
                                                   "updates": [{"path": "raw.n", "value": 3}]})
    async with Client(server(), mode="auto") as client:  # a new server process on the same store
        resumed = await ok(client, "workflow_resume", {"workflow_id": workflow_id})
        assert resumed["status"] == "running" and resumed["state"]["n"] == 3
        assert resumed["last_checkpoint"]["checkpoint_id"] == point["checkpoint_id"]
        again = await next_step(client, workflow_id)
        assert again["step"] == first["step"] and again["messages"] == first["messages"]


async def test_resume_without_checkpoints(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "messages")
        resumed = await ok(client, "workflow_resume", {"workflow_id": workflow_id})
        assert resumed["last_checkpoint"] is None and resumed["status"] == "running"


async def test_complete_cancels_and_reports_final_state(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages")
        await next_step(client, workflow_id)
        text = await fails(client, "workflow_complete", {"workflow_id": workflow_id, "status": "bogus"})
        assert "bogus" in text or "status" in text
        done = await ok(client, "workflow_complete", {"workflow_id": workflow_id, "status": "cancelled"})
        assert done["success"] is True and done["final_state"]["n"] == 0
        answer = await next_step(client, workflow_id)
        assert answer["step"] is None and answer["status"] == "cancelled"
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        assert status["status"] == "cancelled"


async def test_status_without_id_lists_this_projects_instances(server, tmp_path, store_path, home, mode):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    other_project = make_project(tmp_path / "other")
    other = build_server(lambda: WorkflowService(project_dir=other_project, store_path=store_path, home=home))
    async with Client(other, mode="legacy") as client:
        foreign = await start(client, "messages")
    async with Client(server, mode=mode) as client:
        first = await start(client, "messages")
        second = await start(client, "fanout")
        await next_step(client, second)
        listing = await ok(client, "workflow_status")
        rows = {row["workflow_id"]: row for row in listing["instances"]}
        assert set(rows) == {first, second}, "only this project's instances"
        assert foreign not in rows
        assert rows[second]["workflow"] == "fanout" and rows[second]["status"] in ("running", "waiting")
        assert rows[second]["current_steps"] == ["fan"]
        one = await ok(client, "workflow_status", {"workflow_id": second})
        assert one["workflow"] == "fanout" and one["current_steps"] == ["fan"]
        assert one["progress"]["tasks_total"] == 3 and one["progress"]["tasks_completed"] == 0


# -- sub-agents -----------------------------------------------------------------------------------
async def test_parallel_tasks_wait_and_sub_agents(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "fanout", {"items": ["a", "b", "c"], "per_task": 2})
        answer = await next_step(client, workflow_id)
        assert answer["messages"] == ["fanning out over 3 items"]
        step = answer["step"]
        assert step["type"] == "parallel_tasks" and step["id"] == "fan"
        tasks = step["definition"]["tasks"]
        assert [t["context"]["item"] for t in tasks] == ["a", "b", "c"]
        assert {t["status"] for t in tasks} == {"pending"}
        assert step["definition"]["sub_agent_prompt"] and step["definition"]["max_parallel"] == 50
        task_ids = [t["task_id"] for t in tasks]
        early = await complete(client, workflow_id, "fan")
        assert early["success"] is False
        wait = early["next_step"]
        assert wait["type"] == "wait" and sorted(wait["definition"]["task_ids"]) == sorted(task_ids)
        # one sub-agent, two pulls of the same task: harmless, same step
        first = await next_step(client, workflow_id, task_ids[0])
        assert first["status"] == "running"
        assert first["step"]["id"] == f"{task_ids[0]}.each.think#1"
        assert first["step"]["definition"]["prompt"] == "Work on a part 0"
        assert (await next_step(client, workflow_id, task_ids[0]))["step"] == first["step"]
        # sub_agent_context carries the task id too
        ctx = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id,
                                                          "sub_agent_context": {"task_id": task_ids[0]}})
        assert ctx["step"] == first["step"]
        log = AgentLog()
        for task_id in task_ids:
            end = await ProtocolAgent(client, workflow_id, log=log).run(task_id)
            assert end["step"] is None and end["status"] == "completed"
        finish = await complete(client, workflow_id, "fan")
        assert finish["success"] is True and finish["next_step"] is None
        assert finish["messages"] == ["done: 6 results, count 6"]
        assert finish["status"] == "completed"
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert sorted(state["shared"]) == sorted(f"did: Work on {n} part {i}" for n in "abc" for i in (0, 1))
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        assert status["progress"]["tasks_completed"] == 3


async def test_redelivered_parallel_tasks_lists_only_unfinished(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "fanout", {"items": ["a", "b"], "per_task": 1})
        step = (await next_step(client, workflow_id))["step"]
        first = step["definition"]["tasks"][0]["task_id"]
        await ProtocolAgent(client, workflow_id).run(first)
        again = (await next_step(client, workflow_id))["step"]
        assert again["id"] == "fan"
        assert [t["task_id"] for t in again["definition"]["tasks"]] == [step["definition"]["tasks"][1]["task_id"]]


# -- definitions and validation ---------------------------------------------------------------------
async def test_list_info_and_load_definition(server, mode, project):
    async with Client(server, mode=mode) as client:
        listing = await ok(client, "workflow_list", {"include_global": False})
        rows = {row["name"]: row for row in listing["workflows"]}
        assert {"messages", "failing", "fanout", "secrets"} <= set(rows)
        assert rows["messages"]["source"] == "project"
        assert rows["messages"]["description"].startswith("Messages around")
        info = await ok(client, "workflow_get_info", {"workflow": "messages"})
        assert info["name"] == "messages" and info["version"] == "1.0.0"
        assert info["inputs"]["rounds"]["type"] == "integer" and info["inputs"]["rounds"]["default"] == 2
        assert Path(info["found_at"]) == project / ".aromcp" / "workflows" / "messages.yaml"
        definition = await ok(client, "workflow_load_definition", {"workflow": "fanout"})
        assert definition["name"] == "fanout" and definition["steps"][1]["type"] == "parallel_foreach"
        assert "work" in definition["sub_agent_tasks"]
        assert "total" in definition["state_schema"]["computed"]
        assert Path(definition["loaded_from"]).name == "fanout.yaml"
        everywhere = await ok(client, "workflow_list", {})
        assert "standards:fix" in {row["name"] for row in everywhere["workflows"]}


async def test_validate_by_name_and_by_text(server, mode):
    async with Client(server, mode=mode) as client:
        good = await ok(client, "workflow_validate", {"workflow": "messages"})
        assert good == {"valid": True, "errors": [], "warnings": good["warnings"]}
        bad = await ok(client, "workflow_validate", {"yaml": "name: bad\nsteps:\n  - id: a\n    type: shell_command\n"
                                                             "    command: echo\n  - id: b\n    type: teleport\n"})
        assert bad["valid"] is False
        [error] = bad["errors"]
        assert "teleport" in error["message"]
        assert (error["line"], error["column"]) == (7, 5)
        assert error["file"] == "<yaml>"
        broken = await ok(client, "workflow_validate", {"yaml": "name: x\nsteps: [\n"})
        assert broken["valid"] is False and broken["errors"][0]["line"] >= 2
        text = await fails(client, "workflow_validate", {})
        assert "workflow" in text and "yaml" in text


async def test_explain_plan_for_standards_fix(server, mode):
    async with Client(server, mode=mode) as client:
        plan = await ok(client, "workflow_explain_plan", {"workflow": "standards:fix", "inputs": {"batch_size": 2}})
        ids = [s["step_id"] for s in plan["steps"]]
        assert "detect_files" in ids and "fix_batches" in ids
        assert any("get_hints" in i for i in ids)
        assert set(plan["required_tools"]) == {"hints_for_file", "lint_project"}
        by_step = plan["estimated_sub_agents"]["by_step"]
        assert "fix_batches" in by_step  # depends on a shell command: not known in advance
        assert plan["program"]["standards:fix"]["main"]
        text = await fails(client, "workflow_explain_plan", {"workflow": "standards:fix",
                                                             "inputs": {"batch_size": "three"}})
        assert "batch_size" in text


# -- transforms, traces, debug ------------------------------------------------------------------
async def test_test_transformation_success_and_js_errors(server, mode):
    async with Client(server, mode=mode) as client:
        good = await ok(client, "workflow_test_transformation",
                        {"transform": "input.filter(x => x > 1).map(x => x * 10)", "input": [1, 2, 3]})
        assert good["success"] is True and good["output"] == [20, 30]
        assert good["execution_time_ms"] >= 0
        body = await ok(client, "workflow_test_transformation",
                        {"transform": "const s = input.reduce((a, b) => a + b, 0);\nreturn {sum: s};", "input": [1, 2]})
        assert body["success"] is True and body["output"] == {"sum": 3}
        thrown = await ok(client, "workflow_test_transformation",
                          {"transform": "input.missing.deeper", "input": {}})
        assert thrown["success"] is False and "TypeError" in thrown["error"]
        syntax = await ok(client, "workflow_test_transformation", {"transform": "input.map(x => ", "input": []})
        assert syntax["success"] is False and syntax["error"]


async def test_runaway_transform_is_stopped_and_server_keeps_serving(server):
    async with Client(server, mode="legacy") as client:
        loop = await ok(client, "workflow_test_transformation", {"transform": "while (true) {}", "input": 1})
        assert loop["success"] is False
        assert "time" in loop["error"].lower()
        assert loop["execution_time_ms"] < 5000
        after = await ok(client, "workflow_test_transformation", {"transform": "input + 1", "input": 1})
        assert after["output"] == 2


async def test_traces_and_debug_info_after_a_run(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "messages")
        await ProtocolAgent(client, workflow_id).run()
        traces = (await ok(client, "workflow_trace_transformations", {"workflow_id": workflow_id}))["traces"]
        doubled = [t for t in traces if t["field"] == "doubled"]
        assert doubled, traces
        assert doubled[-1]["output"] == 2 and doubled[-1]["input"] == 1
        assert all("duration_ms" not in t for t in traces)
        timed = (await ok(client, "workflow_trace_transformations",
                          {"workflow_id": workflow_id, "field": "doubled", "include_timing": True}))["traces"]
        assert timed and all(t["field"] == "doubled" and "duration_ms" in t for t in timed)
        assert (await ok(client, "workflow_trace_transformations",
                         {"workflow_id": workflow_id, "field": "nosuch"}))["traces"] == []
        debug = await ok(client, "workflow_debug_info", {"workflow_id": workflow_id})
        assert debug["current_step"] is None
        history = [h["step_id"] for h in debug["step_history"]]
        for step_id in ("ask", "run", "loop.lint#1", "loop.lint#2", "pick"):
            assert step_id in history, history
        assert all(h["status"] == "success" for h in debug["step_history"] if h["step_id"] in ("ask", "pick"))
        assert debug["state_size"]["raw_bytes"] > 0
        assert "avg_transformation_time" in debug["performance"]


async def test_secret_inputs_never_appear_in_traces_or_debug(server, mode):
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "secrets", {"api_token": SECRET})
        await ProtocolAgent(client, workflow_id).run()
        traces = await ok(client, "workflow_trace_transformations", {"workflow_id": workflow_id,
                                                                      "include_timing": True})
        assert [t["field"] for t in traces["traces"]].count("auth_header") >= 2
        debug = await ok(client, "workflow_debug_info", {"workflow_id": workflow_id})
        for name, payload in (("traces", traces), ("debug", debug)):
            text = json.dumps(payload)
            assert SECRET not in text, f"{name} leaks the api_token: {text[:400]}"
            assert SECRET[3:15] not in text
        assert "***" in json.dumps(traces)
        status = await ok(client, "workflow_status", {"workflow_id": workflow_id})
        assert SECRET not in json.dumps(status)


# -- progress, cancellation, the call budget -------------------------------------------------------
SLOW_SHELL = """
name: slow-shell
steps:
  - id: wait
    type: shell_command
    command: "sleep 1.3; echo done"
    state_update:
      path: raw.out
  - id: ask
    type: agent_prompt
    prompt: "after {{ out }}"
"""


@pytest.mark.slow
async def test_long_shell_command_reports_progress(tmp_path, home):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "p", {"slow-shell": SLOW_SHELL})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    seen: list[tuple[float, Any, Any]] = []

    async def progress(done: float, total: Any, message: Any) -> None:
        seen.append((done, total, message))

    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "slow-shell")
        result = await client.call_tool("workflow_get_next_step", {"workflow_id": workflow_id},
                                        progress_callback=progress)
        assert not result.is_error
        assert result.structured_content["step"]["definition"]["prompt"] == "after done"
    assert seen and seen[0][0] >= 1  # the default interval: about a second
    assert re.fullmatch(r"step wait: command running for [\d.]+ s", seen[0][2])


async def test_completing_a_delivered_step_after_cancel_says_cancelled(server):
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "fanout")
        step = (await next_step(client, workflow_id))["step"]
        task_id = step["definition"]["tasks"][0]["task_id"]
        delivered = (await next_step(client, workflow_id, task_id))["step"]
        await ok(client, "workflow_complete", {"workflow_id": workflow_id, "status": "cancelled"})
        result = await client.call_tool("workflow_step_complete", {"workflow_id": workflow_id, "task_id": task_id,
                                                                   "step_id": delivered["id"], "result": "x"})
        text = json.dumps(result.structured_content) if not result.is_error else result.content[0].text
        assert "never delivered" not in text
        assert "cancel" in text


def git_project(root: Path, files: list[str]) -> Path:
    import subprocess

    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "i"],
                   cwd=root, check=True)
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x = 1\n")
    return root


STANDARDS_FILES = ["src/a.py", "src/b.py", "src/c.py", "src/d.py", "src/e.py", "node_modules/x.js"]


def standards_answer(step: dict[str, Any]) -> Any:
    if step["type"] == "mcp_call" and step["definition"]["method"] == "hints_for_file":
        return {"hints": ["use snake_case"]}
    if step["type"] == "mcp_call":
        return {"errors": 0}
    return 2  # apply_hints: number of changes


@pytest.mark.parametrize("economical", [True, False], ids=["economical", "seed"])
async def test_standards_fix_tool_calls_within_budget(tmp_path, home, economical):
    """The budget (docs/performance.md): an economical agent needs at most N + T + 2 tool calls
    (N agent-performed steps, T sub-agent tasks); the seed protocol needs get_next_step +
    step_complete per step."""
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = git_project(tmp_path / "repo", STANDARDS_FILES)
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    async with Client(server, mode="legacy") as client:
        log = AgentLog()
        log.count("workflow_start")
        workflow_id = await start(client, "standards:fix", {"batch_size": 2})
        end = await ProtocolAgent(client, workflow_id, economical=economical, answerer=standards_answer,
                                  log=log).run()
        assert end["status"] == "completed"
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
    files, tasks = 5, 3
    assert state["summary"] == {"files": files, "batches": tasks, "fixes": 2 * files, "failed_batches": 0}
    agent_steps = len(log.steps)  # every step handed to an agent, parallel_tasks included
    assert agent_steps == 3 * files + 1
    assert log.messages[-1] == (f"Standards fix complete: {files} files in {tasks} batches, {2 * files} fixes "
                                f"applied, 0 batches failed.")
    if economical:
        assert log.total_calls <= agent_steps + tasks + 2, log.calls
    else:
        assert log.total_calls == 1 + 2 * agent_steps + tasks + 1, log.calls


CHILD = """
name: child
inputs:
  who:
    type: string
    required: true
default_state:
  raw:
    greeting: ""
steps:
  - id: ask
    type: agent_prompt
    prompt: "greet {{ inputs.who }}"
    state_update:
      path: raw.greeting
  - type: user_message
    message: "child says {{ greeting }}"
"""
PARENT = """
name: parent
imports: ["child.yaml"]
default_state:
  raw:
    x: 1
error_handling:
  on_error: checkpoint_and_fail
  error_collection:
    state_path: raw.errors
  on_failure:
    - type: user_message
      message: "cleanup after {{ error.message }}"
steps:
  - id: inc
    type: include_workflow
    workflow: child
    inputs:
      who: "bob"
    state_update:
      path: raw.child_result
  - type: user_message
    message: "parent sees {{ child_result.greeting }}"
  - id: boom
    type: shell_command
    command: "echo bad >&2; exit 7"
"""


async def test_include_then_failure_handler_messages_arrive_with_the_failure(tmp_path, home, mode):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "p", {"child": CHILD, "parent": PARENT})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    async with Client(server, mode=mode) as client:
        workflow_id = await start(client, "parent")
        agent = ProtocolAgent(client, workflow_id)
        end = await agent.run()
        assert [s[2] for s in agent.log.steps] == ["inc.ask"]  # the child's step, id prefixed by the include
        assert end["status"] == "failed" and "boom" in end["error"] and "7" in end["error"]
        assert agent.log.messages == ["child says did: greet bob", "parent sees did: greet bob",
                                      f"cleanup after {end['error']}"]
        again = await next_step(client, workflow_id)
        assert again["step"] is None and again["status"] == "failed" and again["error"] == end["error"]
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["child_result"]["greeting"] == "did: greet bob"
        assert [e["step_id"] for e in state["errors"]] == ["boom"]


TASK_MESSAGES = """
name: task-messages
steps:
  - type: user_message
    message: "main start"
  - id: pf
    type: parallel_foreach
    items: "{{ ['a', 'b'] }}"
    sub_agent_task: t
  - type: user_message
    message: "main end"
sub_agent_tasks:
  t:
    steps:
      - type: user_message
        message: "task {{ item }} begins"
      - id: q
        type: agent_prompt
        prompt: "do {{ item }}"
      - type: user_message
        message: "task {{ item }} ends"
"""


@pytest.mark.parametrize("economical", [True, False], ids=["economical", "seed"])
async def test_messages_of_sub_agent_tasks_arrive_once_with_the_tasks_answers(tmp_path, home, economical):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "p", {"task-messages": TASK_MESSAGES})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "task-messages")
        agent = ProtocolAgent(client, workflow_id, economical=economical)
        await agent.run()
    messages = agent.log.messages
    assert messages[0] == "main start" and messages[-1] == "main end"
    assert sorted(messages[1:-1]) == ["task a begins", "task a ends", "task b begins", "task b ends"]
    for item in "ab":
        assert messages.index(f"task {item} begins") < messages.index(f"task {item} ends")
    assert "user_message" not in {kind for _, kind, _ in agent.log.steps}


RUNAWAY = """
name: runaway
default_state:
  raw:
    x: 0
state_schema:
  computed:
    spin:
      from: raw.x
      transform: "{ while (input > 0) {} return input; }"
steps:
  - id: ask
    type: agent_prompt
    prompt: "x"
"""


async def test_runaway_computed_field_refuses_the_update_within_its_timeout(tmp_path, home):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "p", {"runaway": RUNAWAY})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "runaway")
        began = time.perf_counter()
        text = await fails(client, "workflow_state_update", {"workflow_id": workflow_id,
                                                             "updates": [{"path": "raw.x", "value": 1}]})
        assert time.perf_counter() - began < 5
        assert "spin" in text and "timed out" in text, text
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert state["x"] == 0 and state["spin"] == 0, "the refused batch changed nothing"
        assert (await next_step(client, workflow_id))["step"]["id"] == "ask", "the server keeps serving"


LEAKY = """
name: leaky
inputs:
  api_token:
    type: string
    required: true
steps:
  - id: call_api
    type: shell_command
    command: "echo \\"401 for token {{ inputs.api_token | raw }}\\" >&2; exit 22"
"""


async def test_a_secret_echoed_by_a_failing_command_is_masked_in_failure_answers(tmp_path, home):
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "p", {"leaky": LEAKY})
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home))
    async with Client(server, mode="legacy") as client:
        workflow_id = await start(client, "leaky", {"api_token": SECRET})
        failed = await next_step(client, workflow_id)
        assert failed["status"] == "failed" and "22" in failed["error"]
        answers = {"get_next_step": failed,
                   "status": await ok(client, "workflow_status", {"workflow_id": workflow_id}),
                   "debug_info": await ok(client, "workflow_debug_info", {"workflow_id": workflow_id}),
                   "status list": await ok(client, "workflow_status", {})}
    leaks = [name for name, answer in answers.items() if SECRET in json.dumps(answer)]
    assert not leaks, f"the api_token appears in: {leaks}"
