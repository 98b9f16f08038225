"""Shared helpers of the web view tests: a project with the test workflows, instances
driven in this process through the service (another process than the web view's), and
the real `aromcp-workflows ui` started as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
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
    """A running `aromcp-workflows ui`: its base URL, token, and process."""

    process: subprocess.Popen[str]
    url: str  # as printed (with ?token=... when actions are on)
    base: str = field(init=False)
    token: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.base, _, query = self.url.partition("?")
        self.base = self.base.rstrip("/")
        self.token = query.removeprefix("token=") or None

    @classmethod
    def start(cls, project: Project, *extra: str) -> Site:
        env = {**os.environ, "HOME": str(project.home), "AROMCP_WORKFLOWS_STORE": project.store}
        process = subprocess.Popen([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project.root),
                                    "ui", "--port", "0", "--store", project.store, *extra],
                                   cwd=project.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        if "http://" not in line:
            process.kill()
            raise AssertionError(f"ui did not start: {line!r} {process.stderr.read() if process.stderr else ''}")
        return cls(process, line.rsplit(" ", 1)[-1].strip())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
