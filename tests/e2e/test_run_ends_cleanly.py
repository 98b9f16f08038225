"""`aromcp-workflows run` whose output goes away stops as on Ctrl-C: a pipe whose reader
left (`| head`), a hang-up (SIGHUP), a terminal closed under it (tmux).  It exits non-zero
and the instance is `interrupted` with the reason, never left `running` — with and
without a fan-out (parallel_foreach).

Real processes throughout: the CLI as a subprocess with its stdout a real pipe, a real
`| head -1` through bash, a real pseudo-terminal that tmux closes; the store is read
afterwards with `aromcp-workflows status --json`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import ROOT, git_repo, run_cli

pytestmark = pytest.mark.slow  # the CLI, its server and their commands as processes

PLAIN = """\
name: "e2e:chatty"
steps:
  - id: many
    type: foreach
    items: "{{ Array.from({length: 40}, (_, i) => i) }}"
    steps:
      - {id: tick, type: agent_shell_command, command: "sleep 0.05; echo tick {{ item }}"}
"""
FAN_OUT = """\
name: "e2e:fan"
steps:
  - {id: hello, type: user_message, message: "fanning out"}
  - id: fan
    type: parallel_foreach
    items: "{{ Array.from({length: 6}, (_, i) => i) }}"
    max_parallel: 3
    sub_agent_task: work
sub_agent_tasks:
  work:
    steps:
      - id: steps
        type: foreach
        items: "{{ [1, 2, 3, 4, 5, 6] }}"
        steps:
          - {id: tick, type: agent_shell_command, command: "sleep 0.1; echo tick"}
"""
WORKFLOWS = {"plain": ("e2e:chatty", PLAIN), "fan-out": ("e2e:fan", FAN_OUT)}


def project(tmp_path: Path, kind: str) -> tuple[Path, str]:
    repo = git_repo(tmp_path / "repo")
    name, text = WORKFLOWS[kind]
    folder = repo / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / f"{name}.yaml").write_text(text)
    return repo, name


def cli_env(tmp_path: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith(("AROMCP_", "OTEL_"))},
            "AROMCP_WORKFLOWS_STORE": str(tmp_path / "store.sqlite"), "HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(ROOT)}


def the_instance(tmp_path: Path, repo: Path) -> dict[str, object]:
    """The one instance the run left in the store, as `status --json` shows it."""
    listed = json.loads(run_cli(tmp_path, repo, "status", "--json").stdout)["instances"]
    assert len(listed) == 1, listed
    shown = run_cli(tmp_path, repo, "status", str(listed[0]["workflow_id"]), "--json")
    return dict(json.loads(shown.stdout))


@pytest.mark.parametrize("kind", ["plain", "fan-out"])
def test_a_pipe_closed_by_its_reader_stops_the_run_and_marks_it_interrupted(tmp_path: Path, kind: str):
    repo, name = project(tmp_path, kind)
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run", name],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=cli_env(tmp_path), cwd=repo)
    assert proc.stdout is not None and proc.stderr is not None
    first = [proc.stdout.readline() for _ in range(3)]  # the reader takes three lines and goes
    proc.stdout.close()
    try:
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all(first), first
    assert code == 141, err  # 128 + SIGPIPE, as a shell reports a writer stopped by a closed pipe
    assert "status: interrupted" in err and "its output was closed" in err and "run --resume wf_" in err, err
    instance = the_instance(tmp_path, repo)
    assert instance["status"] == "interrupted", instance
    assert "interrupted by SIGPIPE" in str(instance["error"]) and "output was closed" in str(instance["error"])


@pytest.mark.parametrize("kind", ["plain", "fan-out"])
def test_run_piped_into_head_through_bash_exits_non_zero_and_leaves_nothing_running(tmp_path: Path, kind: str):
    repo, name = project(tmp_path, kind)
    script = (f"{sys.executable} -m aromcp_workflows --project-dir {repo} run {name} 2>run.err | head -1; "
              "echo \"codes ${PIPESTATUS[*]}\"")
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=cli_env(tmp_path), cwd=tmp_path,
                          timeout=180, stdin=subprocess.DEVNULL)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("run "), done.stdout  # the one line head printed
    assert lines[-1] == "codes 141 0", done.stdout + (tmp_path / "run.err").read_text()
    assert the_instance(tmp_path, repo)["status"] == "interrupted"


@pytest.mark.parametrize("kind", ["plain", "fan-out"])
def test_sighup_stops_the_run_and_marks_it_interrupted(tmp_path: Path, kind: str):
    repo, name = project(tmp_path, kind)
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run", name],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                            env=cli_env(tmp_path), cwd=repo)
    assert proc.stdout is not None
    try:
        for _ in range(3):
            assert proc.stdout.readline()
        proc.send_signal(signal.SIGHUP)
        out = proc.stdout.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 129, out  # 128 + SIGHUP
    assert "status: interrupted" in out and "the terminal went away" in out, out
    instance = the_instance(tmp_path, repo)
    assert instance["status"] == "interrupted" and "interrupted by SIGHUP" in str(instance["error"]), instance


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_a_terminal_closed_under_a_fan_out_run_leaves_it_interrupted(tmp_path: Path):
    """The run writes to a real pseudo-terminal; tmux closes it (the kernel hangs up the
    run's process group and every later write fails): the instance ends `interrupted`."""
    repo, name = project(tmp_path, "fan-out")
    env = cli_env(tmp_path)
    command = " ".join([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run", name])
    status = _terminal_closed_at(tmp_path, repo, env, command, "starting 3 sub-agent")
    assert status == "interrupted", the_instance(tmp_path, repo)
    assert "interrupted by SIGHUP" in str(the_instance(tmp_path, repo)["error"])


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux for a real terminal")
def test_a_terminal_closed_while_the_run_asks_a_question_leaves_it_interrupted(tmp_path: Path):
    """On a terminal the runner asks `user_input` itself; closing the terminal ends stdin and
    hangs up the run at once: the hang-up wins, and the instance is interrupted (it can go
    on), not cancelled as a run that merely lost its stdin would be."""
    repo = git_repo(tmp_path / "repo")
    (repo / ".aromcp" / "workflows").mkdir(parents=True)
    (repo / ".aromcp" / "workflows" / "e2e:ask.yaml").write_text(
        'name: "e2e:ask"\nsteps:\n  - {id: q, type: user_input, prompt: "Deploy now?"}\n')
    command = f"{sys.executable} -m aromcp_workflows --project-dir {repo} run e2e:ask"
    status = _terminal_closed_at(tmp_path, repo, cli_env(tmp_path), command, "answer >")
    assert status == "interrupted", the_instance(tmp_path, repo)


def _terminal_closed_at(tmp_path: Path, repo: Path, env: dict[str, str], command: str, shown: str) -> str:
    """Run `command` in a tmux terminal, close the terminal once it shows `shown`; the
    instance's status once it is no longer running (or 90 s)."""
    socket = f"aromcp-{os.getpid()}-{time.monotonic_ns()}"
    exports = " ".join(f"{key}={value}" for key, value in env.items() if key in ("AROMCP_WORKFLOWS_STORE", "HOME",
                                                                                 "PYTHONPATH"))
    subprocess.run(["tmux", "-L", socket, "new-session", "-d", "-s", "run", "-x", "200", "-y", "50",
                    f"env {exports} {command}"], check=True, env=env, cwd=repo, timeout=30)
    try:
        deadline = time.monotonic() + 60
        while shown not in _screen(socket):
            assert time.monotonic() < deadline, _screen(socket)
            time.sleep(0.2)
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], check=False, timeout=30)
    deadline = time.monotonic() + 90
    while (status := _status(tmp_path, repo)) == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
    return status


def _screen(socket: str) -> str:
    shown = subprocess.run(["tmux", "-L", socket, "capture-pane", "-p", "-t", "run"], capture_output=True, text=True,
                           timeout=30, check=False)
    return shown.stdout


def _status(tmp_path: Path, repo: Path) -> str:
    listed = json.loads(run_cli(tmp_path, repo, "status", "--json").stdout)["instances"]
    return str(listed[0]["status"]) if listed else "none"
