"""`aromcp-workflows run` shows a running command's output as it comes: on a terminal as a
live tail of its last lines under the status line, redrawn in place (tmux, as a person
sees it); through a pipe as lines indented under the step.  The lines are the latest ones
the server reports in its progress notifications, about one a second."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aromcp_workflows.runner.report import Printer
from tests.e2e.e2e_helpers import git_repo

LOUD = """\
name: "e2e:loud"
steps:
  - id: build
    type: shell_command
    command: "for i in 1 2 3 4 5 6 7 8; do echo \\"building part $i\\"; sleep 0.6; done"
  - type: user_message
    message: "build done"
"""


def env_for(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AROMCP_WORKFLOWS_STORE": str(tmp_path / "store.sqlite"), "HOME": str(tmp_path / "home"),
            "AROMCP_PROGRESS_INTERVAL": "0.3", "AROMCP_COMMANDS_DIR": str(tmp_path / "commands")}


def test_the_printer_keeps_a_tail_of_new_lines() -> None:
    out = io.StringIO()
    printer = Printer(out)
    for n, line in enumerate(["one", "one", "two", "three"]):
        printer.progress("main", n, None, f"step build: command running for {n}.0 s: {line}")
    printer.message("done")
    lines = out.getvalue().splitlines()
    assert [x for x in lines if x.startswith("    | ")] == ["    | one", "    | two", "    | three"]
    assert lines[-1] == "done" and lines[1] == "  ... step build: command running for 0.0 s (main)"


@pytest.mark.slow
def test_run_through_a_pipe_prints_the_output_under_the_step(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    (tmp_path / "loud.yaml").write_text(LOUD)
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run",
                           str(tmp_path / "loud.yaml")], capture_output=True, text=True, env=env_for(tmp_path),
                          timeout=120)
    assert done.returncode == 0, done.stderr
    shown = [line for line in done.stdout.splitlines() if line.startswith("    | building part ")]
    assert len(shown) >= 3 and shown == sorted(set(shown), key=shown.index)  # several, each once, in order
    assert done.stdout.index(shown[0]) < done.stdout.index("build done")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_run_on_a_terminal_shows_a_live_tail_that_goes_away(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    (tmp_path / "loud.yaml").write_text(LOUD)
    socket = str(tmp_path / "tmux.sock")
    command = (f"{sys.executable} -m aromcp_workflows --project-dir {repo} run {tmp_path / 'loud.yaml'}; "
               f"echo EXIT=$?; sleep 30")
    env = env_for(tmp_path)
    subprocess.run(["tmux", "-S", socket, "new-session", "-d", "-x", "140", "-y", "40", command], env=env, check=True)
    try:
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            screen = subprocess.run(["tmux", "-S", socket, "capture-pane", "-p"], capture_output=True,
                                    text=True).stdout
            seen.append(screen)
            if "EXIT=" in screen:
                break
            time.sleep(0.3)
        running = [s for s in seen if "command running for" in s and "    | building part" in s]
        assert running, seen[-1]
        tails = [sum(line.startswith("    | building part ") for line in s.splitlines()) for s in running]
        assert max(tails) <= Printer.TAIL_LINES and max(tails) >= 2  # a tail of the last few lines, not the whole
        assert all(s.count("command running for") == 1 for s in running)  # one status line, redrawn in place
        final = seen[-1]
        assert "EXIT=0" in final and "build done" in final
        assert "    | building part" not in final and "command running for" not in final  # gone when done
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True)
