"""Shipped workflows and the exported JSON Schema: both must agree with the loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from definition_helpers import BUILTIN_DIR, EXAMPLES_DIR, REPO

from aromcp_workflows.definition import WorkflowLoader, check
from aromcp_workflows.definition.resolver import is_workflow_file_name
from aromcp_workflows.definition.schema import workflow_json_schema
from aromcp_workflows.definition.yaml_source import parse_yaml

SHIPPED_FILES = sorted(p for p in BUILTIN_DIR.rglob("*.yaml") if is_workflow_file_name(p.name))
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.yaml"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = workflow_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", SHIPPED_FILES + EXAMPLE_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_shipped_and_example_files_validate_without_warnings(path: Path, loader: WorkflowLoader) -> None:
    report = check(str(path), loader)
    assert [str(p) for p in report.errors + report.warnings] == []


@pytest.mark.parametrize("path", SHIPPED_FILES + EXAMPLE_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_json_schema_accepts_shipped_and_example_files(path: Path, validator: jsonschema.Draft202012Validator) -> None:
    for document in parse_yaml(path.read_text(encoding="utf-8"), str(path)):
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document.data)]
        assert errors == []


@pytest.mark.parametrize("path", SHIPPED_FILES + EXAMPLE_FILES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_files_point_editors_at_the_schema(path: Path) -> None:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    relative = Path("..", *[".."] * (len(path.relative_to(REPO).parts) - 2), "docs", "workflow.schema.json")
    assert first == f"# yaml-language-server: $schema={relative.as_posix()}"


def test_shipped_names_by_name(loader: WorkflowLoader) -> None:
    names = [w.name for w in loader.resolver.list()]
    assert names == ["ci:retry-tests", "deps:analyze", "standards:check", "standards:fix"]
    for name in names:
        assert check(name, loader).valid, name


def test_committed_schema_matches_the_models() -> None:
    committed = json.loads((REPO / "docs" / "workflow.schema.json").read_text(encoding="utf-8"))
    assert committed == workflow_json_schema(), "run: aromcp-workflows schema -o docs/workflow.schema.json"


def test_schema_knows_the_aliases(validator: jsonschema.Draft202012Validator) -> None:
    aliased = {"name": "a", "steps": [
        {"type": "conditional", "condition": "x", "then_steps": [{"type": "exit"}],
         "else_steps": [{"type": "break"}]},
        {"type": "mcp_call", "method": "m", "params": {"a": 1}},
        {"type": "parallel_foreach", "items": "x", "sub_agent_task": "t", "on_sub_agent_error": "continue"},
    ], "sub_agent_tasks": {"t": {"inputs": {"n": "{{ item }}"}, "steps": [{"type": "exit"}]}}}
    assert validator.is_valid(aliased)
    assert validator.is_valid({"workflow": aliased})
    assert validator.is_valid({"workflows": [aliased, aliased]})
    assert not validator.is_valid({"name": "a", "steps": [{"type": "mcp_call"}]})
    assert not validator.is_valid({"workflow": aliased, "extra": 1})


def test_there_are_examples_and_each_works_from_a_project(project: Path, loader: WorkflowLoader) -> None:
    assert len(EXAMPLE_FILES) >= 5
    for path in EXAMPLE_FILES:
        (project / ".aromcp" / "workflows" / path.name).write_text(path.read_text(encoding="utf-8"))
    for path in EXAMPLE_FILES:
        report = check(path.stem, loader)  # found by file name, and its name matches
        assert (report.errors, report.warnings) == ([], []), path.name
        assert report.bundle is not None and report.bundle.main.source == "project"
