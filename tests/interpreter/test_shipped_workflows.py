"""The shipped workflows run end to end in process with a scripted agent."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.interpreter.agent import ScriptedAgent
from tests.interpreter.conftest import git_repo

SEVEN_FILES = {
    "src/a.ts": "a", "src/b.ts": "b", "src/c.ts": "c", "src/d.js": "d",
    "lib/e.py": "e", "lib/f.py": "f", "README.md": "g",
    "node_modules/x/index.js": "ignored", "dist/app.min.js": "ignored", "types/t.d.ts": "ignored",
}


def test_standards_fix_runs_three_concurrent_sub_agents(start, tmp_path: Path):
    repo = git_repo(tmp_path / "repo", SEVEN_FILES)
    run, driver = start("standards:fix", {}, repo)
    barrier = threading.Barrier(3, timeout=20)
    first_call: set[str] = set()
    guard = threading.Lock()

    def answerer(step):
        definition = step["definition"]
        task = step["id"].split(".", 1)[0]
        if step["type"] == "mcp_call" and definition["method"] == "hints_for_file":
            with guard:
                is_first = task not in first_call
                first_call.add(task)
            if is_first:
                barrier.wait()  # proves the three sub-agents run at the same time
            return {"hints": [f"fix {definition['params']['file_path']}"]}
        if step["type"] == "agent_prompt":
            assert definition["context"]["hints"] == {"hints": [f"fix {definition['context']['file']}"]}
            return 2
        if step["type"] == "mcp_call" and definition["method"] == "lint_project":
            return {"errors": 0}
        raise AssertionError(f"unexpected step {step}")

    agent = ScriptedAgent(driver, answerer=answerer)
    final = agent.run()

    assert final.status == "completed", final.error
    assert final.step is None
    batches = [s for s in agent.transcript.steps if s[1] == "parallel_tasks"]
    assert len(batches) == 1
    task_ids = sorted({s[0] for s in agent.transcript.steps if s[0] != "main"})
    assert task_ids == ["fix_batch_0", "fix_batch_1", "fix_batch_2"]
    assert agent.transcript.messages == [
        "Fixing 7 files in 3 batches of up to 3.",
        "Standards fix complete: 7 files in 3 batches, 14 fixes applied, 0 batches failed.",
    ]
    state = run.states["main"].flattened()
    assert state["batch_status"] == {"batch_0": "done", "batch_1": "done", "batch_2": "done"}
    assert state["ready_batches"] == []
    assert len(state["file_results"]) == 7


def test_standards_fix_with_no_changes_exits_early(start, tmp_path: Path):
    repo = git_repo(tmp_path / "repo", {})
    run, driver = start("standards:fix", {}, repo)
    agent = ScriptedAgent(driver)
    final = agent.run()
    assert final.status == "completed"
    assert agent.transcript.messages == ["No changed files to fix since HEAD."]
    assert agent.transcript.steps == []


def test_retry_loop_breaks_when_tests_pass(start, tmp_path: Path):
    command = "n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count; [ $n -ge 3 ]"
    run, driver = start("ci:retry-tests", {"command": command, "max_attempts": 5}, tmp_path)
    agent = ScriptedAgent(driver)
    final = agent.run()
    assert final.status == "completed", final.error
    assert agent.transcript.messages == [
        "Attempt 1 failed with exit code 1.",
        "Attempt 2 failed with exit code 1.",
        "Tests passed after 3 attempt(s).",
    ]
    state = run.states["main"].flattened()
    assert state["attempts"] == 3 and state["passed"] is True and state["can_retry"] is False


def test_retry_loop_gives_up_after_max_attempts(start, tmp_path: Path):
    run, driver = start("ci:retry-tests", {"command": "echo nope >&2; exit 4", "max_attempts": 2}, tmp_path)
    agent = ScriptedAgent(driver)
    final = agent.run()
    assert final.status == "failed"  # the outcome CI reads: `aromcp-workflows run` exits 1
    assert final.error == "Tests still failing after 2 attempt(s)."
    assert agent.transcript.messages[-1] == "Tests still failing after 2 attempt(s)."
    assert run.states["main"].flattened()["last_exit_code"] == 4


def test_include_workflow_composition(start, tmp_path: Path):
    repo = git_repo(tmp_path / "repo", {"a.ts": "", "b.js": "", "notes.md": ""})
    run, driver = start("standards:check", {}, repo)

    def answerer(step):
        params = step["definition"]["params"]
        if step["definition"]["method"] == "check_typescript":
            return {"errors": 2 if params["files"] == ["a.ts"] else 0}
        return {"errors": 1 if params["target_files"] == "b.js" else 0}

    agent = ScriptedAgent(driver, answerer=answerer)
    final = agent.run()
    assert final.status == "completed", final.error
    assert agent.transcript.messages == ["3 issues in 2 of 2 files."]
    ids = [s[2] for s in agent.transcript.steps]
    assert ids == ["run_checks.check_typescript.tsc#1", "run_checks.check_typescript.tsc#2",
                   "run_checks.check_lint.lint#1", "run_checks.check_lint.lint#2"]
    checks = run.states["main"].flattened()["checks"]
    assert checks["total_issues"] == 3
    assert checks["inputs"] == {"files": ["a.ts", "b.js"]}
    assert "changed" not in checks  # the child's state is isolated from the parent's


def test_deps_analyze_runs_headless(start, tmp_path: Path):
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "package.json").write_text('{\n  "name": "x",\n  "left-pad": "1.0"\n}\n')
    (tmp_path / "requirements.txt").write_text("requests==2.0\nflask>=3\n")
    run, driver = start("deps:analyze", {}, tmp_path)
    agent = ScriptedAgent(driver)
    final = agent.run()
    assert final.status == "completed", final.error
    state = run.states["main"].flattened()
    assert state["manifests"] == ["requirements.txt", "web/package.json"]
    assert state["by_ecosystem"] == {"pip": ["requirements.txt"], "npm": ["web/package.json"]}
    assert agent.transcript.messages[-1].startswith("Found 2 manifests (pip, npm)")
