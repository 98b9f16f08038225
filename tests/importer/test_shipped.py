"""AroMCP's five shipped workflows: imported, validated, and run to completion.

The originals are AroMCP's files (tests/fixtures/aromcp/original, MIT); the checked-in
translations beside them must be exactly what the importer writes today.  Each run uses
the headless runner against a real server subprocess, with scripted answers for the agent
steps and a real project directory for the shell commands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.importer.importer_helpers import FIXTURES, ORIGINALS, git_project, import_and_run, translate

SHIPPED = sorted(p.name for p in ORIGINALS.glob("*.yaml"))


def test_the_five_shipped_workflows_are_stored():
    assert SHIPPED == ["analyze:dependencies.yaml", "code-standards:enforce.yaml",
                       "test:agent-communication.yaml", "test:simple.yaml", "test:sub-agents.yaml"]


@pytest.mark.parametrize("name", SHIPPED)
def test_checked_in_translation_is_the_importers_output(name: str):
    result = translate(ORIGINALS / name)
    assert result.ok, result.lines()
    assert result.text == (FIXTURES / name).read_text(encoding="utf-8")
    assert result.text.startswith(f"# Translated from AroMCP's workflow dialect by `aromcp-workflows import` "
                                  f"(source: {name})")


def test_simple(tmp_path: Path):
    outcome = import_and_run(ORIGINALS / "test:simple.yaml", tmp_path, inputs={"name": "Ada"})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["Counter is 5, doubled is 10"]
    assert outcome.final_state is not None
    assert outcome.final_state["message"] == "Hello from workflow\n"  # AroMCP's `stdout`


def test_simple_keeps_aromcps_required_input(tmp_path: Path):
    outcome = import_and_run(ORIGINALS / "test:simple.yaml", tmp_path)
    assert outcome.status == "not_started"
    assert "name" in (outcome.error or "")


def test_analyze_dependencies(tmp_path: Path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"dependencies": {"left-pad": "1.0.0", "chalk": "4.1.0"}}))
    bin_dir = tmp_path / "bin"  # a stand-in npm, so the run does not depend on the registry
    bin_dir.mkdir()
    (bin_dir / "npm").write_text("#!/bin/sh\necho 'left-pad 1.0.0 1.3.0 2.0.0 outdated'\n"
                                 "echo 'chalk 4.1.0 4.1.2 4.1.2 outdated'\n")
    (bin_dir / "npm").chmod(0o755)
    outcome = import_and_run(ORIGINALS / "analyze:dependencies.yaml", tmp_path, project=project,
                             env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["Found 2 outdated dependencies\nMajor version updates needed: 1"]
    assert outcome.final_state is not None
    assert outcome.final_state["dependencies"] == {"left-pad": "1.0.0", "chalk": "4.1.0"}
    assert [d["name"] for d in outcome.final_state["security_risks"]] == ["left-pad"]


def test_analyze_dependencies_without_package_json_uses_fallbacks(tmp_path: Path):
    """`cat package.json` fails: AroMCP's default `fail` strategy ends the workflow there."""
    outcome = import_and_run(ORIGINALS / "analyze:dependencies.yaml", tmp_path)
    assert outcome.status == "failed"
    assert "read_package" in (outcome.error or "")


AGENT_ANSWERS = {
    "lint_project": {"result": [{"file": "a.ts", "rule": "no-var"}, {"file": "b.ts", "rule": "semi"}]},
    "request_analysis": {"summary": "two issues", "fixes": ["use let", "add semicolon"],
                         "priorities": {"no-var": "high"}},
    "apply_fixes_prompt": {"success": True, "files_modified": ["a.ts", "b.ts"]},
}


def test_agent_communication(tmp_path: Path):
    outcome = import_and_run(ORIGINALS / "test:agent-communication.yaml", tmp_path,
                             inputs={"project_path": "."}, answers=AGENT_ANSWERS)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["Analysis complete!\n- Issues found: true\n- Fixes suggested: 2\n"
                                "- Fixes applied: true\n"]
    state = outcome.final_state
    assert state is not None
    assert state["suggested_fixes"] == ["use let", "add semicolon"]
    assert state["agent_analysis"]["summary"] == "two issues"
    assert [e.type for e in outcome.transcript] == ["mcp_call", "agent_prompt", "agent_prompt"]


def test_agent_communication_response_schema_is_enforced(tmp_path: Path):
    """agent_response's response_schema now guards the prompt: a bad answer is re-asked."""
    answers = {**AGENT_ANSWERS, "request_analysis": [{"summary": "no fixes key"}, AGENT_ANSWERS["request_analysis"]]}
    outcome = import_and_run(ORIGINALS / "test:agent-communication.yaml", tmp_path,
                             inputs={"project_path": "."}, answers=answers)
    assert outcome.status == "completed", outcome.error
    assert outcome.final_state is not None and outcome.final_state["fixes_applied"] is True
    assert [e.type for e in outcome.transcript].count("agent_prompt") == 3


def test_sub_agents(tmp_path: Path):
    """Files from git_output, as AroMCP's test passes it.  AroMCP's loader ignores a task's
    state_schema, so each task's can_continue never exists: its loop does not run and it
    ends in the failure branch, calling `echo` — as in AroMCP."""
    outcome = import_and_run(ORIGINALS / "test:sub-agents.yaml", tmp_path, answers={"echo": {"ok": True}},
                             inputs={"git_output": "src/test.ts\nsrc/another.js\nREADME.md\nnode_modules/x.js"})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages[0].startswith("Found 2 files to process:\n- Changed files: 4\n- Code files: 2\n")
    assert outcome.messages[-1] == "✅ Processing complete!\n- Total files: 2\n- Processed: 0\n- Failed: 0\n"
    # the two tasks run side by side: the transcript has them in the order they happened to finish
    assert sorted((e.task_id, e.step_id.split(".")[-1]) for e in outcome.transcript if e.task_id) == [
        ("process_file_0", "mark_final_failure"), ("process_file_1", "mark_final_failure")]
    assert (outcome.final_state or {})["last_error"] == "Failed to complete all standards checks after  attempts"


def test_sub_agents_start_from_default_state_inputs(tmp_path: Path):
    """default_state.inputs (git_output: "") is where AroMCP's code starts the inputs, not the
    declared default: no files, so the else branch's message and no sub-agents."""
    outcome = import_and_run(ORIGINALS / "test:sub-agents.yaml", tmp_path)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages[1] == "No files found to process. Workflow complete."
    assert not [e for e in outcome.transcript if e.type == "parallel_tasks"]


def test_code_standards_enforce(tmp_path: Path):
    project = git_project(tmp_path / "project", {"src/app.ts": "let a = 1\n", "lib/tool.py": "x = 1\n",
                                                 "README.md": "hi\n", "node_modules/x/i.js": "ignored\n"})
    outcome = import_and_run(ORIGINALS / "code-standards:enforce.yaml", tmp_path, project=project)
    assert outcome.status == "completed", outcome.error
    messages = outcome.messages
    assert messages[:3] == ["Starting code standards enforcement workflow...",
                            "Checking for changed files against main...", "Found 2 code files to process"]
    # the task's computed fields are ignored by AroMCP's loader, so each task reports failure
    failures = [m for m in messages if m.startswith("❌ Failed to enforce standards on")]
    assert sorted(failures) == ["❌ Failed to enforce standards on lib/tool.py after  attempts",
                                "❌ Failed to enforce standards on src/app.ts after  attempts"]
    # AroMCP's wait loop never sees processing_results change: it runs to max_iterations
    assert sum(m.startswith("Processing files... (0/2 complete)") for m in messages) == 100
    assert messages[-1] == "\nAll changes have been left uncommitted. Review and commit when ready."
    assert (outcome.final_state or {})["code_files"] == ["lib/tool.py", "src/app.ts"]
