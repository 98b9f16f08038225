"""Every seed example (tests/fixtures/seed/) run by the headless runner to the end the seed
describes, against a real server subprocess, real git, real V8.

The project has seven changed files; the runner answers the seed's MCP tools
(`hints_for_file`, `lint_project`, `check_typescript`, `tool.method`) and `apply_hints`.
Examples the seed leaves unfinished (placeholder steps) must be refused at start with the
validation error.  A test marked xfail names a semantic gap of the interpreter: strict, so
it fails the suite as soon as the gap is closed and the mark must go.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from aromcp_workflows.runner.report import RunOutcome
from aromcp_workflows.runner.run import run_workflow
from tests.e2e.e2e_helpers import SEVEN_FILES, git_repo

SEED_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "seed"
ANSWERS = {
    "hints_for_file": {"hints": ["prefer const"]},
    "apply": 2,
    "lint_project": {"errors": 0},
    "check_typescript": {"errors": 0},
    "tool.method": {"ok": True},
}
KEPT = ["README.md", "lib/e.py", "lib/f.py", "src/a.ts", "src/b.ts", "src/c.ts", "src/d.js"]


def run(tmp_path: Path, fixture: str) -> RunOutcome:
    repo = git_repo(tmp_path / "repo", SEVEN_FILES)
    return asyncio.run(run_workflow(str(SEED_DIR / fixture), {}, ANSWERS, repo,
                                    tmp_path / "store.sqlite", None))


@pytest.mark.parametrize("fixture", ["01-basic-structure.yaml", "03-step-types.yaml",
                                     "10-sub-agent-failure.yaml"])
def test_unfinished_seed_snippets_are_refused_at_start(tmp_path: Path, fixture: str) -> None:
    outcome = run(tmp_path, fixture)
    assert outcome.status == "not_started"
    assert "the seed design's snippets leave it out as a placeholder" in (outcome.error or "")


def test_state_schema_features(tmp_path: Path) -> None:
    outcome = run(tmp_path, "02-state-schema-features.yaml")
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert (state["counter"], state["status"], state["items"]) == (0, "initialized", [])
    assert state["config"] == {"retries": 3, "timeout": 5000}
    assert "parsed_files" not in state and "valid_files" not in state  # no git output yet


def test_composition(tmp_path: Path) -> None:
    outcome = run(tmp_path, "04-composition-main.yaml")
    assert outcome.status == "completed", outcome.error
    assert "run_checks" in (outcome.final_state or {})  # the included workflow's final state


SHARED_MAIN = """
name: "checks:main"
imports:
  - "shared/check-standards.yaml"
steps:
  - id: run_checks
    type: include_workflow
    workflow: "shared:check-standards"
    inputs:
      files: ["src/a.ts", "src/b.ts"]
  - type: user_message
    message: "{{ run_checks.total_issues }} issues in {{ run_checks.files_with_errors.join(', ') }}"
"""


def run_shared_checks(tmp_path: Path, answers: dict) -> RunOutcome:
    """The seed's shared/check-standards.yaml, byte for byte, included with two files."""
    (tmp_path / "flows" / "shared").mkdir(parents=True)
    shared = (SEED_DIR / "shared" / "check-standards.yaml").read_bytes()
    (tmp_path / "flows" / "shared" / "check-standards.yaml").write_bytes(shared)
    main = tmp_path / "flows" / "checks:main.yaml"
    main.write_text(SHARED_MAIN)
    repo = git_repo(tmp_path / "repo", SEVEN_FILES)
    return asyncio.run(run_workflow(str(main), {}, answers, repo, tmp_path / "store.sqlite", None))


def test_the_seeds_shared_check_standards_runs_as_written(tmp_path: Path) -> None:
    """`workflow:` wrapper, state_schema, mcp_call with mcp: {method, params} and an inline
    state_update, inputs.files from the include: every file checked, both computed fields."""
    outcome = run_shared_checks(tmp_path, {
        "check_typescript": [{"when_params": {"files": ["src/a.ts"]}, "result": {"errors": 2}},
                             {"result": {"errors": 1}}],
        "lint_project": [{"when_params": {"target_files": "src/b.ts"}, "result": {"errors": 4}},
                         {"result": {"errors": 0}}]})
    assert outcome.status == "completed", outcome.error
    calls = [e.summary for e in outcome.transcript]
    assert calls == ['check_typescript({"files": ["src/a.ts"]})', 'check_typescript({"files": ["src/b.ts"]})',
                     'lint_project({"target_files": "src/a.ts"})', 'lint_project({"target_files": "src/b.ts"})']
    assert outcome.messages == ["7 issues in src/a.ts, src/b.ts"]
    checks = (outcome.final_state or {})["run_checks"]
    assert checks["typescript_results"] == {"src/a.ts": {"errors": 2}, "src/b.ts": {"errors": 1}}
    assert checks["lint_results"] == {"src/a.ts": {"errors": 0}, "src/b.ts": {"errors": 4}}


def test_the_seeds_files_with_errors_reads_a_lint_result_not_in_yet(tmp_path: Path) -> None:
    """The seed's own transform: for a file without type errors, `files_with_errors` reads
    `input[1][f].errors` before that file's lint result exists.  Until the first lint
    result, lint_results is undefined and the field waits; after it, the throw is an error
    that names the field and the expression (on_error defaults to propagate)."""
    outcome = run_shared_checks(tmp_path, {"check_typescript": {"errors": 0}, "lint_project": {"errors": 0}})
    assert outcome.status == "failed"
    assert "computed field 'files_with_errors' failed" in (outcome.error or "")
    assert "input[1][f].errors" in (outcome.error or "")
    assert [e.summary for e in outcome.transcript][-1] == 'lint_project({"target_files": "src/a.ts"})'


def test_flattened_paths_fail_on_the_undefined_name(tmp_path: Path) -> None:
    """The seed reads `valid_files`, which nothing defines: validation warned, and reading
    `.length` of undefined fails the step, naming it."""
    outcome = run(tmp_path, "05-flattened-paths.yaml")
    assert outcome.status == "failed"
    assert "valid_files.length" in (outcome.error or "")
    assert "user_message_2" in (outcome.error or "")


def test_default_state_initialization(tmp_path: Path) -> None:
    outcome = run(tmp_path, "06-default-state.yaml")
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert (state["counter"], state["enabled"], state["items"]) == (0, True, [])
    assert (state["max_retries"], state["target_branch"]) == (3, "main")  # undeclared inputs: undefined
    assert state["config"] == {"timeout": 5000, "parallel_limit": 10}
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        state["workflow_run_id"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", state["start_time"])


def test_example_state_updates(tmp_path: Path) -> None:
    outcome = run(tmp_path, "07-example-state-updates.yaml")
    state = outcome.final_state or {}
    assert isinstance(state.get("line_counts"), list)
    assert state["line_counts"][-1].split() == ["0", "total"]
    # the seed's computed fields (large_files, ...) are comments only: reading them fails
    assert outcome.status == "failed" and "large_files" in (outcome.error or "")


@pytest.mark.parametrize("fixture", ["08-context-management.yaml", "11-global-error-handling.yaml"])
def test_seed_keys_are_accepted_and_the_workflow_runs(tmp_path: Path, fixture: str) -> None:
    outcome = run(tmp_path, fixture)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["done"]


def test_step_errors_retry_then_fall_back(tmp_path: Path) -> None:
    """`npm test` fails in the project (no package.json): three retries, then the fallback."""
    outcome = run(tmp_path, "09-step-errors.yaml")
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert state["test_result"] == {"success": False, "error": "Command failed"}
    assert state["parsed_data"] == {}  # JSON.parse(undefined) fails: use_fallback
    assert "errors" not in state  # the mcp_call succeeded: no error_state_update


def test_transformation_errors(tmp_path: Path) -> None:
    outcome = run(tmp_path, "12-transformation-errors.yaml")
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert state["parsed_output"] == {"error": "Parse failed"}  # raw: undefined is dropped
    assert state["safe_calculation"] == 0  # NaN fails validate: the fallback


def test_error_state_tracking(tmp_path: Path) -> None:
    outcome = run(tmp_path, "13-error-state-tracking.yaml")
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert (state["can_retry"], state["error_summary"]) == (False, {"failed_count": 0, "error_types": []})
    assert state["steps_completed"] == ["init"] and state["steps_failed"] == []  # tracked for us
    assert (state["retry_counts"], state["last_error"], state["workflow_errors"]) == ({}, None, [])


def test_complete_standards_fix(tmp_path: Path) -> None:
    outcome = run(tmp_path, "14-standards-fix-complete.yaml")
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["Processed 7 files in 3 batches."]
    state = outcome.final_state or {}
    assert state["filtered_files"] == KEPT
    assert state["batch_status"] == {"batch_0": "completed", "batch_1": "completed", "batch_2": "completed"}
    keys = {re.sub(r"[^A-Za-z0-9_-]+", "_", f) for f in KEPT}
    assert set(state["file_results"]) == keys
    for result in state["file_results"].values():
        assert (result["hints_applied"], result["lint_errors"], result["lint_attempts"]) == (2, 0, 1)
