"""Ctrl-C during `aromcp-workflows run`: the shell commands stop, the instance is marked
interrupted, the exit status is 130, and `run --resume` finishes it.

Real processes throughout: the CLI as a subprocess, its server as the CLI's subprocess,
bash commands that leave a background grandchild.  Each command writes its own pid, its
parent's pid and its grandchild's pid, so the test can check that none of them survives.
The long step is long only the first time (a marker file), which also shows that a
step stopped mid-run runs again on resume (at least once)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.e2e.e2e_helpers import git_repo, run_cli

T = TypeVar("T")

LONG = ("if [ -f .ran ]; then echo second run; else touch .ran; echo $$ > child.pid; echo $PPID > parent.pid; "
        "sleep 120 & echo $! > grandchild.pid; wait; fi")
WORKFLOW = """\
name: "e2e:stoppable"
steps:
  - id: hello
    type: agent_shell_command
    command: "echo hello"
  - id: long
    type: {kind}
    command: {command}
    state_update: {{path: raw.long}}
  - type: user_message
    message: "long step: {{{{ raw.long }}}}"
  - id: last
    type: agent_shell_command
    command: "echo finished > finished.txt"
"""


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def wait_for(path: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text().strip())
        time.sleep(0.05)
    raise AssertionError(f"{path.name} was never written")


def interrupted_run(tmp_path: Path, repo: Path, workflow: Path,
                    ready: Callable[[], T]) -> tuple[T, subprocess.Popen[str], str, str]:
    """`aromcp-workflows run WORKFLOW` in `repo`, Ctrl-C once `ready()` returns: what it
    returned, the process and its output (killed if it did not end)."""
    env = {**os.environ, "AROMCP_WORKFLOWS_STORE": str(tmp_path / "store.sqlite"), "HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run",
                             str(workflow)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        seen = ready()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return seen, proc, out, err


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("kind", ["shell_command", "agent_shell_command"])
def test_sigint_stops_commands_marks_interrupted_and_resume_finishes(tmp_path: Path, kind: str):
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "stoppable.yaml"
    workflow.write_text(WORKFLOW.format(kind=kind, command=json.dumps(LONG)))
    def started() -> dict[str, int]:
        pids = {name: wait_for(repo / f"{name}.pid") for name in ("child", "parent", "grandchild")}
        assert all(alive(pid) for pid in pids.values())
        return pids

    pids, proc, out, err = interrupted_run(tmp_path, repo, workflow, started)
    assert proc.returncode == 130, out + err
    survivors = {name: pid for name, pid in pids.items() if alive(pid)}
    if kind == "agent_shell_command":
        assert pids["parent"] == proc.pid  # the runner ran it itself
    for pid in survivors.values():  # never leave them behind, even when the test fails
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not survivors, f"still running after Ctrl-C: {survivors}"
    assert "status: interrupted" in out
    match = re.search(r"resume with: (.*)$", out, re.MULTILINE)
    assert match and "run --resume wf_" in match.group(1), out
    workflow_id = re.search(r"--resume (wf_\w+)", match.group(1)).group(1)  # type: ignore[union-attr]

    status = run_cli(tmp_path, repo, "status", workflow_id, "--json")
    data = json.loads(status.stdout)
    assert data["status"] == "interrupted" and "SIGINT" in data["error"] and "long" in data["error"]
    listed = json.loads(run_cli(tmp_path, repo, "status", "--json").stdout)["instances"]
    assert [row["status"] for row in listed] == ["interrupted"]

    resumed = run_cli(tmp_path, repo, "run", "--resume", workflow_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "long step: second run" in resumed.stdout  # the stopped step ran again, then the rest
    assert "status: completed" in resumed.stdout
    assert (repo / "finished.txt").read_text().strip() == "finished"
    assert "hello" not in [line.strip() for line in resumed.stdout.splitlines()]  # done steps are not redone


def test_cancel_ends_an_instance(tmp_path: Path):
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "ask.yaml"
    workflow.write_text('name: "e2e:ask"\nsteps:\n  - id: q\n    type: user_input\n    prompt: "name?"\n')
    from aromcp_workflows.app.service import WorkflowService

    service = WorkflowService(project_dir=repo, store_path=tmp_path / "store.sqlite", home=tmp_path / "home")
    workflow_id = service.start(str(workflow)).workflow_id  # as an agent that went away left it: running
    cancelled = run_cli(tmp_path, repo, "cancel", workflow_id)
    assert cancelled.returncode == 0 and "-> cancelled" in cancelled.stdout, cancelled.stdout + cancelled.stderr
    again = run_cli(tmp_path, repo, "cancel", workflow_id)
    assert again.returncode == 0 and "already cancelled" in again.stdout
    resumed = run_cli(tmp_path, repo, "run", "--resume", workflow_id)
    assert resumed.returncode == 1 and "status: cancelled" in resumed.stdout


LOOP = """\
name: "e2e:loop"
default_state: {raw: {i: 0}}
steps:
  - id: loop
    type: while
    condition: "{{ i < 4 }}"
    max_iterations: 10
    body:
      - id: tick
        type: shell_command
        command: "echo start {{ i }} >> ticks; sleep 1.5; echo end {{ i }} >> ticks"
      - type: state_update
        path: raw.i
        operation: increment
        value: 1
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_sigint_during_a_server_side_loop_stops_it_there(tmp_path: Path):
    """Found by a bad-input probe: after Ctrl-C the server went on while the client's
    transport waited to SIGTERM it. The command running then was recorded as done, and the
    next one started. Now the end of the server's input stops its commands at once: the
    running one is not recorded (it runs again on resume), and no other starts."""
    repo = git_repo(tmp_path / "repo")
    workflow = tmp_path / "loop.yaml"
    workflow.write_text(LOOP)
    ticks = repo / "ticks"

    def at_the_second_command() -> None:
        deadline = time.monotonic() + 60
        while "start 1" not in (ticks.read_text() if ticks.exists() else ""):
            assert time.monotonic() < deadline, "the loop never reached its second command"
            time.sleep(0.05)

    _, proc, out, err = interrupted_run(tmp_path, repo, workflow, at_the_second_command)
    assert proc.returncode == 130, out + err
    time.sleep(2.0)  # longer than one command: one that went on would have ended by now
    assert ticks.read_text().splitlines() == ["start 0", "end 0", "start 1"], ticks.read_text()
    workflow_id = re.search(r"--resume (wf_\w+)", out).group(1)  # type: ignore[union-attr]
    resumed = run_cli(tmp_path, repo, "run", "--resume", workflow_id)
    assert resumed.returncode == 0 and "status: completed" in resumed.stdout, resumed.stdout + resumed.stderr
    lines = ticks.read_text().splitlines()
    assert [line for line in lines if line.startswith("end")] == ["end 0", "end 1", "end 2", "end 3"], lines
    assert lines.count("start 1") == 2  # the stopped one ran again (at least once), every other once
