"""`aromcp-workflows retry` and `fork` as a user runs them: the headless runner fails a
workflow, the CLI repairs it, `run --resume` drives the result to its end over MCP stdio.
Bad input gets exit 1 (2 for usage) and one line on stderr, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.e2e_helpers import run_cli
from tests.repair.workflows import CLI


def project_with_workflow(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "repair:cli.yaml").write_text(CLI)
    (tmp_path / "answers.yaml").write_text('ask: "answered"\n')
    return project


def json_of(base: Path, project: Path, *args: str) -> dict:
    done = run_cli(base, project, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_retry_then_resume_runs_the_failed_instance_to_its_end(tmp_path: Path):
    project = project_with_workflow(tmp_path)
    answers = str(tmp_path / "answers.yaml")
    failed = run_cli(tmp_path, project, "run", "repair:cli", "--answers", answers, "--json")
    assert failed.returncode == 1
    wid = json.loads(failed.stdout)["workflow_id"]

    retried = run_cli(tmp_path, project, "retry", wid)
    assert retried.returncode == 0, retried.stderr
    assert f"{wid}: step needs_file runs again, with the state of version" in retried.stdout
    assert f"aromcp-workflows run --resume {wid}" in retried.stdout
    status = json_of(tmp_path, project, "status", wid)
    assert status["status"] == "running" and "error" not in status

    (project / "ready.txt").write_text("ready\n")
    resumed = run_cli(tmp_path, project, "run", "--resume", wid, "--answers", answers, "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["status"] == "completed"
    state = final["final_state"]
    assert state["log"] == ["first", "last"] and state["ready"] == "ready"
    assert state["errors"] == [] and state["cleaned_up"] is False  # the failed try's error handling is undone
    debug = json_of(tmp_path, project, "debug", wid)
    assert [e["status"] for e in debug["step_history"] if e["step_id"] == "needs_file"] == ["failed", "success"]


def test_fork_at_a_step_with_edits_then_resume_runs_the_new_instance(tmp_path: Path):
    project = project_with_workflow(tmp_path)
    answers = str(tmp_path / "answers.yaml")
    (project / "ready.txt").write_text("ready\n")
    done = run_cli(tmp_path, project, "run", "repair:cli", "--answers", answers, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    wid = json.loads(done.stdout)["workflow_id"]
    original = json_of(tmp_path, project, "status", wid)

    made = run_cli(tmp_path, project, "fork", wid, "--at", "ask", "--set", "raw.count=3", "--set", 'raw.note="hi"')
    assert made.returncode == 0, made.stderr
    new = made.stdout.split(":", 1)[0]
    assert f"{new}: forked from {wid} at step ask, version" in made.stdout
    assert "edited raw.count, raw.note" in made.stdout
    resumed = run_cli(tmp_path, project, "run", "--resume", new, "--answers", answers, "--json")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = json.loads(resumed.stdout)["final_state"]
    assert state["count"] == 3 and state["doubled"] == 6 and state["note"] == "hi"
    assert state["log"] == ["first", "last"] and state["answer"] == "answered"
    status = json_of(tmp_path, project, "status", new)
    assert status["forked_from"] == {"workflow_id": wid, "version": status["forked_from"]["version"],
                                     "step_id": "ask", "edits": ["raw.count", "raw.note"]}
    assert json_of(tmp_path, project, "status", wid) == original


def test_bad_repairs_exit_1_or_2_with_one_line_and_write_nothing(tmp_path: Path):
    project = project_with_workflow(tmp_path)
    answers = str(tmp_path / "answers.yaml")
    done = run_cli(tmp_path, project, "run", "repair:cli", "--answers", answers, "--json")
    wid = json.loads(done.stdout)["workflow_id"]
    before = rows(tmp_path, project)
    cases = [
        (["retry", "wf_nope"], 1, "No workflow instance with id 'wf_nope'"),
        (["fork", "wf_nope"], 1, "No workflow instance with id 'wf_nope'"),
        (["fork", wid, "--at", "nope"], 1, "never handed out or started a step 'nope'"),
        (["fork", wid, "--version", "999"], 1, "version 999 is not one of them"),
        (["fork", wid, "--at", "ask", "--set", "computed.doubled=1"], 1, "cannot edit computed.doubled"),
        (["fork", wid, "--at", "ask", "--set", "raw.count=\"x\""], 1, "declares count as number"),
        (["fork", wid, "--at", "ask", "--set", "raw.log[=1"], 1, "the edits were refused"),
        (["fork", wid, "--at", "ask", "--set", "raw.note=hi"], 2, "is not JSON"),
        (["fork", wid, "--at", "ask", "--set", "raw.note"], 2, "is not PATH=JSON"),
        (["fork", wid, "--at", "ask", "--version", "2"], 2, "not allowed with argument --at"),
        (["fork", wid, "--version", "two"], 2, "invalid int value"),
    ]
    for args, code, words in cases:
        got = run_cli(tmp_path, project, *args)
        assert got.returncode == code, (args, got.stdout, got.stderr)
        assert words in got.stderr, (args, got.stderr)
        assert "Traceback" not in got.stderr and got.stdout == ""
        if code == 1:
            assert len(got.stderr.strip().splitlines()) == 1, got.stderr
    assert rows(tmp_path, project) == before


def rows(base: Path, project: Path) -> list[tuple[str, str, str]]:
    """Every instance with its status and last write (what a refused repair must not change)."""
    return [(row["workflow_id"], row["status"], row["updated_at"])
            for row in json_of(base, project, "status")["instances"]]
