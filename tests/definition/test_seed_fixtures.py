"""Every YAML example of the seed design (tests/fixtures/seed/), validated as written.

A whole example must validate; where the seed leaves a step unfinished as a placeholder
(`- type: mcp_call  # Steps if true`), validation must refuse exactly that, naming the
seed's placeholder and what a runnable step needs.  Warnings for names the seed reads
without declaring them are part of each expectation: they are what an author sees.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aromcp_workflows.definition import WorkflowLoader, check

SEED_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "seed"
FIXTURES = sorted(SEED_DIR.glob("*.yaml"))
PLACEHOLDER_MCP = ("missing required key 'mcp' (or top-level 'method') in mcp_call step; the seed "
                   "design's snippets leave it out as a placeholder, but a step that runs names "
                   "its tool (mcp: {method: ..., params: ...})")
UNDECLARED = ("which no default_state, state_schema, computed field or step declares or writes: it "
              "is undefined unless an agent sets it (declare it, for example as default_state.raw.{})")


def undeclared_input(name: str) -> str:
    return (f"template reads inputs.{name}, but the workflow declares no input {name!r}: workflow_start "
            "accepts only declared inputs, so it is undefined unless an include_workflow passes it; "
            "declare it under 'inputs'")


# fixture -> (errors, warnings), each "LINE:COL: message" (another file: "FILE:LINE:COL: ...")
EXPECTED: dict[str, tuple[list[str], list[str]]] = {
    "01-basic-structure.yaml": ([f"84:9: {PLACEHOLDER_MCP}"], []),
    "02-state-schema-features.yaml": ([], [
        "49:7: transform of computed field 'complex_calculation' reads 'file_batches', "
        + UNDECLARED.format("file_batches")]),
    "03-step-types.yaml": ([
        f"58:7: {PLACEHOLDER_MCP}", f"61:7: {PLACEHOLDER_MCP}",
        "77:7: missing required key 'command' in shell_command step; the seed design's snippets "
        "leave it out as a placeholder, but a step that runs needs the command"], []),
    "04-composition-main.yaml": ([], [
        "14:7: workflow 'shared:check-standards' declares no inputs, so 'files' reaches it "
        "undeclared; declare it in that workflow's 'inputs' to have it checked",
        "14:7: template {{ valid_files }} reads 'valid_files', " + UNDECLARED.format("valid_files"),
        f"shared/check-standards.yaml:29:7: {undeclared_input('files')}",
        f"shared/check-standards.yaml:42:7: {undeclared_input('files')}"]),
    "05-flattened-paths.yaml": ([], [
        "8:3: template {{ file_count > 0 && is_ready }} reads 'is_ready', " + UNDECLARED.format("is_ready"),
        "11:3: template {{ valid_files.length }} reads 'valid_files', " + UNDECLARED.format("valid_files")]),
    "06-default-state.yaml": ([], [f"17:5: {undeclared_input('retries')}",
                                   f"18:5: {undeclared_input('branch')}",
                                   f"23:7: {undeclared_input('parallel')}"]),
    "07-example-state-updates.yaml": ([], [
        "21:3: template {{ large_files.length > 0 }} reads 'large_files', " + UNDECLARED.format("large_files"),
        "24:7: template {{ large_files.length }} reads 'large_files', " + UNDECLARED.format("large_files")]),
    "08-context-management.yaml": ([], [
        "6:1: orchestrator_behavior (from the seed design) is kept as documentation only: agents "
        "are not sent it; the orchestrator prompt already checkpoints when its context runs high",
        "13:1: on_high_context_usage (from the seed design) is validated but never run: the server "
        "cannot see an agent's context; the orchestrator prompt has the agent call "
        "workflow_checkpoint and ask the user to run /workflow resume <id> instead"]),
    "09-step-errors.yaml": ([], []),
    "10-sub-agent-failure.yaml": ([
        "20:3: missing required key 'steps' in sub-agent task 'process_batch'; the seed design's "
        "snippets leave it out as a placeholder, but a sub-agent task needs the steps it runs"], []),
    "11-global-error-handling.yaml": ([], []),
    "12-transformation-errors.yaml": ([], []),
    "13-error-state-tracking.yaml": ([], []),
    "14-standards-fix-complete.yaml": ([], []),
}


def rendered(problem, fixture: Path) -> str:
    prefix = "" if problem.file == str(fixture) else os.path.relpath(str(problem.file), SEED_DIR) + ":"
    return f"{prefix}{problem.line}:{problem.column}: {problem.message}"


def test_every_fixture_has_an_expectation() -> None:
    assert sorted(EXPECTED) == [f.name for f in FIXTURES]
    assert len(FIXTURES) == 14  # the seed's 13 YAML examples and its complete standards:fix


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_seed_example_validates_as_written(fixture: Path, loader: WorkflowLoader) -> None:
    errors, warnings = EXPECTED[fixture.name]
    report = check(str(fixture), loader)
    assert [rendered(p, fixture) for p in report.errors] == errors
    assert [rendered(p, fixture) for p in report.warnings] == warnings
    assert report.valid == (not errors)

