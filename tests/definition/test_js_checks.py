"""The JavaScript checks of validation: V8 compiles every expression of a file in one
crossing (never running them) and caches the results.
"""

from __future__ import annotations

from pathlib import Path

from aromcp_workflows.definition import WorkflowLoader, check, js_syntax

FLOW = """\
name: js-checks
default_state:
  raw: {{ count: 0, files: [] }}
state_schema:
  computed:
    doubled:
      from: raw.count
      transform: "input * {factor}"
steps:
  - type: user_message
    message: "{{{{ files.filter(f => f.endsWith('.ts')).length }}}} of {{{{ count + {offset} }}}}"
  - type: conditional
    condition: "count > {offset}"
    then:
      - type: user_message
        message: "{{{{ files.map(f => f.toUpperCase()) | json }}}}"
"""


def crossings() -> int:
    return js_syntax._get_engine().stats.v8_calls


def test_one_crossing_per_file_and_none_when_seen(project: Path, loader: WorkflowLoader) -> None:
    path = project / ".aromcp" / "workflows" / "js-checks.yaml"
    path.write_text(FLOW.format(factor=7919, offset=104729), encoding="utf-8")
    before = crossings()
    assert check("js-checks", loader).valid
    assert crossings() == before + 1  # five expressions, one V8 call
    assert check("js-checks", loader).valid
    assert crossings() == before + 1  # all cached: validating at every start stays cheap


def test_a_syntax_error_is_found_without_running_anything(project: Path, loader: WorkflowLoader) -> None:
    path = project / ".aromcp" / "workflows" / "js-checks.yaml"
    path.write_text(FLOW.format(factor="(() => { while (true) {} })()", offset="1 +"), encoding="utf-8")
    report = check("js-checks", loader)  # the endless transform is compiled, not run
    assert [f"{p.line}:{p.column}: {p.message}" for p in report.errors] == [
        "11:5: template {{ count + 1 + }} is not valid JavaScript: SyntaxError: unexpected end of "
        "the expression (something is missing at its end)",
        "13:5: condition 'count > 1 +' is not valid JavaScript: SyntaxError: unexpected end of the "
        "expression (something is missing at its end)",
    ]
