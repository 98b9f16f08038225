"""The pytest plugin: a project that runs pytest gets its workflow cases as test items.

`pytester` runs pytest on a throwaway project (in this process, with the plugin loaded
from the package's `pytest11` entry point as any project would load it); the last test
collects this repository in a pytest subprocess, to show each shipped case is one item,
once.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from ruamel.yaml import YAML

from tests.e2e.e2e_helpers import ROOT

pytest_plugins = ["pytester"]
QUIET = ("-p", "no:cacheprovider", "-p", "no:asyncio")

WORKFLOW = """\
name: "demo:hello"
inputs:
  who: { type: string, default: "world" }
default_state: { raw: { greeted: 0 } }
steps:
  - { type: state_update, path: raw.greeted, operation: increment, value: 1 }
  - type: user_message
    message: "Hello, {{ inputs.who }}!"
"""


@pytest.fixture
def hello_project(pytester: pytest.Pytester) -> pytest.Pytester:
    folder = pytester.path / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "demo:hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    (folder / "demo:hello.test.yaml").write_text("""\
cases:
  - name: greets the world
    expect: { messages: ["Hello, world!"], state: { greeted: 1 } }
  - name: greets twice
    inputs: { who: ada }
    expect: { state: { greeted: 2 } }
""", encoding="utf-8")
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    return pytester


def test_each_case_is_an_item_and_a_failure_shows_path_and_values(hello_project: pytest.Pytester) -> None:
    result = hello_project.runpytest("-v", *QUIET)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*.aromcp/workflows/demo:hello.test.yaml::greets the world PASSED*",
        "*.aromcp/workflows/demo:hello.test.yaml::greets twice FAILED*",
        "*test_plain.py::test_plain PASSED*",
        "*.aromcp/workflows/demo:hello.test.yaml:4: case 'greets twice'",
        "  state.greeted: expected 2, got 1",
    ])


def test_k_selects_cases_and_a_bad_test_file_is_a_collection_error(hello_project: pytest.Pytester) -> None:
    result = hello_project.runpytest("-k", "world", *QUIET)
    result.assert_outcomes(passed=1, deselected=2)
    (hello_project.path / ".aromcp" / "workflows" / "demo:hello.test.yaml").write_text(
        "cases:\n  - name: x\n    expect: {status: done}\n", encoding="utf-8")
    result = hello_project.runpytest(*QUIET)
    result.assert_outcomes(errors=1)  # pytest stops at a collection error, as for a broken test module
    result.stdout.fnmatch_lines(["*demo:hello.test.yaml:3:14: expect.status 'done' is not one of*"])


@pytest.mark.slow
def test_this_repository_collects_each_shipped_case_once() -> None:
    """`make test` runs pytest with `testpaths = ["tests", "workflows"]`: the shipped cases
    are collected from workflows/ by the plugin, each once, and nothing under tests/ is a
    test file (tests write theirs into tmp folders)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts="],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    items = [line for line in done.stdout.splitlines() if ".test.yaml::" in line]
    yaml = YAML(typ="safe")
    expected = sorted(f"workflows/{path.name}::{case['name']}"
                      for path in (ROOT / "workflows").glob("*.test.yaml")
                      for case in yaml.load(path.read_text(encoding="utf-8"))["cases"])
    assert sorted(items) == expected
    assert len(expected) >= 14
    assert not list((ROOT / "tests").rglob("*.test.yaml"))
