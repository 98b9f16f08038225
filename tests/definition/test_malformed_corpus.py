"""The malformed-workflow corpus: each file names the exact problems it must produce.

A file in `malformed/` starts with one `# expect: LINE:COL: message` line per problem,
in order (`warning: ` before a warning's message; `other/file.yaml:LINE:COL:` when the
problem is in a file the case imports), and `# structural` when the exported JSON Schema
must reject it as well.  Every case goes through the real loader and validator.
"""

from __future__ import annotations

import os
from pathlib import Path

import jsonschema
import pytest
from definition_helpers import MALFORMED_DIR

from aromcp_workflows.definition import DefinitionProblem, WorkflowLoader, check
from aromcp_workflows.definition.errors import DefinitionError
from aromcp_workflows.definition.schema import workflow_json_schema
from aromcp_workflows.definition.yaml_source import parse_yaml

CASES = sorted(MALFORMED_DIR.glob("*.yaml"))


def expectations(path: Path) -> tuple[list[str], bool]:
    expected, structural = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# expect: "):
            expected.append(line[len("# expect: "):])
        elif line.strip() == "# structural":
            structural = True
        else:
            break
    return expected, structural


def rendered(problem: DefinitionProblem, case: Path) -> str:
    """How a problem reads in the corpus: the location is relative to the case file."""
    prefix = "" if problem.file == str(case) else os.path.relpath(str(problem.file), MALFORMED_DIR) + ":"
    severity = "warning: " if problem.severity == "warning" else ""
    return f"{prefix}{problem.line}:{problem.column}: {severity}{problem.message}"


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert all(expectations(case)[0] for case in CASES), "every case expects a problem"


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_case_reports_exactly_its_expected_problems(case: Path, loader: WorkflowLoader) -> None:
    expected, _ = expectations(case)
    report = check(str(case), loader)
    assert [rendered(p, case) for p in report.errors + report.warnings] == expected
    only_warnings = all(": warning: " in line for line in expected)
    assert report.valid == only_warnings  # warnings alone never make a workflow invalid


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_messages_are_positioned_and_free_of_library_jargon(case: Path, loader: WorkflowLoader) -> None:
    report = check(str(case), loader)
    for problem in report.errors + report.warnings:
        assert problem.file and problem.line and problem.column, problem
        for jargon in ("Input should", "Traceback", "pydantic", "ruamel", "<block", "scalar"):
            assert jargon not in problem.message, problem


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_json_schema_rejects_exactly_the_structural_cases(case: Path) -> None:
    _, structural = expectations(case)
    try:
        documents = parse_yaml(case.read_text(encoding="utf-8"), str(case))
    except DefinitionError:
        assert not structural, "a YAML syntax error has no data for the schema to check"
        return
    validator = jsonschema.Draft202012Validator(workflow_json_schema())
    bodies = [d.data for d in documents if d.data is not None] or [None]
    rejected = any(not validator.is_valid(body) for body in bodies)
    assert rejected == structural


def test_problems_in_imported_files_name_that_file(loader: WorkflowLoader) -> None:
    case = MALFORMED_DIR / "24-circular-include.yaml"
    (problem,) = check(str(case), loader).errors
    assert problem.file == str(MALFORMED_DIR / "_support" / "cycle-b.yaml")
    assert str(problem).startswith(f"{problem.file}:6:5: circular include: ")
