"""`aromcp-workflows run` on a terminal: a long server-side step shows one status line,
rewritten in place, that disappears when the next line is printed.

The CLI runs with its standard output on a real pseudo-terminal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import git_repo

SLOW = """\
name: "e2e:slow"
steps:
  - id: build
    type: shell_command
    command: "sleep 1.6; echo built"
  - type: user_message
    message: "build done"
"""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_is_one_status_line_on_a_terminal(tmp_path: Path):
    repo = git_repo(tmp_path / "repo")
    (tmp_path / "slow.yaml").write_text(SLOW)
    env = {**os.environ, "AROMCP_WORKFLOWS_STORE": str(tmp_path / "store.sqlite"), "HOME": str(tmp_path / "home"),
           "AROMCP_PROGRESS_INTERVAL": "0.3"}
    leader, follower = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(repo), "run",
                             str(tmp_path / "slow.yaml")], stdout=follower, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=env)
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    screen = b"".join(chunks).decode()
    updates = screen.count("\r\x1b[J  ... step build: command running for ")
    assert updates >= 2, screen  # the same line, rewritten (cleared to the end of the screen: no tail under it yet)
    assert "\r\x1b[Kbuild done" in screen, screen  # the status line is cleared before the next message
    assert "status: completed" in screen
