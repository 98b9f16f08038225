"""`aromcp-workflows run` as a user runs it: a subprocess, exit codes, printed output."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import FIX_SUMMARY, ROOT, git_repo, run_cli


def test_make_run_example_runs_standards_fix(tmp_path: Path, cli):
    """What `make run` does: the demo project, then the shipped answers file by relative path."""
    demo = tmp_path / "demo"
    subprocess.run([sys.executable, "examples/demo_project.py", str(demo)], cwd=ROOT, check=True,
                   capture_output=True)
    proc = cli(demo, "run", "standards:fix", "--answers", "examples/answers/standards-fix.yaml", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Fixing 7 files in 3 batches of up to 3." in proc.stdout
    assert FIX_SUMMARY in proc.stdout
    assert re.search(r"  fix_batch_2\.fix_files\.get_hints#\d+  mcp_call  hints_for_file\(", proc.stdout)
    assert "status: completed" in proc.stdout
    assert "tool calls: 27 to run the workflow for 22 agent step(s) and 3 sub-agent task(s) " \
           "(budget N+T+2 = 27)" in proc.stdout


def test_deps_analyze_runs_without_answers(tmp_path: Path, cli):
    repo = git_repo(tmp_path / "repo", {
        "package.json": '{\n  "dependencies": {\n    "left-pad": "1.0.0",\n    "react": "18.0.0"\n  }\n}\n',
        "api/requirements.txt": "requests==2.31\nflask>=3\n",
        "node_modules/x/package.json": "{}",
    })
    proc = cli(repo, "run", "deps:analyze")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Found 2 manifests (pip, npm) declaring about" in proc.stdout or \
           "Found 2 manifests (npm, pip) declaring about" in proc.stdout
    assert "tool calls: 2 to run the workflow for 0 agent step(s)" in proc.stdout
    assert "  manifests = " in proc.stdout  # the final state summary


@pytest.fixture(scope="module")
def retry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """ci:retry-tests with a command that fails twice (exit 1), then passes (a counter file)."""
    base = tmp_path_factory.mktemp("retry")
    repo = git_repo(base / "repo")
    (repo / "flaky.sh").write_text(textwrap.dedent("""\
        n=$(cat .count 2>/dev/null || echo 0); n=$((n+1)); echo $n > .count
        [ "$n" -ge 3 ] || { echo "run $n failed" >&2; exit 1; }
        echo "run $n passed"
    """))
    proc = run_cli(base, repo, "run", "ci:retry-tests", "--input", "command=bash flaky.sh",
                   "--input", "max_attempts=5", "--quiet")
    return proc, repo


def test_retry_tests_passes_on_the_third_attempt(retry_run):
    proc, repo = retry_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[:3] == [
        "Attempt 1 failed with exit code 1.", "Attempt 2 failed with exit code 1.",
        "Tests passed after 3 attempt(s)."]
    assert "status: completed" in proc.stdout
    assert (repo / ".count").read_text().strip() == "3"


def test_standards_check_includes_shared_workflow(tmp_path: Path, cli):
    repo = git_repo(tmp_path / "repo", {"src/a.ts": "a", "src/b.js": "b", "notes.md": "n"})
    answers = tmp_path / "answers.yaml"
    answers.write_text(textwrap.dedent("""\
        check_typescript:
          - when_params: {files: ["src/a.ts"]}
            result: {errors: 2}
          - result: {errors: 0}
        lint_project: {errors: 0}
    """))
    proc = cli(repo, "run", "standards:check", "--answers", str(answers), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcome = json.loads(proc.stdout)
    assert outcome["status"] == "completed"
    assert outcome["messages"] == ["2 issues in 1 of 2 files."]
    assert outcome["final_state"]["checks"]["files_with_errors"] == ["src_a_ts"]  # path_to_key keys
    assert outcome["loop_calls"] <= outcome["budget"]
    assert "  run_checks." in proc.stderr  # with --json the transcript goes to stderr


USER_INPUT = """\
name: "e2e:ask"
default_state:
  raw: {branch: ""}
steps:
  - id: ask_branch
    type: user_input
    prompt: "Which branch?"
    validation:
      pattern: "^[a-z0-9/-]+$"
      error_message: "Use lowercase letters, digits, '-' and '/' only"
    max_attempts: 3
    state_update: {path: raw.branch}
  - type: user_message
    message: "Releasing {{ branch }}."
"""


def test_user_input_invalid_then_valid_answer(tmp_path: Path, cli):
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "e2e:ask.yaml"
    workflow.write_text(USER_INPUT)
    answers = tmp_path / "answers.yaml"
    answers.write_text('ask_branch: ["Release 1!", "release/1"]\n')
    proc = cli(repo, "run", str(workflow), "--answers", str(answers))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    rejected = [line for line in lines if "not accepted" in line]
    assert len(rejected) == 1 and "Use lowercase letters" in rejected[0]
    assert "Releasing release/1." in lines
    assert "  branch = release/1" in lines


FAILING = """\
name: "e2e:failing"
steps:
  - id: greet
    type: agent_shell_command
    command: "echo hello from the agent"
    state_update: {path: raw.greeting}
  - id: check_disk
    type: agent_shell_command
    command: "echo 'disk full' >&2; exit 7"
    on_error: continue
  - id: build
    type: shell_command
    command: "sleep 1.3; echo 'cannot find module left-pad' >&2; exit 3"
  - type: user_message
    message: "never shown"
"""


def test_failing_workflow_exits_1_naming_step_and_cause(tmp_path: Path, cli):
    """Agent shell commands run locally (a failing one is reported with its exit code and
    stderr); a failing server-side command fails the workflow: exit 1, the error names the
    step and the cause.  The build runs over 1 s, so the server sends a progress notification."""
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "e2e:failing.yaml"
    workflow.write_text(FAILING)
    proc = cli(repo, "run", str(workflow))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "  greet  agent_shell_command  $ echo hello from the agent -> hello from the agent" in out
    assert "  check_disk  agent_shell_command  $ echo 'disk full' >&2; exit 7 -> FAILED: exit code 7: disk full" in out
    assert re.search(r"^  \.\.\. step build: command running for [\d.]+ s \(main\)$", out, re.MULTILINE)
    assert "status: failed" in out
    error = next(line for line in out.splitlines() if line.startswith("error: "))
    assert "build" in error and "3" in error and "cannot find module left-pad" in error
    assert "never shown" not in out
    assert "  greeting = hello from the agent" in out


def test_usage_errors_exit_2(tmp_path: Path, cli):
    repo = git_repo(tmp_path / "repo")
    bad_input = cli(repo, "run", "deps:analyze", "--input", "review")
    assert bad_input.returncode == 2 and "is not KEY=VALUE" in bad_input.stderr
    missing = cli(repo, "run", "deps:analyze", "--answers", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read answers file" in missing.stderr
    wrong_type = cli(repo, "run", "ci:retry-tests", "--input", "max_attempts=many", "--quiet")
    assert wrong_type.returncode == 2, wrong_type.stdout + wrong_type.stderr
    assert "status: not_started" in wrong_type.stdout and "max_attempts" in wrong_type.stdout


def test_no_answer_without_a_terminal_fails_clearly(tmp_path: Path, cli):
    """No answer and no TTY: the run stops (exit 1) naming the step and the key to add; the
    instance is cancelled rather than left running."""
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "e2e:ask.yaml"
    workflow.write_text(USER_INPUT)
    proc = cli(repo, "run", str(workflow), "--quiet")
    assert proc.returncode == 1
    assert "status: aborted" in proc.stdout
    assert "no answer for step ask_branch (Which branch?) of the main thread: add `ask_branch:`" in proc.stdout
    status = cli(repo, "status", "--json")
    assert [i["status"] for i in json.loads(status.stdout)["instances"]] == ["cancelled"]


def test_terminal_asks_when_no_answer_is_scripted(tmp_path: Path):
    """On a TTY the runner asks the person at the keyboard; a rejected answer is asked again."""
    import os
    import pty
    import select
    import time

    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "e2e:ask.yaml"
    workflow.write_text(USER_INPUT)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI with a terminal on stdin/stdout
        os.environ.update(AROMCP_WORKFLOWS_STORE=str(tmp_path / "store.sqlite"), HOME=str(tmp_path / "home"))
        os.execv(sys.executable, [sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run",
                                  str(workflow)])
    typed, output, deadline = [b"Release 1!\n", b"release/1\n"], b"", time.monotonic() + 60
    asked = 0
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 0.5)[0]:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
        if output.count(b"answer >") > asked and asked < len(typed):
            os.write(fd, typed[asked])
            asked += 1
    _, status = os.waitpid(pid, 0)
    text = output.decode(errors="replace").replace("\r\n", "\n")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert text.count("ask_branch: Which branch?") == 2
    assert "not accepted: Use lowercase letters" in text
    assert "Releasing release/1." in text


def test_server_dying_mid_run_aborts_with_exit_1(tmp_path: Path, cli):
    """A server that goes away (here a step kills it) ends the run with a clear error."""
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "e2e:crash.yaml"
    workflow.write_text(textwrap.dedent("""\
        name: "e2e:crash"
        steps:
          - type: user_message
            message: "about to crash"
          - id: ask
            type: user_input
            prompt: "go?"
          - id: boom
            type: shell_command
            command: "kill -9 $(ps -o ppid= -p $$)"
    """))
    answers = tmp_path / "answers.yaml"
    answers.write_text("ask: yes\n")
    proc = cli(repo, "run", str(workflow), "--answers", str(answers), timeout=30)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "about to crash" in proc.stdout
    assert "status: aborted" in proc.stdout
    assert "error: lost the connection to the server" in proc.stdout
