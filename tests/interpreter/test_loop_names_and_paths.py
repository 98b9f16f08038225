"""Named loop variables (`variable_name`, `index_name`) and templates in a path's brackets.

An inner loop's `item` hides the outer one; a name the author gave an outer loop's element
stays visible inside.  In a path, a bracket holding one template is an index when the
value is a whole number and a key otherwise; a quoted bracket key may hold templates.
"""

from __future__ import annotations

from pathlib import Path

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check


def test_named_elements_stay_visible_in_nested_loops(start):
    run, driver = start("""
name: named
default_state: {raw: {log: []}}
steps:
  - type: foreach
    items: [["a", "b"], ["c"]]
    variable_name: batch
    index_name: b
    steps:
      - type: foreach
        items: "{{ batch }}"
        variable_name: file
        steps:
          - type: foreach
            items: [1]
            steps:
              - type: state_update
                path: raw.log
                operation: append
                value: "{{ b }}/{{ batch.length }}/{{ file }}/{{ item }}/{{ index }}"
""")
    assert driver.next_step().status == "completed"
    assert run.states["main"].flattened()["log"] == ["0/2/a/1/0", "0/2/b/1/0", "1/1/c/1/0"]


def test_bracket_templates_in_paths_are_indexes_or_keys(start):
    run, driver = start("""
name: brackets
default_state: {raw: {items: [{q: 1}, {q: 2}], by: {}, res: {}}}
steps:
  - type: foreach
    items: [5, 7]
    index_name: idx
    steps:
      - {type: state_update, path: "raw.items[{{ idx }}].q", value: "{{ items[idx].q + item }}"}
      - {type: state_update, path: "raw.by[{{ 'dept.' + idx }}][{{ item }}]", value: "{{ item }}"}
      - {type: state_update, path: "raw.res['batch_{{ idx }}'].done", value: true}
""")
    assert driver.next_step().status == "completed"
    state = run.states["main"].flattened()
    assert state["items"] == [{"q": 6}, {"q": 9}]
    assert state["by"] == {"dept.0": {"5": 5}, "dept.1": {"7": 7}}
    assert state["res"] == {"batch_0": {"done": True}, "batch_1": {"done": True}}


def check_text(tmp_path: Path, text: str):
    path = tmp_path / "names.yaml"
    path.write_text(text)
    return check(str(path), WorkflowLoader(WorkflowResolver(project_dir=tmp_path)))


def test_loop_names_are_checked(tmp_path: Path):
    report = check_text(tmp_path, """
name: names
steps:
  - type: foreach
    items: [1]
    variable_name: state
    index_name: 2nd
    steps:
      - {type: user_message, message: "{{ item }}"}
""")
    assert [f"{p.line}:{p.column}: {p.message}" for p in report.errors] == [
        "6:5: 'variable_name' in foreach step: 'state' already means something in templates; choose another name",
        "7:5: 'index_name' in foreach step: '2nd' is not a JavaScript name (letters, digits, _ and $, not "
        "starting with a digit)"]


def test_a_loop_name_exists_only_inside_its_loop(tmp_path: Path):
    report = check_text(tmp_path, """
name: names
steps:
  - type: foreach
    items: [1]
    variable_name: file
    steps:
      - {type: user_message, message: "{{ file }}"}
  - {type: user_message, message: "{{ file }}"}
""")
    assert report.valid
    assert [f"{p.line}: {p.message}" for p in report.warnings] == [
        "9: template {{ file }} reads 'file', which no default_state, state_schema, computed field or step "
        "declares or writes: it is undefined unless an agent sets it (declare it, for example as "
        "default_state.raw.file)"]
