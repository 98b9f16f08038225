"""The seed design's language as the seed means it: each case failed before this change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aromcp_workflows.state import Update
from tests.interpreter.agent import ScriptedAgent


def test_while_inside_foreach_sees_item_and_index(start):
    workflow = """
name: nested
default_state:
  raw: {log: [], tries: {}}
steps:
  - type: foreach
    items: ["a", "b"]
    steps:
      - type: while
        condition: "{{ (tries[item] || 0) < 2 }}"
        max_iterations: 5
        body:
          - type: state_update
            path: "raw.tries.{{ item }}"
            value: "{{ (tries[item] || 0) + 1 }}"
          - type: state_update
            path: raw.log
            operation: append
            value: "{{ item }}{{ index }}:{{ loop.iteration }}"
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    assert run.states["main"].flattened()["log"] == ["a0:1", "a0:2", "b1:1", "b1:2"]


def test_agent_shell_json_keeps_an_object_result(start):
    workflow = """
name: agentjson
steps:
  - id: report
    type: agent_shell_command
    command: "cat report.json"
    output_format: json
    state_update: {path: raw.report}
"""
    run, driver = start(workflow)
    step = driver.next_step().step
    driver.complete(None, step["id"], "success", {"errors": 2, "files": ["a.ts"]})
    assert run.states["main"].flattened()["report"] == {"errors": 2, "files": ["a.ts"]}
    run, driver = start(workflow)  # a JSON text in `stdout` is still parsed
    step = driver.next_step().step
    driver.complete(None, step["id"], "success", {"stdout": '{"errors": 0}'})
    assert run.states["main"].flattened()["report"] == {"errors": 0}


def test_sub_agent_prompt_override_is_rendered_per_task(start):
    """The override is rendered for each task, with its item, index, inputs and the state;
    each task entry carries its own `prompt`, and `sub_agent_prompt` stays the standard one."""
    workflow = """
name: override
inputs:
  style: {type: string, default: terse}
default_state:
  raw: {files: [{path: "a.ts", lines: 3}, {path: "b.py", lines: 9}], reviewer: "Ada"}
steps:
  - type: parallel_foreach
    items: "{{ files }}"
    sub_agent_task: review
    sub_agent_prompt_override: >-
      Be {{ inputs.style }}: review {{ item.path }} ({{ index + 1 }} of {{ files.length }},
      {{ task.lines }} lines, as {{ reviewer }}) in {{ workflow_id }}/{{ task.task_id }}; {{ note }}.
sub_agent_tasks:
  review:
    inputs:
      lines: {type: integer, default: "{{ item.lines }}"}
    default_state: {note: "local note"}
    steps:
      - {type: user_message, message: "{{ context.item.path }}"}
"""
    run, driver = start(workflow)
    step = driver.next_step().step
    tasks = step["definition"]["tasks"]
    assert [t["prompt"] for t in tasks] == [
        f"Be terse: review a.ts (1 of 2, 3 lines, as Ada) in {run.workflow_id}/review_0; local note.",
        f"Be terse: review b.py (2 of 2, 9 lines, as Ada) in {run.workflow_id}/review_1; local note."]
    assert step["definition"]["sub_agent_prompt"] == run.machine.sub_agent_prompt  # the standard one, unchanged
    assert "the task's own `prompt`" in step["instructions"]
    run.agent_update(None, [Update(path="raw.reviewer", value="Bob")])
    again = driver.next_step().step  # rendered once, when the tasks were created
    assert [t["prompt"] for t in again["definition"]["tasks"]] == [t["prompt"] for t in tasks]


def test_without_an_override_tasks_carry_no_prompt(start):
    run, driver = start("""
name: plain
steps:
  - {type: parallel_foreach, items: [1], sub_agent_task: t}
sub_agent_tasks:
  t:
    steps: [{type: user_message, message: hi}]
""")
    step = driver.next_step().step
    assert ["prompt" in t for t in step["definition"]["tasks"]] == [False]
    assert "{task_id}" in step["definition"]["sub_agent_prompt"]


def test_a_dotted_item_in_a_path_is_one_key(start):
    workflow = """
name: dotted
default_state:
  raw: {results: {}}
steps:
  - type: foreach
    items: ["a.ts", "src/b.test.ts"]
    steps:
      - type: state_update
        path: "raw.results.{{ item }}"
        value: "{{ index }}"
  - type: state_update
    path: "raw.results.{{ 'x' }}.nested"
    value: 1
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    assert run.states["main"].flattened()["results"] == {"a.ts": 0, "src/b.test.ts": 1, "x": {"nested": 1}}


def test_bare_result_in_a_shell_state_update_is_its_output(start):
    workflow = """
name: bare
steps:
  - type: shell_command
    command: "printf 'a\\nb\\n'"
    output_format: lines
    state_update: {path: raw.lines, value: "{{ result }}"}
  - type: shell_command
    command: "echo hi"
    state_update: {path: raw.code, value: "{{ result.exit_code }}"}
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    state = run.states["main"].flattened()
    assert state["lines"] == ["a", "b"] and state["code"] == 0


def test_task_inputs_are_names_and_context_in_task_steps(start):
    workflow = """
name: taskvars
default_state:
  raw: {status: {}}
steps:
  - type: parallel_foreach
    items: [{id: b0, files: [x.ts]}]
    sub_agent_task: fix
sub_agent_tasks:
  fix:
    inputs:
      batch_id: {type: string, default: "{{ item.id }}"}
      files: {type: array, default: "{{ item.files }}"}
    steps:
      - type: state_update
        path: "raw.status.{{ batch_id }}"
        value: "{{ context.files.length }} file(s) in {{ context.task_id }}"
"""
    run, driver = start(workflow)
    final = ScriptedAgent(driver).run()
    assert final.status == "completed"
    assert run.states["main"].flattened()["status"] == {"b0": "1 file(s) in fix_0"}


def test_automatic_error_tracking_for_declared_fields(start):
    workflow = """
name: tracking
default_state:
  raw: {steps_completed: [], steps_failed: [], retry_counts: {}, last_error: null, workflow_errors: []}
steps:
  - {id: ok_cmd, type: shell_command, command: "true"}
  - id: flaky
    type: shell_command
    command: "false"
    on_error: retry
    retry_count: 2
    retry_delay: 0
    fallback_value: none
    state_update: {path: raw.flaky}
  - {id: ask, type: mcp_call, mcp: {method: tool, params: {}}, on_error: continue}
"""
    run, driver = start(workflow)
    step = driver.next_step().step
    driver.complete(None, step["id"], "failed", error="tool broke")
    state = run.states["main"].flattened()
    assert state["steps_completed"] == ["ok_cmd"]
    assert state["steps_failed"] == ["flaky", "ask"]
    assert state["retry_counts"] == {"flaky": 2}
    assert state["last_error"]["step_id"] == "ask" and "tool broke" in state["last_error"]["message"]
    assert len(state["workflow_errors"]) == 2


def test_undeclared_tracking_fields_are_left_alone(start):
    run, driver = start("name: plain\nsteps:\n  - {id: a, type: shell_command, command: 'true'}\n")
    driver.next_step()
    assert "steps_completed" not in run.states["main"].flattened()


def test_error_collection_with_stack_traces(start):
    workflow = """
name: stack
error_handling:
  error_collection: {enabled: true, state_path: raw.errors, include_stack_traces: true}
steps:
  - type: foreach
    items: [1]
    steps:
      - {id: boom, type: shell_command, command: "exit 3"}
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "failed"
    (error,) = run.states["main"].flattened()["errors"]
    assert error["step_id"] == "foreach_1.boom#1" and "exited with code 3" in error["message"]
    assert error["stack"] and "loop iteration 1" in error["stack"][0]


def test_on_resume_retries_the_failed_step(start, tmp_path: Path):
    workflow = """
name: resumable
default_state:
  raw: {done: []}
steps:
  - {id: first, type: state_update, path: raw.done, operation: append, value: first}
  - {id: needs_file, type: shell_command, command: "cat ready.txt", state_update: {path: raw.ready}}
  - {id: last, type: state_update, path: raw.done, operation: append, value: last}
"""
    run, driver = start(workflow, project_dir=tmp_path)
    assert driver.next_step().status == "failed"
    (tmp_path / "ready.txt").write_text("yes\n")
    assert run.retry_failed() is True
    assert run.status == "running"
    assert driver.next_step().status == "completed"
    state = run.states["main"].flattened()
    assert state["done"] == ["first", "last"] and state["ready"] == "yes"  # `first` did not run again


def test_return_on_error_false_lets_a_task_go_on(start):
    workflow = """
name: keepgoing
default_state:
  raw: {after: []}
steps:
  - type: parallel_foreach
    items: [1, 2]
    sub_agent_task: t
sub_agent_tasks:
  t:
    error_handling: {return_on_error: false}
    steps:
      - {id: risky, type: shell_command, command: "test {{ item }} -eq 2"}
      - {type: state_update, path: raw.after, operation: append, value: "{{ item }}"}
"""
    run, driver = start(workflow)
    final = ScriptedAgent(driver).run()
    assert final.status == "completed"
    assert sorted(run.states["main"].flattened()["after"]) == [1, 2]
    assert run.threads["t_0"].status == "completed"


def test_debug_history_lists_messages_and_condition_checks(start):
    from aromcp_workflows.explain.inspect import debug_info
    from aromcp_workflows.safety.masking import Masker

    workflow = """
name: history
default_state:
  raw: {n: 0}
steps:
  - {id: hello, type: user_message, message: "starting"}
  - id: loop
    type: while
    condition: "{{ n < 2 }}"
    body:
      - {type: state_update, path: raw.n, operation: increment, value: 1}
  - id: check
    type: conditional
    condition: "{{ n }}"
    then:
      - {type: user_message, message: "n={{ n }}"}
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    events: list[Any] = [type("E", (), {"kind": e.kind, "step_id": e.step_id, "task_id": e.task_id,
                                        "data": e.data, "timestamp": e.timestamp})() for e in driver.events]
    history = debug_info(run, events, Masker([]))["step_history"]
    messages = [h["message"] for h in history if h["type"] == "user_message"]
    assert messages == ["starting", "n=2"]
    checks = [(h["step_id"], h["value"], h["branch"]) for h in history if "branch" in h]
    assert checks == [("loop", True, "iterate"), ("loop", True, "iterate"), ("loop", False, "exit"),
                      ("check", 2, "then")]


def test_a_while_condition_may_read_its_own_loop(start):
    """Validation and the machine agree: the condition sees the iteration it would start."""
    workflow = """
name: counted
default_state:
  raw: {n: 0}
steps:
  - type: while
    condition: "{{ loop.iteration <= 3 }}"
    max_iterations: 10
    body:
      - {type: state_update, path: raw.n, operation: increment, value: 1}
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    assert run.states["main"].flattened()["n"] == 3
