"""Editing a workflow under running instances: `definition changed since start`, and
`aromcp-workflows migrate` moving an instance onto the edited file or refusing, exactly.

The instances are started and driven as a client drives them: over MCP (an in-memory
`mcp.Client` on the real server) or through the typed service; the move is the real CLI.
"Nothing written" is checked on the store: its version of the instance and its history.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from aromcp_workflows.app.service import WorkflowService
from tests.e2e.e2e_helpers import ROOT
from tests.testing.conftest import Project, parent_workflow

# The two versions of demo:review that docs/evolving.md shows, as it shows them.
REVIEW, EDITED = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "evolving.md").read_text(encoding="utf-8"),
                            re.S)[:2]


def waiting(service: WorkflowService, workflow: str = "demo:review", inputs: dict[str, Any] | None = None) -> str:
    workflow_id = service.start(workflow, inputs).workflow_id
    service.next_step(workflow_id)
    return workflow_id


def stored(service: WorkflowService, workflow_id: str) -> tuple[int, list[str]]:
    """The store's version of an instance and its history's kinds: what `nothing written` checks."""
    store = service.instances.store
    return store.version(workflow_id), [event.kind for event in store.history(workflow_id)]


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def test_a_waiting_instance_moves_onto_the_edited_file_and_runs_its_new_step(project: Project) -> None:
    from aromcp_workflows.server.mcp import build_server

    path = project.write("demo:review.yaml", REVIEW)
    server = build_server(project.service)
    async with Client(server, mode="legacy") as client:
        workflow_id = (await call(client, "workflow_start", workflow="demo:review"))["workflow_id"]
        step = (await call(client, "workflow_get_next_step", workflow_id=workflow_id))["step"]
        assert step["id"] == "review.ask#1"
        assert "definition_changed" not in await call(client, "workflow_status", workflow_id=workflow_id)
        path.write_text(EDITED, encoding="utf-8")
        assert (await call(client, "workflow_status", workflow_id=workflow_id))["definition_changed"] is True
        debug = await call(client, "workflow_debug_info", workflow_id=workflow_id)
        assert debug["definition_changed"] is True and "migrations" not in debug

        done = project.cli("migrate", workflow_id)
        assert done.code == 0, done.out + done.err
        assert done.out.splitlines() == [
            f"{workflow_id} (demo:review): moved onto .aromcp/workflows/demo:review.yaml",
            "  the main thread: goes on at review.ask (line 16)",
            '  input channel: new, takes its default "#ci"',
            "  state raw.count: new in default_state, set to 0",
            "  computed fields recomputed: shipped"]

        assert "definition_changed" not in await call(client, "workflow_status", workflow_id=workflow_id)
        first = await call(client, "workflow_step_complete", workflow_id=workflow_id, step_id="review.ask#1",
                           result="yes")
        assert first["next_step"]["id"] == "review.ask#2"
        last = await call(client, "workflow_step_complete", workflow_id=workflow_id, step_id="review.ask#2",
                          result="no")
        assert last["status"] == "completed" and last["messages"] == ["1 of 2 shipped; notify #ci"]
        state = (await call(client, "workflow_state_read", workflow_id=workflow_id))["state"]
        assert state["count"] == 0 and state["shipped"] == 1 and state["inputs"] == {"channel": "#ci"}
        debug = await call(client, "workflow_debug_info", workflow_id=workflow_id)
    assert [m["file"] for m in debug["migrations"]] == [str(path.resolve())]
    old = debug["migrations"][0]["old_definition"]["definitions"]["demo:review"]["definition"]
    assert [s["id"] for s in old["steps"]] == ["review", None] and "channel" not in old["inputs"]
    text = project.cli("debug", workflow_id).out
    assert "Migrated at " in text and "migrations[].old_definition" in text


def test_an_unsafe_edit_is_refused_with_the_step_named_and_nothing_written(project: Project) -> None:
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    workflow_id = waiting(service)
    path.write_text(EDITED.replace("id: ask", "id: question"), encoding="utf-8")
    before = stored(service, workflow_id)
    done = project.cli("migrate", workflow_id)
    assert done.code == 1
    assert done.out.splitlines() == [
        f"{workflow_id} (demo:review): refused: nothing was changed",
        "  .aromcp/workflows/demo:review.yaml:12: step review.ask is gone from demo:review.yaml (the loop at "
        "line 12 no longer holds it)"]
    assert stored(service, workflow_id) == before
    assert "definition changed since start" in project.cli("status", workflow_id).out
    path.rename(path.with_suffix(".moved"))  # a file this host does not have says nothing
    assert service.status(workflow_id).definition_changed is None
    done = project.cli("migrate", workflow_id)
    assert done.code == 1 and "no longer validates" in done.err and stored(service, workflow_id) == before
    service.step_complete(workflow_id, "review.ask#1", result="yes")  # it goes on with the copy it runs
    end = service.step_complete(workflow_id, "review.ask#2", result="yes")
    assert end.status == "completed" and end.messages == ['Answers: ["yes","yes"]']


def test_dry_run_prints_the_plan_and_changes_nothing(project: Project) -> None:
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    workflow_id = waiting(service)
    path.write_text(EDITED, encoding="utf-8")
    before = stored(service, workflow_id)
    done = project.cli("migrate", workflow_id, "--dry-run")
    assert done.code == 0
    assert done.out.splitlines()[0] == (f"{workflow_id} (demo:review): can move onto "
                                        ".aromcp/workflows/demo:review.yaml (dry run: nothing was changed)")
    assert stored(service, workflow_id) == before
    assert service.status(workflow_id).definition_changed is True


def test_the_plan_shows_values_as_json(project: Project) -> None:
    """A new optional input without a default takes null, a flag true: as the author writes
    them, not as Python prints them (None, True)."""
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    workflow_id = waiting(service)
    path.write_text(EDITED.replace("inputs:\n", "inputs:\n  note: {type: string}\n  loud: {type: boolean, "
                                                "default: true}\n", 1), encoding="utf-8")
    done = project.cli("migrate", workflow_id, "--dry-run")
    assert done.code == 0, done.out + done.err
    assert "  input note: new, takes its default null" in done.out.splitlines()
    assert "  input loud: new, takes its default true" in done.out.splitlines()
    assert "None" not in done.out and "True" not in done.out


def test_bad_input_is_refused_and_nothing_is_written(project: Project) -> None:
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    done = project.cli("migrate", "wf_nope")
    assert done.code == 1 and "No workflow instance with id 'wf_nope'" in done.err
    finished = waiting(service)
    service.complete(finished, "cancelled")
    live = waiting(service)
    path.write_text(EDITED, encoding="utf-8")
    before = stored(service, finished)
    done = project.cli("migrate", finished)
    assert done.code == 1
    assert (f"instance {finished} is cancelled: only a waiting or running instance moves onto an edited "
            "workflow") in done.err
    assert stored(service, finished) == before
    path.write_text(EDITED + "  - type: nonsense\n", encoding="utf-8")
    before = stored(service, live)
    done = project.cli("migrate", live)
    assert done.code == 1
    assert "demo:review.yaml no longer validates, so no instance can move onto it; nothing was changed" in done.err
    assert "/.aromcp/workflows/demo:review.yaml:23:5: unknown step type 'nonsense'" in done.err
    assert stored(service, live) == before
    assert project.cli("migrate").code == 2 and project.cli("migrate", live, "--workflow", "x").code == 2
    path.write_text(REVIEW, encoding="utf-8")
    done = project.cli("migrate", live)
    assert done.code == 0 and "nothing to move" in done.out and stored(service, live) == before


BLOCKED = [
    ("a new input without a default", EDITED.replace('channel: { type: string, default: "#ci" }',
                                                     "channel: { type: string, required: true }"),
     ".aromcp/workflows/demo:review.yaml:3: input channel is new and has no default: this instance cannot be "
     "given a value for it; add `default:`"),
    ("a read of a name nothing sets", EDITED.replace("{{ shipped }} of", "{{ total }} of"),
     ".aromcp/workflows/demo:review.yaml:20: step summary reads total, which this instance's state does not "
     "hold and neither default_state nor a step still to run sets"),
    ("the waiting step changes type", EDITED.replace("type: user_input\n        prompt", "type: agent_prompt\n"
                                                                                         "        prompt"),
     ".aromcp/workflows/demo:review.yaml:16: step review.ask waits for its answer as type user_input, but "
     "demo:review.yaml makes it type agent_prompt"),
    ("the loop becomes a conditional", EDITED.replace("type: foreach\n    items: \"{{ files }}\"\n    steps:",
                                                      "type: conditional\n    condition: true\n    then:").replace(
        "Ship {{ item }}?", "Ship them?"),
     ".aromcp/workflows/demo:review.yaml:12: the foreach loop review this instance is inside is gone from "
     "demo:review.yaml"),
    ("the step leaves its loop", EDITED.replace("  - id: summary", "  - id: ask\n    type: user_input\n"
                                                "    prompt: again\n  - id: summary").replace(
        "      - id: ask\n", "      - id: asked\n"),
     ".aromcp/workflows/demo:review.yaml:12: step review.ask is gone from demo:review.yaml (the loop at line 12 "
     "no longer holds it)"),
    ("a computed field that throws", EDITED.replace("from: raw.answers", "from: raw.files").replace(
        "(input || []).filter(a => a === 'yes').length", "input.nope.length"),
     ".aromcp/workflows/demo:review.yaml:6: the new state_schema does not compute on this instance's state"),
]


@pytest.mark.parametrize(("name", "edited", "expected"), BLOCKED, ids=[b[0] for b in BLOCKED])
def test_each_reason_names_the_step_and_the_new_files_line(project: Project, name: str, edited: str,
                                                           expected: str) -> None:
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    workflow_id = waiting(service)
    path.write_text(edited, encoding="utf-8")
    before = stored(service, workflow_id)
    done = project.cli("migrate", workflow_id)
    assert done.code == 1, done.out
    assert any(line.startswith(f"  {expected}") for line in done.out.splitlines()), done.out
    assert stored(service, workflow_id) == before


LOOP = """\
name: "demo:poll"
default_state: { raw: { n: 0 } }
steps:
  - id: poll
    type: while
    condition: "{{ n < 10 }}"
    max_iterations: 10
    body:
      - { type: state_update, path: raw.n, operation: increment, value: 1 }
      - id: look
        type: agent_prompt
        prompt: "Look, round {{ n }}"
"""


def test_a_while_past_its_new_max_iterations_is_refused(project: Project) -> None:
    path = project.write("demo:poll.yaml", LOOP)
    service = project.service()
    workflow_id = waiting(service, "demo:poll")
    for round_ in (1, 2, 3):
        service.step_complete(workflow_id, f"poll.look#{round_}", result="ok")
    path.write_text(LOOP.replace("max_iterations: 10", "max_iterations: 2"), encoding="utf-8")
    done = project.cli("migrate", workflow_id)
    assert ".aromcp/workflows/demo:poll.yaml:7: while loop poll is at iteration 4, past its new max_iterations (2)" \
        in done.out
    path.write_text(LOOP.replace("max_iterations: 10", "max_iterations: 5"), encoding="utf-8")
    assert project.cli("migrate", workflow_id).code == 0
    service.step_complete(workflow_id, "poll.look#4", result="ok")
    assert service.step_complete(workflow_id, "poll.look#5", result="ok").status in ("completed", "failed")


FAN = """\
name: "demo:fan"
steps:
  - id: fan
    type: parallel_foreach
    items: ["a", "b", "c"]
    sub_agent_task: work
  - type: user_message
    message: "all done"
sub_agent_tasks:
  work:
    steps:
      - id: do
        type: agent_prompt
        prompt: "Do {{ item }}"
        state_update: { path: "raw.done.{{ item }}" }
"""


def test_sub_agent_tasks_in_flight_move_and_tasks_not_started_begin_with_the_new_steps(project: Project) -> None:
    path = project.write("demo:fan.yaml", FAN)
    service = project.service()
    workflow_id = waiting(service, "demo:fan")
    assert service.next_step(workflow_id, "work_0").step["id"] == "work_0.do"  # type: ignore[index]
    path.write_text(FAN.replace("    steps:\n      - id: do", "    steps:\n      - id: intro\n"
                                "        type: user_message\n        message: \"starting {{ item }}\"\n"
                                "      - id: do"), encoding="utf-8")
    done = project.cli("migrate", workflow_id)
    assert done.code == 0, done.out
    assert "  task work_0: goes on at do (line 15)" in done.out.splitlines()
    assert service.step_complete(workflow_id, "work_0.do", result="A", task_id="work_0").status == "completed"
    second = service.next_step(workflow_id, "work_1")
    assert second.messages == ["starting b"] and second.step["id"] == "work_1.do"  # type: ignore[index]
    path.write_text(FAN.replace("work", "job"), encoding="utf-8")
    done = project.cli("migrate", workflow_id)
    assert done.code == 1
    gone = "  .aromcp/workflows/demo:fan.yaml:9: sub-agent task work is gone from demo:fan.yaml"
    assert gone in done.out.splitlines()


def test_workflow_moves_every_waiting_instance_each_with_its_verdict(project: Project) -> None:
    path = project.write("demo:poll.yaml", LOOP)
    service = project.service()
    early, late = waiting(service, "demo:poll"), waiting(service, "demo:poll")
    for round_ in (1, 2, 3):
        service.step_complete(late, f"poll.look#{round_}", result="ok")
    path.write_text(LOOP.replace("max_iterations: 10", "max_iterations: 3"), encoding="utf-8")
    done = project.cli("migrate", "--workflow", "demo:poll")
    assert done.code == 1
    assert f"{early} (demo:poll): moved onto .aromcp/workflows/demo:poll.yaml" in done.out
    assert f"{late} (demo:poll): refused: nothing was changed" in done.out
    project.write("demo:other.yaml", LOOP.replace("demo:poll", "demo:other"))
    assert project.cli("migrate", "--workflow", "demo:other").out.startswith("no waiting or running instance")
    unknown = project.cli("migrate", "--workflow", "demo:typo")  # no file and no instance: a mistake, said
    assert unknown.code == 1 and "workflow 'demo:typo' not found" in unknown.err


def test_another_server_and_a_restart_see_the_moved_instance(project: Project) -> None:
    """The move is a commit like any other: another service with a live copy of the
    instance reloads it; a new process loads the new definition and inputs from the store."""
    path = project.write("demo:review.yaml", REVIEW)
    first, second = project.service(), project.service()
    workflow_id = waiting(first)
    assert second.next_step(workflow_id).step["id"] == "review.ask#1"  # type: ignore[index]
    path.write_text(EDITED, encoding="utf-8")
    assert first.migrate(workflow_id).outcome == "moved"
    second.step_complete(workflow_id, "review.ask#1", result="yes")
    assert second.step_complete(workflow_id, "review.ask#2", result="yes").messages == [
        "2 of 2 shipped; notify #ci"]
    record = project.service().instances.store.load(workflow_id)
    assert record.inputs == {"channel": "#ci"}
    assert "summary" in json.dumps(record.definition)


INCLUDE_CHILD = """\
workflow:
  name: "demo:child"
  steps:
    - id: approve
      type: user_input
      prompt: "Approve?"
      state_update: { path: raw.ok }
"""


def test_an_instance_inside_an_included_workflow(project: Project) -> None:
    child = project.write("shared/child.yaml", INCLUDE_CHILD)
    project.write("demo:parent.yaml", parent_workflow("  - type: user_message\n"
                                                      "    message: \"child said {{ run_child.ok }}\"\n"))
    service = project.service()
    workflow_id = waiting(service, "demo:parent")
    child.write_text(INCLUDE_CHILD.replace("id: approve", "id: agree"), encoding="utf-8")
    assert service.status(workflow_id).definition_changed is True
    done = project.cli("migrate", workflow_id)
    assert ("  .aromcp/workflows/shared/child.yaml: step approve is gone from child.yaml" in done.out.splitlines()
            ), done.out
    child.write_text(INCLUDE_CHILD.replace('prompt: "Approve?"', 'prompt: "Approve now?"'), encoding="utf-8")
    assert project.cli("migrate", workflow_id).code == 0
    end = service.step_complete(workflow_id, "run_child.approve", result="fine")
    assert end.messages == ["child said fine"]


def test_reload_from_a_new_service_keeps_state_and_history(project: Project, tmp_path: Path) -> None:
    path = project.write("demo:review.yaml", REVIEW)
    service = project.service()
    workflow_id = waiting(service)
    service.step_complete(workflow_id, "review.ask#1", result="yes")
    path.write_text(EDITED, encoding="utf-8")
    assert service.migrate(workflow_id).outcome == "moved"
    fresh = project.service()
    assert fresh.state_read(workflow_id).state["answers"] == ["yes"]
    assert fresh.step_complete(workflow_id, "review.ask#2", result="no").messages == ["1 of 2 shipped; notify #ci"]
    kinds = [e.kind for e in fresh.instances.store.history(workflow_id)]
    assert kinds.count("migrated") == 1 and kinds.index("migrated") < len(kinds) - 1
