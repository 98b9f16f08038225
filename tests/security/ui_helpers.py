"""Helpers for the web view's credential tests: `aromcp-workflows ui` started as a user
starts it (on a terminal, or with its output going to a log), the login file a server
writes, and an instance to look at."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from srv_helpers import PYTHON, free_port, make_project, server_env, stop, wait_for_port

LOGIN_FILE = re.compile(r"(/\S+\.login)\b")


@dataclass
class Ui:
    """A running `ui`: its process, port, and everything it printed so far."""

    proc: subprocess.Popen[bytes]
    port: int
    home: Path
    output: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_instance(tmp_path: Path, project: Path) -> str:
    """An instance in the store the servers of these tests use (another process writes it)."""
    from aromcp_workflows.app.service import WorkflowService

    service = WorkflowService(project_dir=project, store_path=tmp_path / "store.sqlite3", home=tmp_path / "home")
    return service.start("messages").workflow_id


@contextmanager
def running_ui(tmp_path: Path, *more: str, terminal: bool = False, host: str = "127.0.0.1",
               env: dict[str, str] | None = None) -> Iterator[Ui]:
    """`ui` on a free port; its stdout a terminal (a pty) or a pipe, as asked."""
    project, port = make_project(tmp_path / "project"), free_port("127.0.0.1")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    store = tmp_path / "store.sqlite3"
    args = [PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project), "ui", "--store", str(store),
            "--host", host, "--port", str(port), *more]
    reader, writer = pty.openpty() if terminal else os.pipe()
    proc = subprocess.Popen(args, cwd=project, env=server_env(home, store, **(env or {})),
                            stdin=subprocess.DEVNULL, stdout=writer, stderr=subprocess.STDOUT)
    os.close(writer)
    try:
        wait_for_port(port, proc)
        # the line that says how to log in (both forms start so); not "login" alone, which the
        # test's own folder, named in the `store:` line before it, may hold
        yield Ui(proc, port, home, read_available(reader, until="aromcp-workflows web view: "))
    finally:
        stop(proc)
        os.close(reader)


def read_available(fd: int, until: str, timeout: float = 20) -> str:
    """What `fd` carries until a line holding `until` has arrived (or the time is up)."""
    text, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline and not (until in text and text.endswith("\n")):
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            text += chunk.decode(errors="replace").replace("\r\n", "\n")
    return text


def login_file(printed: str) -> Path:
    """The login file a line names (the URL itself is never printed where a log may keep it)."""
    found = LOGIN_FILE.search(printed)
    assert found, f"no login file named in: {printed!r}"
    return Path(found[1])


def log_in(login_url: str) -> httpx2.Cookies:
    """Open the one-time login URL as a browser does: the answer sets the session cookie."""
    answer = httpx2.get(login_url, follow_redirects=False, timeout=30)
    assert answer.status_code == 303, (answer.status_code, answer.text[:300])
    return answer.cookies


def get(url: str, **kwargs: Any) -> httpx2.Response:
    return httpx2.get(url, timeout=30, **kwargs)
