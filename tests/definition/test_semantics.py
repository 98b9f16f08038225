"""Semantic checks one at a time, including the ones that must NOT fire (false positives
would block valid workflows), and the JS name analysis behind computed-field cycles."""

from __future__ import annotations

from pathlib import Path

import pytest
from definition_helpers import write

from aromcp_workflows.definition import WorkflowLoader, check
from aromcp_workflows.definition.js_names import js_free_names
from aromcp_workflows.definition.templates import NEVER_CLOSED, template_problems, unbalanced_braces


def problems(tmp_path: Path, loader: WorkflowLoader, text: str) -> list[str]:
    path = write(tmp_path / "case.yaml", text)
    report = check(str(path), loader)
    prefix = f"{path}:"
    return [str(p).removeprefix(prefix) for p in report.errors + report.warnings]


def test_valid_nesting_of_break_and_continue(tmp_path: Path, loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, """
        name: nesting
        steps:
          - type: while
            condition: "{{ true }}"
            body:
              - type: conditional
                condition: "{{ Math.random() > 0.5 }}"
                then: [{type: break}]
                else:
                  - type: foreach
                    items: "{{ [1] }}"
                    steps: [{type: continue}]
        """) == []


def test_break_in_a_sub_agent_task_or_handler_needs_its_own_loop(tmp_path: Path,
                                                                 loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, """
        name: tasks
        steps:
          - type: while
            condition: "{{ Math.random() > 0.5 }}"
            body:
              - type: parallel_foreach
                items: "{{ [1] }}"
                sub_agent_task: t
        sub_agent_tasks:
          t:
            steps:
              - type: foreach
                items: "{{ [1] }}"
                steps: [{type: break}]
              - type: continue
            error_handling:
              cleanup_on_error: [{type: break}]
        """) == [
        "15:9: 'continue' outside a loop; it may only appear inside the body of a while or foreach",
        "17:27: 'break' outside a loop; it may only appear inside the body of a while or foreach",
    ]


def test_step_ids_are_unique_across_steps_and_failure_handlers(tmp_path: Path,
                                                               loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, """
        name: ids
        error_handling:
          on_failure:
            - {id: report, type: user_message, message: "failed"}
        steps:
          - {id: report, type: user_message, message: "ok"}
          - {id: "bad id!", type: exit}
        sub_agent_tasks:
          t:
            steps: [{id: report, type: exit}]
        """) == [
        "4:8: duplicate step id 'report' (also used at line 6); step ids must be unique",
        "7:6: step id 'bad id!' may use only letters, digits, '-' and '_'",
        "9:3: warning: sub-agent task 't' is never used by a parallel_foreach",
    ]


CYCLES = """
    name: cycles
    state_schema:
      computed:
        total:
          from: raw.items
          transform: "input.length + offset"
        offset:
          from: raw.base
          transform: "input + total"
        lonely:
          from: computed.lonely
          transform: "input"
        x: {from: computed.y, transform: "input"}
        y: {from: computed.z, transform: "input"}
        z: {from: computed.x, transform: "input"}
    steps: [{type: exit}]
    """

NO_CYCLES = """
    name: no-false-cycles
    state_schema:
      computed:
        files:
          from: raw.list
          transform: "input.map(x => ({ batches: x, nested: {deep: x} }))"
        batches:
          from: computed.files
          transform: |
            // files are grouped here; 'total' in a comment or a string is not a read
            return input.map((f, i) => ({ id: `b${i}`, size: f.batches.total }));
        total:
          from: computed.batches
          transform: "input.reduce((sum, b) => sum + b.size, 0)"
          validate: "output >= 0 && this.files !== undefined"
    steps:
      - type: agent_prompt
        prompt: "p"
        response_schema: {type: object, description: "a }} in JSON Schema text is fine"}
    """

LOCAL_SHADOW = """
    name: local-shadow
    state_schema:
      computed:
        batches:
          from: raw.files
          transform: |
            const total = input.length;
            return [total];
        total:
          from: computed.batches
          transform: "input.length"
    steps: [{type: exit}]
    """


def test_computed_cycles_through_direct_reads_and_self_reference(tmp_path: Path,
                                                                 loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, CYCLES) == [
        ("4:5: circular computed fields: total → offset → total (the transform of 'total' "
        "reads 'offset'; the transform of 'offset' reads 'total')"),
        "10:5: circular computed fields: lonely → lonely",
        "13:5: circular computed fields: x → y → z → x",
    ]


def test_no_false_cycles_from_properties_keys_strings_or_comments(tmp_path: Path,
                                                                  loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, NO_CYCLES) == []


def test_a_local_named_like_a_field_is_explained(tmp_path: Path, loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, LOCAL_SHADOW) == [
        ("4:5: circular computed fields: batches → total → batches (the transform of 'batches' "
        "names a local 'total', which counts as reading that field: rename the local)")]


@pytest.mark.parametrize("text, refused", [(CYCLES, True), (NO_CYCLES, False), (LOCAL_SHADOW, True)])
def test_validation_agrees_with_the_state_store(text: str, refused: bool, tmp_path: Path,
                                                loader: WorkflowLoader) -> None:
    """What validation calls a cycle is exactly what the running state store refuses."""
    state = pytest.importorskip("aromcp_workflows.state")
    computed = pytest.importorskip("aromcp_workflows.state.computed")
    definition = loader.load(str(write(tmp_path / "c.yaml", text))).definition
    specs = [computed.ComputedFieldSpec(name=name, sources=spec.sources,
                                        source_is_list=isinstance(spec.from_, list),
                                        transform=spec.transform, validate=spec.validate_)
             for name, spec in definition.state_schema.computed.items()]
    try:
        computed.ComputedGraph(specs)
    except state.StateError:
        assert refused
    else:
        assert not refused


def test_tier_paths_checked_everywhere_a_step_writes(tmp_path: Path, loader: WorkflowLoader) -> None:
    assert problems(tmp_path, loader, """
        name: writes
        steps:
          - type: mcp_call
            mcp: {method: m}
            state_update: {path: "raw.ok"}
            error_state_update: {path: "computed.failed", value: true}
          - type: parallel_foreach
            items: "{{ [] }}"
            sub_agent_task: t
            on_sub_agent_error: {strategy: continue, error_state_path: "errors"}
          - type: include_workflow
            workflow: "ci:retry-tests"
            state_update: {path: "inputs.result"}
          - type: state_update
            path: "state.fine[0].also_fine"
            value: 1
        sub_agent_tasks:
          t:
            steps: [{type: exit}]
        """) == [
        ("6:26: cannot write 'computed.failed': computed fields are derived from their 'from' "
        "paths; write to raw.* or state.* instead"),
        "10:46: state path 'errors' must start with 'raw.' or 'state.' (for example raw.errors)",
        ("13:20: cannot write 'inputs.result': inputs are fixed when the workflow starts; write "
        "to raw.* or state.* instead"),
    ]


@pytest.mark.parametrize("text, problem", [
    ("plain text", None),
    ("{{ a }} and {{ b }}", None),
    ("{{ {a: 1}.a }}", None),
    ("{{ a {{ b }} }}", "template opens '{{' inside another '{{ ... }}'"),
    ("{{ a", "template opens '{{' but never closes it with '}}'"),
    ("a }}", "template closes '}}' that was never opened"),
])
def test_unbalanced_braces(text: str, problem: str | None) -> None:
    assert unbalanced_braces(text) == problem


@pytest.mark.parametrize("source, names", [
    ("input.length", {"input"}),
    ("input.b + c", {"input", "c"}),
    ("a?.b?.c ?? d", {"a", "d"}),
    ("{ key: value, other: 'text with name' }", {"value"}),
    ("cond ? yes : no", {"cond", "yes", "no"}),
    ("`${count} of ${total.n}` + 'ignored'", {"count", "total"}),
    ("const n = input.length; return n + m; /* block comment x */", {"input", "m"}),
    ("items.map(item => item.id)", {"items"}),
    ("pairs.map(([k, v]) => k)", {"pairs"}),
    ("xs.reduce((acc, x) => acc + x, start)", {"xs", "start"}),
    ("[...list, extra]", {"list", "extra"}),
    ("this.total + this.x.y + new Date(now).getTime()", {"total", "x"}),  # globals are not state
])
def test_js_free_names(source: str, names: set[str]) -> None:
    assert js_free_names(source) == names


@pytest.mark.parametrize("text, found", [
    ("{{ {a: {b: 1}}.a }}", []),  # braces inside the expression are JavaScript's
    ('{{ "}}" }}', []),
    ("{{ items.map(x => `${x}`) | json }}", []),
    ("{{ inputs.branch }} {{ inputs['branch'] }} {{ Object.keys(inputs) }}", []),
    ("{{ inputs.nope }}", ["template reads inputs.nope, but the workflow declares no input 'nope'"]),
    ("{{ task.id }}", []),  # outside a task, `task` is not checked
    ("{{ 'unterminated }}", [NEVER_CLOSED]),
])
def test_templates_are_checked_like_the_engine_parses_them(text: str, found: list[str]) -> None:
    assert template_problems(text, ["branch"]) == found


def test_task_templates_know_task_id_and_inputs() -> None:
    assert template_problems("{{ task.task_id }}/{{ task.files.length }}", [], ["files"]) == []
    assert template_problems("{{ task.file }}", [], ["files"]) == [
        ("template reads task.file, but the sub-agent task has no input 'file' (did you mean "
        "'files'?)")]
