"""Branch coverage, read from the instances' history: every kind of branch, taken and not.

For each kind of branch a workflow is run by cases that take one side, and the report
must say exactly which branches were covered — a branch marked covered without the
history to show it, or missed although a case took it, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aromcp_workflows.testing.session import TestSession
from tests.testing.conftest import Project, parent_workflow


def covered(project: Project, test_file: str) -> dict[str, bool]:
    """{branch key: covered} of the file's own workflow, summed over all its cases (each must pass)."""
    session = TestSession(project.root, coverage=True)
    try:
        loaded = session.load(project.workflows / test_file)
        for case in loaded.cases:
            outcome = session.run(loaded, case)
            assert outcome.passed, (case.name, outcome.mismatches, outcome.unmatched, outcome.stopped)
        totals = {t.workflow: t for t in session.coverage_totals()}
    finally:
        session.close()
    name = test_file.removesuffix(".test.yaml")
    return {key: branch.covered for key, branch in totals[name].branches.items()}


LOOPS = """\
name: "demo:loops"
inputs:
  limit: { type: integer, default: 2 }
  stop_at: { type: integer, default: 99 }
  items: { type: array, default: [] }
default_state: { raw: { n: 0 } }
steps:
  - id: count
    type: while
    condition: "{{ n < inputs.limit }}"
    max_iterations: 5
    on_max_iterations: continue
    body:
      - { type: state_update, path: raw.n, operation: increment, value: 1 }
      - id: enough
        type: conditional
        condition: "{{ n >= inputs.stop_at }}"
        then:
          - type: break
  - id: each
    type: foreach
    items: "{{ inputs.items }}"
    steps:
      - type: state_update
        path: raw.last
        value: "{{ item }}"
"""


@pytest.mark.parametrize(("inputs", "expected"), [
    ({"limit": 0}, {"count:skipped", "each:skipped"}),
    ({"limit": 2}, {"count:entered", "count:condition", "count.enough:else", "each:skipped"}),
    ({"limit": 9, "stop_at": 1}, {"count:entered", "count:break", "count.enough:then", "each:skipped"}),
    ({"limit": 9, "items": [1]}, {"count:entered", "count:max_iterations", "count.enough:else", "each:entered"}),
])
def test_loops_entered_skipped_and_each_way_out_of_a_while(project: Project, inputs: dict[str, object],
                                                           expected: set[str]) -> None:
    project.write("demo:loops.yaml", LOOPS)
    project.write("demo:loops.test.yaml", f"cases:\n  - name: one\n    inputs: {inputs}\n")
    found = covered(project, "demo:loops.test.yaml")
    assert set(found) == {"count:entered", "count:skipped", "count:condition", "count:break",
                          "count:max_iterations", "count.enough:then", "count.enough:else", "each:entered",
                          "each:skipped"}
    assert {key for key, hit in found.items() if hit} == expected


FAN = """\
name: "demo:fan"
inputs:
  items: { type: array, default: [] }
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ inputs.items }}"
    sub_agent_task: job
    on_sub_agent_error: { strategy: continue }
  - id: notify
    type: mcp_call
    when: "{{ inputs.items.length > 0 }}"
    mcp: { method: notify }
    on_error: continue
error_handling:
  on_failure:
    - type: user_message
      message: "failed: {{ error.message }}"
sub_agent_tasks:
  job:
    steps:
      - id: act
        type: agent_prompt
        prompt: "Act on {{ item }}"
    error_handling:
      cleanup_on_error:
        - { type: state_update, path: raw.cleaned, value: true }
"""


def test_parallel_tasks_cleanup_on_error_when_and_error_handling(project: Project) -> None:
    project.write("demo:fan.yaml", FAN)
    project.write("demo:fan.test.yaml", """\
cases:
  - name: nothing to fan out
  - name: one task
    inputs: { items: [a] }
    answers: { act: ok, notify: ok }
""")
    first = covered(project, "demo:fan.test.yaml")
    assert {k for k, hit in first.items() if hit} == {"fan:no_items", "fan:some_items", "job:ran",
                                                       "notify:run", "notify:skip"}
    assert set(first) == {"fan:no_items", "fan:some_items", "fan:task_failed", "notify:run", "notify:skip",
                          "notify:on_error", "job:ran", "job:cleanup_on_error", "error_handling:taken"}
    project.write("demo:fan.test.yaml", """\
cases:
  - name: a task fails and notify fails
    inputs: { items: [a] }
    answers: { act: { error: "cannot" }, notify: { error: "down" } }
    expect: { state: { cleaned: true } }
""")
    second = covered(project, "demo:fan.test.yaml")
    assert {k for k, hit in second.items() if hit} == {"fan:some_items", "fan:task_failed", "job:ran",
                                                        "job:cleanup_on_error", "notify:run", "notify:on_error"}


def test_workflow_error_handling_and_shell_retries(project: Project) -> None:
    project.write("demo:retry.yaml", """\
name: "demo:retry"
steps:
  - id: flaky
    type: shell_command
    command: "flaky"
    on_error: retry
    retry_count: 2
    retry_delay: 0
  - id: final
    type: shell_command
    command: "final"
error_handling:
  on_failure:
    - type: user_message
      message: "cleaning up"
""")
    project.write("demo:retry.test.yaml", """\
cases:
  - name: works at once
    shell:
      - { match: "*", results: [{ exit_code: 0 }] }
""")
    assert covered(project, "demo:retry.test.yaml") == {"flaky:on_error": False, "error_handling:taken": False}
    project.write("demo:retry.test.yaml", """\
cases:
  - name: retried, then the last step fails
    shell:
      - { match: "flaky", results: [{ exit_code: 1 }, { exit_code: 0 }] }
      - { match: "final", results: [{ exit_code: 1 }] }
    expect: { status: failed, messages: ["cleaning up"] }
""")
    assert covered(project, "demo:retry.test.yaml") == {"flaky:on_error": True, "error_handling:taken": True}


def test_an_included_workflow_has_its_own_row_with_its_own_lines(project: Project) -> None:
    project.write("shared/child.yaml", """\
workflow:
  name: "demo:child"
  inputs:
    go: { type: boolean, default: false }
  steps:
    - id: decide
      type: conditional
      condition: "{{ inputs.go }}"
      then:
        - { type: user_message, message: "child went" }
""")
    project.write("demo:parent.yaml", parent_workflow(inputs="{ go: true }"))
    project.write("demo:parent.test.yaml", "cases:\n  - name: goes\n    expect: { messages: [child went] }\n")
    done = project.cli("test", "--coverage")
    assert done.code == 0, done.out
    lines = done.out.splitlines()
    row = next(line for line in lines if line.startswith("demo:child"))
    assert "1/2 branches (50%)" in row and row.endswith(".aromcp/workflows/shared/child.yaml")
    assert ("    not covered: .aromcp/workflows/shared/child.yaml:6: conditional decide: else  [decide:else]"
            in lines)
    assert any(line.startswith("demo:parent") and "0/0 branches (100%)" in line for line in lines)


def test_coverage_min_and_coverage_ignore(project: Project) -> None:
    project.write("demo:loops.yaml", LOOPS)
    project.write("demo:loops.test.yaml", """\
coverage_ignore:
  "count:max_iterations": "limit never exceeds 5 in our use"
  "each:entered": "covered below, listed to see the note"
  "count:nothing": "a typo"
cases:
  - name: two rounds
    inputs: { items: [1] }
""")
    done = project.cli("test", "--coverage-min", "50")
    assert done.code == 1, done.out
    lines = done.out.splitlines()
    assert any(line.startswith("demo:loops") and "3/7 branches (43%), 2 ignored (coverage_ignore)" in line
               for line in lines), done.out
    assert ("    not covered: .aromcp/workflows/demo:loops.yaml:8: while count: skipped (condition false at once)"
            "  [count:skipped]") in lines
    assert "    note: [each:entered] is in coverage_ignore but a case covers it; remove it there" in lines
    assert "    note: coverage_ignore names [count:nothing], which is no branch of demo:loops" in lines
    assert "coverage of demo:loops is 42.9%, under --coverage-min 50%" in lines
    assert project.cli("test", "--coverage-min", "40").code == 0


def test_coverage_of_one_instance_over_the_service(project: Project) -> None:
    """`WorkflowService.coverage` (what the test runner reads) for any instance, with lines
    while the file still holds the instance's copy, and without once it changed."""
    path = project.write("demo:loops.yaml", LOOPS)
    service = project.service()
    workflow_id = service.start("demo:loops", {"limit": 1}).workflow_id
    assert service.next_step(workflow_id).status == "completed"
    rows = {b.key: b for b in service.coverage(workflow_id).workflows[0].branches}
    assert rows["count:condition"].covered and rows["count:condition"].line == 8
    assert not rows["count:break"].covered
    path.write_text(LOOPS.replace("max_iterations: 5", "max_iterations: 6"), encoding="utf-8")
    again = {b.key: b for b in service.coverage(workflow_id).workflows[0].branches}
    assert again["count:condition"].covered and again["count:condition"].line is None
    assert Path(service.coverage(workflow_id).workflows[0].file) == path.resolve()
