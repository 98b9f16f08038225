"""More ways a hostile agent tried to overturn what the user decided, each refused.

Probed after issue 31's attacks were closed (`test_user_authority.py`): other spellings,
operations, parents and children of the owned path; the same name in the other tier
(`raw.x` shadows `state.x` in a condition); moving a list item onto the answer's index;
sub-agent tasks; fork edits and fork points; replays through retry and resume; a declined
question's fallback; the parent's copy of an included workflow's answer; and a second
session without forms answering a question that is out in a form.  Seven of them got
through when first written (the tier, the fork edit of the other tier, the list shift,
the declined question, the include, the second session) and are fixed at the root in
`interpreter.ownership` and the form's mark (`WorkflowRun.asking_user`).

A real in-memory `mcp.Client` in both protocol eras, the elicitation callback playing the
user, and a real shell deploy that appends to `deploys.log`, so "the deploy ran" is a file.
An agent step whose own `state_update` targets the answer's path may still write it: that is
the workflow author's choice (docs/security.md), not the agent's.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from srv_helpers import fails, ok, tool_text
from test_user_authority import DEPLOY as BASE_DEPLOY
from test_user_authority import User, deploys, instances

# the issue-31 deploy workflow, with one more field the agent may write
DEPLOY = BASE_DEPLOY.replace('default_state: {raw: {confirmed: "no"}}',
                            'default_state: {raw: {confirmed: "no", other: 0}}')


async def start_to(client: Any, workflow: str, first: str) -> str:
    wid = str((await ok(client, "workflow_start", {"workflow": workflow}))["workflow_id"])
    step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
    assert step["id"] == first, step
    return wid


async def state_of(client: Any, wid: str) -> dict[str, Any]:
    return (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]


# -- 1. other spellings / operations / parent / child of the owned path ----------------------------
SPELLINGS = [
    ('raw["confirmed"]', "set", "yes"),
    ("raw['confirmed']", "set", "yes"),
    ("  raw.confirmed  ", "set", "yes"),
    ("raw.confirmed\n", "set", "yes"),
    ("raw.confirmed", "delete", None),
    ("raw.confirmed", "append", "yes"),
    ("raw.confirmed", "increment", 1),
    ("raw.confirmed", "merge", {"x": 1}),
    ("raw.confirmed[0]", "set", "y"),
    ("raw.confirmed.length", "set", 3),
    ('raw["confirmed"].x', "set", "yes"),
]


@pytest.mark.parametrize("path,operation,value", SPELLINGS)
async def test_spellings_and_operations_on_the_owned_path(make_server: Any, mode: str, path: str,
                                                          operation: str, value: Any) -> None:
    server, project = make_server({"deploy": DEPLOY})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "deploy", "build")
        update: dict[str, Any] = {"path": path, "operation": operation}
        if value is not None:
            update["value"] = value
        error = await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [update]})
        assert "Deploy to production?" in error and "refused" in error, error
        state = await state_of(client, wid)
        assert state["confirmed"] == "no"
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert deploys(project) == 0


async def test_a_batch_with_one_owned_write_changes_nothing(make_server: Any, mode: str) -> None:
    server, project = make_server({"deploy": DEPLOY})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "deploy", "build")
        await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.other", "value": 5}, {"path": 'raw["confirmed"]', "value": "yes"}]})
        state = await state_of(client, wid)
        assert state["confirmed"] == "no" and state["other"] == 0


NESTED = """
name: nested
description: "answer kept under raw.gate.answer"
version: "1.0.0"
default_state: {raw: {gate: {answer: "no", note: ""}}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.gate.answer}
  - id: build
    type: agent_prompt
    prompt: "build it"
  - id: deploy
    type: shell_command
    when: "{{ raw.gate.answer === 'yes' }}"
    command: "echo deployed >> deploys.log"
  - id: done
    type: agent_prompt
    prompt: "say done"
"""

PARENTS = [
    ("raw.gate", "set", {"answer": "yes"}),
    ("raw.gate", "merge", {"answer": "yes"}),
    ("raw.gate", "delete", None),
    ('raw["gate"]', "merge", {"answer": "yes"}),
    ('raw.gate["answer"]', "set", "yes"),
    ("raw['gate'].answer", "set", "yes"),
]


@pytest.mark.parametrize("path,operation,value", PARENTS)
async def test_parent_of_a_nested_owned_path(make_server: Any, mode: str, path: str, operation: str,
                                             value: Any) -> None:
    server, project = make_server({"nested": NESTED})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "nested", "build")
        update: dict[str, Any] = {"path": path, "operation": operation}
        if value is not None:
            update["value"] = value
        error = await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [update]})
        assert "Deploy to production?" in error, error
        # a sibling is free (not the user's), and changing it does not touch the answer
        await ok(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.gate.note", "value": "hi"}]})
        assert (await state_of(client, wid))["gate"] == {"answer": "no", "note": "hi"}
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert deploys(project) == 0


# -- 2. tier shadowing: the answer lives in state.*, the agent writes raw.* of the same name -------
SHADOW = DEPLOY.replace("default_state: {raw: {confirmed: \"no\", other: 0}}",
                        "default_state: {state: {confirmed: \"no\"}}").replace(
    "state_update: {path: raw.confirmed}", "state_update: {path: state.confirmed}")


async def test_raw_cannot_shadow_a_user_owned_state_path(make_server: Any, mode: str) -> None:
    """`flattened()` is state < raw < computed: `confirmed` in a condition reads raw.confirmed
    when there is one.  The user's answer is state.confirmed; the agent writes raw.confirmed."""
    server, project = make_server({"deploy": SHADOW})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "deploy", "build")
        await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "state.confirmed", "value": "yes"}]})  # the owned path itself: refused
        reply = await client.call_tool("workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.confirmed", "value": "yes"}]})
        state = await state_of(client, wid)
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert (state["confirmed"], deploys(project)) == ("no", 0), \
        f"raw.confirmed shadows the user's answer: {tool_text(reply)} -> {state}; deploys={deploys(project)}"


async def test_the_consent_form_shows_the_edits_the_fork_makes(make_server: Any, mode: str) -> None:
    """A fork that reuses the user's answers asks them first; the form says what the agent
    changes in the copy too, not only which answers it keeps."""
    server, _project = make_server({"deploy": DEPLOY})
    user = User(("accept", "no"), ("allow", False))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start_to(client, "deploy", "build")
        before = await instances(client)
        reply = await client.call_tool("workflow_fork", {"workflow_id": wid, "at": "build", "edits": {"raw.other": 7}})
        assert reply.is_error and await instances(client) == before  # declined: nothing created
    assert "'Deploy to production?' → \"no\"" in user.forms[-1] and "It also sets raw.other = 7." in user.forms[-1], \
        user.forms[-1]


async def test_a_fork_edit_of_raw_shadows_the_users_state_answer(make_server: Any, mode: str) -> None:
    """The consent form says 'reusing your answer ... → "no"'; the edit makes it read "yes"."""
    server, project = make_server({"deploy": SHADOW})
    user = User(("accept", "no"), ("allow", True))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start_to(client, "deploy", "build")
        reply = await client.call_tool("workflow_fork", {"workflow_id": wid, "at": "build",
                                                         "edits": {"raw.confirmed": "yes"}})
        seen: Any = tool_text(reply)[:300]
        if not reply.is_error:
            forked = reply.structured_content
            fid = forked["workflow_id"]
            await ok(client, "workflow_get_next_step", {"workflow_id": fid})
            await ok(client, "workflow_step_complete", {"workflow_id": fid, "step_id": "build", "result": "ok"})
            seen = forked["state"]
    assert reply.is_error or (seen["confirmed"], deploys(project)) == ("no", 0), \
        f"consent form shown: {user.forms[-1]!r}; fork state {seen}; deploys={deploys(project)}"


# -- 3. list index shift: the answer is one item of a list -----------------------------------------
LISTED = """
name: listed
description: "the answer is the second item of a list"
version: "1.0.0"
default_state: {raw: {approvals: ["auto", "pending"]}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: "raw.approvals[1]"}
  - id: build
    type: agent_prompt
    prompt: "build it"
  - id: deploy
    type: shell_command
    when: "{{ raw.approvals[1] === 'yes' }}"
    command: "echo deployed >> deploys.log"
  - id: done
    type: agent_prompt
    prompt: "say done"
"""


async def test_sibling_list_writes_cannot_move_the_answer(make_server: Any, mode: str) -> None:
    """Owned raw.approvals[1]. The agent appends raw.approvals[2]="yes", then deletes
    raw.approvals[0]: neither path overlaps the owned one, but the item at [1] is now "yes"."""
    server, project = make_server({"listed": LISTED})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "listed", "build")
        await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.approvals[1]", "value": "yes"}]})  # the owned path itself: refused
        replies = []
        for update in ({"path": "raw.approvals[2]", "value": "yes"},
                       {"path": "raw.approvals[0]", "operation": "delete"}):
            r = await client.call_tool("workflow_state_update", {"workflow_id": wid, "updates": [update]})
            replies.append((update, r.is_error, tool_text(r)[:200]))
        state = await state_of(client, wid)
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert (state["approvals"][1], deploys(project)) == ("no", 0), \
        f"{replies} -> approvals={state['approvals']}; deploys={deploys(project)}"


# -- 5. a sub-agent task writes the owned path ------------------------------------------------------
FANNED = """
name: fanned
description: "ask, then fan out, then deploy when the user said yes"
version: "1.0.0"
default_state: {raw: {confirmed: "no", notes: []}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
  - id: fan
    type: parallel_foreach
    items: ["a"]
    sub_agent_task: work
  - id: deploy
    type: shell_command
    when: "{{ confirmed === 'yes' }}"
    command: "echo deployed >> deploys.log"
sub_agent_tasks:
  work:
    description: "one agent step"
    steps:
      - id: think
        type: agent_prompt
        prompt: "think about {{ item }}"
        state_update: {path: raw.notes, operation: append}
"""


async def test_a_sub_agent_task_cannot_write_the_answer(make_server: Any, mode: str) -> None:
    server, project = make_server({"fanned": FANNED})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "fanned", "fan")
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        [task] = step["definition"]["tasks"]
        tid = task["task_id"]
        for args in ({"task_id": tid}, {"task_id": "main"}, {"sub_agent_context": {"task_id": tid}}):
            r = await client.call_tool("workflow_state_update", {
                "workflow_id": wid, "updates": [{"path": "raw.confirmed", "value": "yes"}], **args})
            assert r.is_error, f"{args}: accepted {r.structured_content}"
        sub = (await ok(client, "workflow_get_next_step", {"workflow_id": wid, "task_id": tid}))["step"]
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": sub["id"], "task_id": tid,
                                                    "result": "x"})
        await ok(client, "workflow_get_next_step", {"workflow_id": wid, "task_id": tid})
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "fan", "result": "ok"})
        state = await state_of(client, wid)
    assert state["confirmed"] == "no"
    assert deploys(project) == 0


# -- 6. a declined question whose on_error stores a fallback ----------------------------------------
DECLINE = DEPLOY.replace('    state_update: {path: raw.confirmed}\n',
                         '    state_update: {path: raw.confirmed}\n    on_error: continue\n'
                         '    fallback_value: "no"\n', 1)


async def test_the_agent_cannot_flip_a_declined_question(make_server: Any, mode: str) -> None:
    """The user declines the form; the workflow stores its fallback "no" and goes on.  The
    user's decision (not to approve) should hold as firmly as an explicit "no"."""
    server, project = make_server({"deploy": DECLINE})
    async with Client(server, mode=mode, elicitation_callback=User(("decline",))) as client:
        wid = await start_to(client, "deploy", "build")
        before = await state_of(client, wid)
        reply = await client.call_tool("workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.confirmed", "value": "yes"}]})
        state = await state_of(client, wid)
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert before["confirmed"] == "no"
    assert (state["confirmed"], deploys(project)) == ("no", 0), \
        f"accepted ({tool_text(reply)[:200]}) -> {state}; deploys={deploys(project)}"


# -- 7. fork variants -------------------------------------------------------------------------------
async def test_fork_from_a_checkpoint_or_version_cannot_edit_the_answer(make_server: Any, mode: str) -> None:
    server, project = make_server({"deploy": DEPLOY})
    user = User(("accept", "no"), ("allow", True), ("allow", True), ("allow", True), ("allow", True))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start_to(client, "deploy", "build")
        point = await ok(client, "workflow_checkpoint", {"workflow_id": wid, "reason": "after answer"})
        version = (await ok(client, "workflow_status", {"workflow_id": wid}))
        before = await instances(client)
        attempts: list[dict[str, Any]] = [
            {"checkpoint_id": point["checkpoint_id"], "edits": {"raw.confirmed": "yes"}},
            {"edits": {"raw.confirmed": "yes"}},  # as it stands now
            {"at": "build", "edits": {'raw["confirmed"]': "yes"}},
            {"at": "build", "edits": {" raw.confirmed ": "yes"}},
            {"at": "build", "edits": {"raw.confirmed.x": "yes"}},
        ]
        results = []
        for extra in attempts:
            r = await client.call_tool("workflow_fork", {"workflow_id": wid, **extra})
            results.append((extra, r.is_error, tool_text(r)[:160] if r.is_error else r.structured_content["state"]))
        assert await instances(client) == before, results
        assert all(is_error for _, is_error, _ in results), results
        assert version  # read for the report
    assert deploys(project) == 0


async def test_fork_edit_of_the_parent_tier_is_refused(make_server: Any, mode: str) -> None:
    """`raw` as a whole: owner_of() returns None for a path the parser refuses, so the
    check falls to the later parse; the user, asked to allow reuse, says yes."""
    server, project = make_server({"deploy": DEPLOY})
    user = User(("accept", "no"), ("allow", True))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start_to(client, "deploy", "build")
        before = await instances(client)
        r = await client.call_tool("workflow_fork", {"workflow_id": wid, "at": "build",
                                                     "edits": {"raw": {"confirmed": "yes"}}})
        created = await instances(client) - before
        assert r.is_error and created == 0, (tool_text(r)[:300], created)


async def test_fork_before_the_answer_with_an_edit_still_asks_the_user(make_server: Any, mode: str) -> None:
    """Fork at a point before the question (version 1), editing the path the question will
    write: the fork must ask the user again, and their answer is what counts."""
    server, project = make_server({"deploy": DEPLOY})
    user = User(("accept", "no"), ("accept", "no"))
    async with Client(server, mode=mode, elicitation_callback=user) as client:
        wid = await start_to(client, "deploy", "build")
        forked = await ok(client, "workflow_fork", {"workflow_id": wid, "version": 1,
                                                    "edits": {"raw.confirmed": "yes"}})
        fid = forked["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": fid}))["step"]
        assert step["id"] == "build" and len(user.forms) == 2, (step, user.forms)
        await ok(client, "workflow_step_complete", {"workflow_id": fid, "step_id": "build", "result": "ok"})
        assert (await state_of(client, fid))["confirmed"] == "no"
    assert deploys(project) == 0


# -- 8. retry / resume used to replay the consent-gated command -------------------------------------
VERIFY = """
name: deploy
description: "ask, deploy, then verify"
version: "1.0.0"
default_state: {raw: {confirmed: "no"}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
  - id: deploy
    type: shell_command
    when: "{{ confirmed === 'yes' }}"
    command: "echo deployed >> deploys.log"
  - id: verify
    type: agent_prompt
    prompt: "verify it"
"""


@pytest.mark.parametrize("how", ["retry", "resume"])
async def test_retry_after_a_later_failure_does_not_deploy_again(make_server: Any, mode: str, how: str) -> None:
    server, project = make_server({"deploy": VERIFY})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "yes"))) as client:
        wid = await start_to(client, "deploy", "verify")
        assert deploys(project) == 1
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "verify", "status": "failed",
                                                    "error": "nope"})
        for _ in range(3):
            if how == "retry":
                await ok(client, "workflow_retry", {"workflow_id": wid})
            else:
                await ok(client, "workflow_resume", {"workflow_id": wid})
            step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
            assert step["id"] == "verify", step
            await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "verify",
                                                        "status": "failed", "error": "again"})
    assert deploys(project) == 1


LOOPED = """
name: deploy
description: "deploy inside a loop body, followed by an agent step"
version: "1.0.0"
default_state: {raw: {confirmed: "no", n: 0}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
  - id: loop
    type: while
    condition: "{{ n < 1 }}"
    max_iterations: 5
    body:
      - id: deploy
        type: shell_command
        when: "{{ confirmed === 'yes' }}"
        command: "echo deployed >> deploys.log"
      - id: verify
        type: agent_prompt
        prompt: "verify it"
      - id: count
        type: state_update
        path: raw.n
        operation: increment
        value: 1
"""


async def test_retry_inside_a_loop_does_not_deploy_again(make_server: Any, mode: str) -> None:
    server, project = make_server({"deploy": LOOPED})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "yes"))) as client:
        wid = str((await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"])
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert deploys(project) == 1, step
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": step["id"], "status": "failed",
                                                    "error": "nope"})
        await ok(client, "workflow_retry", {"workflow_id": wid})
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert "verify" in step["id"], step
    assert deploys(project) == 1


# -- 9. a second session whose client shows no forms answers the open question ----------------------
async def test_a_formless_second_session_cannot_answer_the_users_open_question(make_server: Any) -> None:
    """The question is out in session A (a form).  While it is open, a session B that
    declares no elicitation completes the gate with "yes"; then the user says "no"."""
    server, project = make_server({"deploy": DEPLOY})
    holder: dict[str, Any] = {}

    async def user(_context: Any, params: Any) -> ElicitResult:
        async with Client(server, mode="legacy") as other:
            holder["reply"] = await other.call_tool("workflow_step_complete", {
                "workflow_id": holder["wid"], "step_id": "gate", "result": "yes"})
        return ElicitResult(action="accept", content={"answer": "no"})

    async with Client(server, mode="legacy", elicitation_callback=user) as client:
        holder["wid"] = wid = str((await ok(client, "workflow_start", {"workflow": "deploy"}))["workflow_id"])
        r = await client.call_tool("workflow_get_next_step", {"workflow_id": wid})
        state = await state_of(client, wid)
        nxt = await client.call_tool("workflow_get_next_step", {"workflow_id": wid})
        step = (nxt.structured_content or {}).get("step") or {}
        if step.get("id") == "build":
            await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    b = holder.get("reply")
    assert b is not None and (b.structured_content or {}).get("success") is False, tool_text(b) if b else None
    assert "question for the user" in tool_text(b)
    assert (state["confirmed"], deploys(project)) == ("no", 0), \
        (f"B: {tool_text(b)[:400] if b else None} || A: {tool_text(r)[-300:]} || {state}; deploys={deploys(project)}")


# -- 10. the answer given inside an included workflow, read by the parent ---------------------------
ASK_CHILD = """
name: ask
description: "the question, in a workflow of its own"
version: "1.0.0"
default_state: {raw: {confirmed: "no"}}
steps:
  - id: gate
    type: user_input
    prompt: "Deploy to production?"
    choices: ["yes", "no"]
    state_update: {path: raw.confirmed}
"""

ASK_PARENT = """
name: parent
description: "include the question, build, deploy on yes"
version: "1.0.0"
steps:
  - id: ask
    type: include_workflow
    workflow: ask
  - id: build
    type: agent_prompt
    prompt: "build it"
  - id: deploy
    type: shell_command
    when: "{{ ask.confirmed === 'yes' }}"
    command: "echo deployed >> deploys.log"
  - id: done
    type: agent_prompt
    prompt: "say done"
"""


async def test_the_parents_copy_of_an_included_answer_stays_the_users(make_server: Any, mode: str) -> None:
    """The child's final state lands at raw.ask in the parent; the user's answer is
    raw.ask.confirmed there, and a later step acts on it."""
    server, project = make_server({"ask": ASK_CHILD, "parent": ASK_PARENT})
    async with Client(server, mode=mode, elicitation_callback=User(("accept", "no"))) as client:
        wid = await start_to(client, "parent", "build")
        reply = await client.call_tool("workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw.ask.confirmed", "value": "yes"}]})
        state = await state_of(client, wid)
        await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "build", "result": "ok"})
    assert (state["ask"]["confirmed"], deploys(project)) == ("no", 0), \
        f"{tool_text(reply)[:200]} -> {state}; deploys={deploys(project)}"
