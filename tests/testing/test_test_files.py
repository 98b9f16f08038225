"""Test files: how they are found, and every problem of a bad one at `file:line:column`.

A test file with any problem runs no case and makes `aromcp-workflows test` exit 2; the
others still run.  Test files are never workflows: `list`, `validate --all`, `validate
DIR` and `workflow_list` leave them out.
"""

from __future__ import annotations

import pytest

from tests.testing.conftest import Project

WORKFLOW = """\
name: "demo:hello"
inputs:
  who: { type: string, default: "world" }
steps:
  - id: greet
    type: user_message
    message: "Hello, {{ inputs.who }}!"
"""

PASSING = """\
cases:
  - name: greets the world
    expect:
      messages: ["Hello, world!"]
"""


@pytest.fixture
def hello(project: Project) -> Project:
    project.write("demo:hello.yaml", WORKFLOW)
    return project


BAD_FILES = [
    ("unknown top key", "cases: []\nsetup: {}\n",
     ["demo:hello.test.yaml:1:1: a test file needs `cases:`",
      "demo:hello.test.yaml:2:1: unknown key 'setup' in a test file; allowed: workflow, cases, coverage_ignore"]),
    ("case without a name", "cases:\n  - inputs: {}\n",
     ["demo:hello.test.yaml:2:5: a case needs a `name` (text)"]),
    ("two cases with one name", "cases:\n  - name: a\n  - name: a\n",
     ["demo:hello.test.yaml:3:5: another case is named 'a' (line 2); case names must be unique in a file"]),
    ("stub without match", "cases:\n  - name: a\n    shell:\n      - results: [{exit_code: 0}]\n",
     ["demo:hello.test.yaml:4:9: a stub needs `match:` (a glob on the rendered command) and `results:`"]),
    ("exit code that is text",
     "cases:\n  - name: a\n    shell:\n      - match: x\n        results: [{exit_code: one}]\n",
     ["demo:hello.test.yaml:5:20: exit_code must be a whole number, not text"]),
    ("unknown status", "cases:\n  - name: a\n    expect: {status: done}\n",
     ["demo:hello.test.yaml:3:14: expect.status 'done' is not one of completed, failed, waiting, cancelled, "
      "not_started"]),
    ("unknown expect key", "cases:\n  - name: a\n    expect: {output: x}\n",
     ["demo:hello.test.yaml:3:14: unknown key 'output' in expect; allowed: status, state, messages, error"]),
    ("project file outside", "cases:\n  - name: a\n    project: {/etc/x: hi}\n",
     ["demo:hello.test.yaml:3:15: project file '/etc/x' must be a relative path inside the project"]),
    ("bad answer", "cases:\n  - name: a\n    answers:\n      greet: {result: 1, error: no}\n",
     ["demo:hello.test.yaml:3:5: answers entry greet: give either `result` or `error`, not both"]),
    ("not a mapping", "- name: a\n", ["demo:hello.test.yaml:1:1: a test file is one YAML mapping with `cases:`"]),
    ("broken YAML", "cases:\n  - name: a\n   expect: {}\n", ["demo:hello.test.yaml:3:"]),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_test_file_is_each_problem_at_file_line_column(hello: Project, name: str, text: str,
                                                              expected: list[str]) -> None:
    hello.write("demo:hello.test.yaml", text)
    done = hello.cli("test")
    assert done.code == 2, done.out
    for line in expected:
        assert f".aromcp/workflows/{line}" in done.out, done.out
    assert "PASSED" not in done.out and "FAILED" not in done.out


def test_a_test_file_needs_its_workflow_beside_it(project: Project) -> None:
    project.write("demo:gone.test.yaml", PASSING)
    done = project.cli("test")
    assert done.code == 2
    assert (".aromcp/workflows/demo:gone.test.yaml:1:1: no workflow demo:gone.yaml beside this test file; a test "
            "file sits next to its workflow (<name>.test.yaml beside <name>.yaml), or names it with `workflow:`"
            ) in done.out


def test_workflow_key_names_another_workflow_beside_it(hello: Project) -> None:
    hello.write("greetings.test.yaml", 'workflow: "demo:hello"\n' + PASSING)
    hello.write("other.test.yaml", 'workflow: "demo:nope"\n' + PASSING)
    done = hello.cli("test")
    assert "greetings.test.yaml::greets the world PASSED" in done.out
    assert ".aromcp/workflows/other.test.yaml:1:1: no workflow demo:nope.yaml beside this test file" in done.out
    assert done.code == 2  # one invalid file: usage error, even though the other passed


def test_targets_name_files_folders_workflow_files_and_names(hello: Project) -> None:
    hello.write("demo:hello.test.yaml", PASSING)
    for target in ("demo:hello", ".aromcp/workflows", ".aromcp/workflows/demo:hello.yaml",
                   ".aromcp/workflows/demo:hello.test.yaml"):
        done = hello.cli("test", target)
        assert done.code == 0, (target, done.out, done.err)
        assert done.out.count("PASSED") == 1


def test_usage_errors_say_what_to_do(hello: Project) -> None:
    assert "no test files found under .aromcp/workflows/" in hello.cli("test").err
    done = hello.cli("test", "demo:hello")
    assert done.code == 2 and "workflow demo:hello has no test file: write " in done.err
    done = hello.cli("test", "demo:nothing")
    assert done.code == 2 and "workflow 'demo:nothing' not found; looked in:" in done.err
    done = hello.cli("test", "--record", "wf_x")
    assert done.code == 2 and "--record ID needs --out FILE" in done.err


def test_test_files_are_never_workflows(hello: Project) -> None:
    hello.write("demo:hello.test.yaml", PASSING)
    assert "demo:hello.test" not in hello.cli("list", "--no-global").out
    validated = hello.cli("validate", "--all").out
    assert "demo:hello: valid" in validated and ".test" not in validated
    done = hello.cli("validate", str(hello.workflows))
    assert done.code == 0 and done.out.count("valid") == 1, done.out
    rows = hello.service().list_workflows(include_global=False).workflows
    assert [r.name for r in rows if r.source == "project"] == ["demo:hello"]


def test_shipped_test_files_sit_beside_every_shipped_workflow_and_are_not_listed() -> None:
    from aromcp_workflows.definition import WorkflowResolver
    from aromcp_workflows.definition.resolver import builtin_workflow_dir, is_workflow_file_name

    folder = builtin_workflow_dir()
    shipped = sorted(p.stem for p in folder.glob("*.yaml") if is_workflow_file_name(p.name))
    assert shipped == ["ci:retry-tests", "deps:analyze", "standards:check", "standards:fix"]
    assert all((folder / f"{name}.test.yaml").is_file() for name in shipped)
    listed = [w.name for w in WorkflowResolver().list(include_global=False) if w.source == "builtin"]
    assert listed == shipped


def test_the_wheel_ships_the_test_files_beside_the_builtins_on_purpose() -> None:
    """The wheel maps `workflows/` whole into the package data, test files included: they
    are the built-ins' tests (`aromcp-workflows test ci:retry-tests` works from any
    installation) and, being `.test.yaml`, never workflows."""
    import tomllib

    from tests.e2e.e2e_helpers import ROOT

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    wheel = config["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"]["workflows"] == "aromcp_workflows/_data/workflows"
    assert "exclude" not in wheel
    assert config["project"]["entry-points"]["pytest11"] == {
        "aromcp_workflows": "aromcp_workflows.testing.pytest_plugin"}
