"""docs/results.md tells the truth: its example workflow, run by `aromcp-workflows run`
with its answers, ends with exactly the final state the page shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.e2e.e2e_helpers import ROOT, git_repo, run_cli

PAGE = ROOT / "docs" / "results.md"


def block(label: str) -> str:
    """The fenced block right after `<!-- results-example: LABEL -->`."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"<!-- results-example: {label} -->\n```\w+\n(.*?)\n```", text, re.S)
    assert match, f"no {label} example in {PAGE}"
    return match.group(1) + "\n"


def test_the_documented_results_are_what_a_run_stores(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    workflow, answers = tmp_path / "results:demo.yaml", tmp_path / "answers.yaml"
    workflow.write_text(block("workflow"))
    answers.write_text(block("answers"))
    proc = run_cli(tmp_path, repo, "run", str(workflow), "--answers", str(answers), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "completed", outcome["error"]
    assert outcome["final_state"] == json.loads(block("state"))


def test_every_step_type_that_stores_a_result_is_documented() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("| step |"):text.index("## `output_format`")]
    for step_type in ("shell_command", "agent_shell_command", "mcp_call", "agent_prompt", "apply_hints",
                      "user_input", "include_workflow"):
        assert f"`{step_type}`" in table, step_type
    for fmt in ("text", "lines", "json", "key_value"):
        assert f"| `{fmt}`" in text, fmt
