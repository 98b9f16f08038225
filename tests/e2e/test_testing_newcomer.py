"""A newcomer tests their own workflow from docs/testing.md alone, through the real CLI.

The workflow and the two-case test file are the first two YAML blocks of docs/testing.md,
taken as they are written there.  Everything runs as a user runs it: `aromcp-workflows` in a
subprocess, a real `run` with the headless agent over MCP stdio, a SQLite store in tmp.
The same newcomer then edits a workflow under a waiting instance (docs/evolving.md).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.e2e_helpers import ROOT, run_cli

DOCS = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOCS, re.S)


def project_from_docs(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    folder = project / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "demo:deploy.yaml").write_text(BLOCKS[0], encoding="utf-8")
    test_file = folder / "demo:deploy.test.yaml"
    test_file.write_text(BLOCKS[1], encoding="utf-8")
    return project, test_file


def test_a_newcomer_writes_runs_breaks_covers_and_records_a_test(tmp_path: Path) -> None:
    project, test_file = project_from_docs(tmp_path)
    assert "name: deploys after a yes" in BLOCKS[1] and "name: a failed build stops everything" in BLOCKS[1]

    passing = run_cli(tmp_path, project, "test", cwd=project)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert passing.stdout.count(" PASSED") == 2 and "2 passed in " in passing.stdout

    test_file.write_text(BLOCKS[1].replace('state: { confirmed: "yes" }', 'state: { confirmed: "no" }'),
                         encoding="utf-8")
    failing = run_cli(tmp_path, project, "test", cwd=project)
    assert failing.returncode == 1
    assert ".aromcp/workflows/demo:deploy.test.yaml::deploys after a yes FAILED" in failing.stdout
    assert ".aromcp/workflows/demo:deploy.test.yaml:2: case 'deploys after a yes'" in failing.stdout
    assert '  state.confirmed: expected "no", got "yes"' in failing.stdout
    test_file.write_text(BLOCKS[1], encoding="utf-8")

    covered = run_cli(tmp_path, project, "test", "demo:deploy", "--coverage", cwd=project)
    assert covered.returncode == 0
    assert "demo:deploy                      4/5 branches (80%)  .aromcp/workflows/demo:deploy.yaml" in covered.stdout
    assert ("    not covered: .aromcp/workflows/demo:deploy.yaml:20: shell_command built.deploy: when false, "
            "skipped  [built.deploy:skip]") in covered.stdout
    under = run_cli(tmp_path, project, "test", "--coverage-min", "100", cwd=project)
    assert under.returncode == 1 and "coverage of demo:deploy is 80.0%, under --coverage-min 100%" in under.stdout

    (project / "Makefile").write_text("build:\n\t@echo built\n", encoding="utf-8")
    answers = tmp_path / "answers.yaml"
    answers.write_text('confirm: "no"\n', encoding="utf-8")
    real = run_cli(tmp_path, project, "run", "demo:deploy", "--answers", str(answers), "--json", cwd=project)
    assert real.returncode == 0, real.stdout + real.stderr
    workflow_id = re.search(r'"workflow_id": "(wf_\w+)"', real.stdout).group(1)  # type: ignore[union-attr]
    recorded = run_cli(tmp_path, project, "test", "--record", workflow_id, "--out", str(test_file), cwd=project)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert f"wrote case 'recorded {workflow_id}'" in recorded.stdout
    assert "match: make build" in test_file.read_text(encoding="utf-8")
    (project / "Makefile").unlink()  # the recorded case replays the build from its stub
    final = run_cli(tmp_path, project, "test", "--coverage", cwd=project)
    assert final.returncode == 0, final.stdout
    assert f"::recorded {workflow_id} PASSED" in final.stdout
    assert "demo:deploy                      5/5 branches (100%)" in final.stdout


def test_the_shipped_tests_run_from_the_quick_tour(tmp_path: Path) -> None:
    """The README's tour: `aromcp-workflows test ci:retry-tests --coverage` from any folder."""
    done = run_cli(tmp_path, tmp_path, "test", "ci:retry-tests", "--coverage", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ci:retry-tests                   12/12 branches (100%)" in done.stdout
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "aromcp-workflows test ci:retry-tests --coverage" in readme


def test_every_shipped_workflow_is_at_full_branch_coverage(tmp_path: Path) -> None:
    done = run_cli(tmp_path, tmp_path, "test", str(ROOT / "workflows"), "--coverage-min", "100", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if "branches (" in line]
    assert len(rows) == 5 and all("(100%)" in row for row in rows), rows


def test_a_waiting_instance_moves_onto_the_edited_file_from_docs_evolving(tmp_path: Path) -> None:
    """docs/evolving.md's two versions of demo:review, its commands, through the real CLI."""
    from aromcp_workflows.app.service import WorkflowService

    original, edited = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "evolving.md").read_text(), re.S)[:2]
    project = tmp_path / "project"
    path = project / ".aromcp" / "workflows" / "demo:review.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(original, encoding="utf-8")
    service = WorkflowService(project_dir=project, store_path=tmp_path / "store.sqlite", home=tmp_path / "home")
    workflow_id = service.start("demo:review").workflow_id
    assert service.next_step(workflow_id).step["id"] == "review.ask#1"  # type: ignore[index]
    service.close()

    path.write_text(edited.replace("id: ask", "id: question"), encoding="utf-8")
    refused = run_cli(tmp_path, project, "migrate", workflow_id, cwd=project)
    assert refused.returncode == 1
    assert ("  .aromcp/workflows/demo:review.yaml:12: step review.ask is gone from demo:review.yaml (the loop at "
            "line 12 no longer holds it)") in refused.stdout

    path.write_text(edited, encoding="utf-8")
    status = run_cli(tmp_path, project, "status", workflow_id, cwd=project)
    assert "definition changed since start" in status.stdout
    moved = run_cli(tmp_path, project, "migrate", workflow_id, cwd=project)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert f"{workflow_id} (demo:review): moved onto .aromcp/workflows/demo:review.yaml" in moved.stdout

    again = WorkflowService(project_dir=project, store_path=tmp_path / "store.sqlite", home=tmp_path / "home")
    again.step_complete(workflow_id, "review.ask#1", result="yes")
    end = again.step_complete(workflow_id, "review.ask#2", result="no")
    assert end.status == "completed" and end.messages == ["1 of 2 shipped; notify #ci"]
