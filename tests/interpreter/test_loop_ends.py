"""How loops end: by their condition, by running out of items, by `break`, or at their
limit — and the `loop_ended` history event that says which.

A `max_iterations` the author wrote is a normal end (the seed design's loop node runs
"until a condition becomes false or max_iterations is reached"; AroMCP's `while` leaves
the loop at its cap): the loop exits and the workflow goes on.  Only the implicit limit
(no `max_iterations`) fails, and `on_max_iterations: fail` opts into failing.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.definition import WorkflowBundle, WorkflowLoader, WorkflowResolver, check, load_valid_bundle
from aromcp_workflows.definition.steps import WhileStep

SPIN = """
name: spin
default_state: {raw: {n: 0}}
steps:
  - id: forever
    type: while
    condition: "{{ n >= 0 }}"  # always true, which validation cannot know
    LIMIT
    body:
      - type: state_update
        path: raw.n
        operation: increment
  - type: user_message
    message: "n={{ n }}"
"""


def ends(driver) -> list[tuple[str | None, dict[str, Any]]]:
    return [(e.step_id, e.data) for e in driver.events if e.kind == "loop_ended"]


def test_an_explicit_max_iterations_ends_the_loop_and_the_workflow_goes_on(start):
    run, driver = start(SPIN.replace("LIMIT", "max_iterations: 4"))
    answer = driver.next_step()
    assert answer.status == "completed", answer.error
    assert answer.messages == ["n=4"]
    assert ends(driver) == [("forever", {"loop": "while", "ended_by": "max_iterations", "iterations": 4,
                                         "max_iterations": 4, "on_max_iterations": "continue",
                                         "implicit": False})]


def test_the_implicit_limit_fails_with_a_message_saying_what_to_write(start):
    run, driver = start(SPIN.replace("LIMIT", ""))
    answer = driver.next_step()
    assert answer.status == "failed"
    assert answer.error == ("while loop forever reached max_iterations (100, the default: "
                            "it sets none) with its condition still true; fix the condition, or write "
                            "max_iterations: N to make N iterations a normal end of the loop")
    assert run.states["main"].flattened()["n"] == 100
    assert ends(driver) == [("forever", {"loop": "while", "ended_by": "max_iterations", "iterations": 100,
                                         "max_iterations": 100, "on_max_iterations": "fail", "implicit": True})]


def test_on_max_iterations_fail_opts_into_failing_at_an_explicit_cap(start):
    run, driver = start(SPIN.replace("LIMIT", "max_iterations: 3\n    on_max_iterations: fail"))
    answer = driver.next_step()
    assert answer.status == "failed"
    assert "while loop forever reached max_iterations (3) with its condition still true, and " \
           "on_max_iterations is fail" in (answer.error or "")
    assert run.states["main"].flattened()["n"] == 3


def test_on_max_iterations_continue_also_applies_to_the_implicit_limit(start):
    run, driver = start(SPIN.replace("LIMIT", "on_max_iterations: continue"))
    answer = driver.next_step()
    assert answer.status == "completed"
    assert answer.messages == ["n=100"]


def test_condition_break_and_items_each_say_how_their_loop_ended(start):
    run, driver = start("""
name: three-ends
default_state: {raw: {n: 0, seen: []}}
steps:
  - id: count
    type: while
    condition: "{{ n < 2 }}"
    max_iterations: 10
    body:
      - {type: state_update, path: raw.n, operation: increment}
  - id: outer
    type: foreach
    items: ["a", "b"]
    steps:
      - id: inner
        type: while
        condition: "{{ true }}"
        body:
          - {type: state_update, path: raw.seen, operation: append, value: "{{ item }}"}
          - type: break
      - id: each
        type: foreach
        items: [1, 2, 3]
        steps:
          - type: conditional
            condition: "{{ item === 2 }}"
            then: [{type: break}]
""")
    answer = driver.next_step()
    assert answer.status == "completed", answer.error
    assert ends(driver) == [
        ("count", {"loop": "while", "ended_by": "condition", "iterations": 2, "max_iterations": 10}),
        ("outer.inner#1", {"loop": "while", "ended_by": "break", "iterations": 1, "max_iterations": 100}),
        ("outer.each#1", {"loop": "foreach", "ended_by": "break", "iterations": 2}),
        ("outer.inner#2", {"loop": "while", "ended_by": "break", "iterations": 1, "max_iterations": 100}),
        ("outer.each#2", {"loop": "foreach", "ended_by": "break", "iterations": 2}),
        ("outer", {"loop": "foreach", "ended_by": "items", "iterations": 2}),
    ]


def test_repeat_n_times_validates_and_runs(start, tmp_path):
    path = tmp_path / "repeat.yaml"
    path.write_text("""
name: repeat
default_state: {raw: {n: 0}}
steps:
  - id: four_times
    type: while
    condition: "{{ true }}"
    max_iterations: 4
    body:
      - {type: state_update, path: raw.n, operation: increment}
  - {type: user_message, message: "n={{ n }}"}
""")
    report = check(str(path), WorkflowLoader(WorkflowResolver(project_dir=tmp_path)))
    assert report.valid and not report.warnings, [str(p) for p in report.errors + report.warnings]
    run, driver = start(path.read_text())
    answer = driver.next_step()
    assert (answer.status, answer.messages) == ("completed", ["n=4"])


def test_a_stored_definition_keeps_whether_the_limit_was_written(tmp_path):
    """Instances keep a snapshot of their definition: the implicit limit must stay implicit."""
    path = tmp_path / "two.yaml"
    path.write_text("""
name: two
steps:
  - {id: implicit, type: while, condition: "{{ false }}", body: [{type: user_message, message: x}]}
  - {id: explicit, type: while, condition: "{{ false }}", max_iterations: 100, body: [{type: user_message, message: y}]}
""")
    bundle = load_valid_bundle(str(path), WorkflowLoader(WorkflowResolver(project_dir=tmp_path)))
    again = WorkflowBundle.parse_snapshot(bundle.snapshot())
    implicit, explicit = again.get("two").steps
    assert isinstance(implicit, WhileStep) and isinstance(explicit, WhileStep)
    assert (implicit.limit, implicit.at_limit) == (100, "fail")
    assert (explicit.limit, explicit.at_limit) == (100, "continue")
