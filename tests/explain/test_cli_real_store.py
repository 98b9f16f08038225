"""`trace` and `debug` as a user runs them: the headless runner drives a workflow through
a real server subprocess into a store file, then the CLI (another process) reads that
store.  Shows the history is the source of truth across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from explain_helpers import REPO, Project
from test_inspect import PASSWORD, TOKEN, TRACED

ANSWERS = "ask: bob\nwait_here: done\n"


def cli(project: Project, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(project.home), "PYTHONPATH": str(REPO)}
    env.pop("AROMCP_WORKFLOWS_STORE", None)
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project.root), *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


def test_trace_and_debug_read_the_store_the_runner_wrote(project: Project, tmp_path: Path) -> None:
    project.put("test:traced", TRACED)
    answers = tmp_path / "answers.yaml"
    answers.write_text(ANSWERS, encoding="utf-8")
    store = str(project.store)
    run = cli(project, "run", "test:traced", "--input", f"api_token={TOKEN}", "--answers", str(answers),
              "--store", store, "--json")
    assert run.returncode == 0, run.stderr[-800:]
    outcome = json.loads(run.stdout)
    workflow_id = outcome["workflow_id"]
    assert outcome["status"] == "completed"

    trace = cli(project, "trace", workflow_id, "--store", store)
    assert trace.returncode == 0, trace.stderr
    lines = trace.stdout.splitlines()
    assert any("doubled" in line and "[step bump]" in line and "1 → 2" in line for line in lines), lines
    assert any("fragile" in line and "ERROR TypeError" in line for line in lines)
    only = cli(project, "trace", workflow_id, "--field", "auth", "--store", store, "--json")
    traces = json.loads(only.stdout)["traces"]
    assert {t["field"] for t in traces} == {"auth"} and all("duration_ms" in t for t in traces)
    assert traces[-1]["output"] == "***"  # fed by inputs.api_token: a secret whole

    debug = cli(project, "debug", workflow_id, "--store", store)
    assert debug.returncode == 0, debug.stderr
    assert f"{workflow_id}  completed" in debug.stdout
    assert "skipped  never (user_message)" in debug.stdout
    assert "failed   failing (shell_command)" in debug.stdout and "code 3" in debug.stdout
    info = json.loads(cli(project, "debug", workflow_id, "--store", store, "--json").stdout)
    assert [h["status"] for h in info["step_history"]] == ["success", "skipped", "success", "failed", "success"]

    for output in (trace.stdout, only.stdout, debug.stdout, json.dumps(info)):
        assert TOKEN not in output and PASSWORD not in output

    missing = cli(project, "trace", "wf_nope", "--store", store)
    assert missing.returncode == 1 and "wf_nope" in missing.stderr and "Traceback" not in missing.stderr
