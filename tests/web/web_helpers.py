"""Shared helpers of the web view tests: a project with the test workflows, instances
driven in this process through the service (another process than the web view's), and
the real `aromcp-workflows ui` started as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SECRET = "tok-Zq8ViewSecret-77"  # watch-fan's api_token default, copied into raw.note


@dataclass
class Project:
    root: Path
    home: Path
    store: str  # a SQLite path or a postgresql:// URL

    @classmethod
    def make(cls, tmp: Path, store: str | None = None) -> Project:
        root, home = tmp / "project", tmp / "home"
        (root / ".aromcp" / "workflows").mkdir(parents=True)
        home.mkdir()
        for path in (HERE / "workflows").glob("*.yaml"):
            shutil.copy(path, root / ".aromcp" / "workflows" / path.name)
        return cls(root, home, store or str(tmp / "store.sqlite3"))

    def service(self) -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=self.root, store_path=self.store, home=self.home)


def fan_out_midway(service: Any) -> tuple[str, list[str]]:
    """A watch-fan instance in the middle of its fan-out: task 0 done, task 1 at its first
    step, task 2 not started."""
    wid = service.start("watch-fan").workflow_id
    tasks = [t["task_id"] for t in service.next_step(wid).step["definition"]["tasks"]]
    step = service.next_step(wid, tasks[0]).step
    service.step_complete(wid, step["id"], result="fixed", task_id=tasks[0])
    service.next_step(wid, tasks[1])
    return wid, tasks


def finish_task(service: Any, wid: str, task_id: str) -> None:
    step = service.next_step(wid, task_id).step
    service.step_complete(wid, step["id"], result="fixed", task_id=task_id)


@dataclass
class Site:
    """A running `aromcp-workflows ui`: its base URL, the file that holds its current login
    URL (its output is a pipe, not a terminal, so it names the file), and its process."""

    process: subprocess.Popen[str]
    base: str
    login_file: Path

    @classmethod
    def start(cls, project: Project, *extra: str) -> Site:
        env = {**os.environ, "HOME": str(project.home), "AROMCP_WORKFLOWS_STORE": project.store,
               "XDG_DATA_HOME": str(project.home / ".local" / "share")}
        process = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project.root),
                                    "ui", "--port", "0", "--store", project.store, *extra],
                                   cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        assert process.stdout is not None
        lines = [process.stdout.readline(), process.stdout.readline()]
        if lines[1].startswith("store: "):  # a store named (not the default) is said after the URL
            lines.append(process.stdout.readline())
        if "http://" not in lines[0] or "login URL is in" not in lines[-1]:
            process.kill()
            raise AssertionError(f"ui did not start: {lines!r} {process.stderr.read() if process.stderr else ''}")
        base = lines[0].rsplit(" ", 1)[-1].strip().rstrip("/")
        return cls(process, base, Path(lines[-1].split(" is in ", 1)[1].split(" (", 1)[0]))

    def login_url(self) -> str:
        """The current one-time login URL (each use writes the next one)."""
        return self.login_file.read_text().strip()

    def session_headers(self) -> dict[str, str]:
        """Log in as a browser does (open the login URL, keep its cookie): the header to send."""
        import httpx2

        answer = httpx2.get(self.login_url(), follow_redirects=False, timeout=30)
        assert answer.status_code == 303, answer.text
        return {"Cookie": "; ".join(f"{name}={value}" for name, value in answer.cookies.items())}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
