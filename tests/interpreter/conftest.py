from __future__ import annotations

import itertools
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aromcp_workflows.app.driver import Driver
from aromcp_workflows.app.results import StepCompleted
from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, load_valid_bundle
from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.interpreter import Answer, WorkflowRun
from aromcp_workflows.interpreter.effects import Event
from aromcp_workflows.shell.runner import ProgressCallback

T = TypeVar("T")

_ids = itertools.count()


class RunDriver:
    """The service's `Driver` over one run held in memory, with no store: each transaction
    takes a lock, applies the change and "performs" the journalled history events by
    keeping them in `events` (what the instance layer would have written)."""

    def __init__(self, run: WorkflowRun):
        self.run = run
        self.events: list[Event] = []
        self._lock = threading.RLock()
        self.driver = Driver(transact=self._transact)

    def _transact(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                  defer: Callable[[T], bool] | None = None) -> T:
        """`defer` does not matter here: nothing is stored, so nothing waits for a commit."""
        assert workflow_id == self.run.workflow_id
        with self._lock:
            value = change(self.run)
            self.events.extend(self.run.take_journal().events)
            return value

    def next_step(self, thread_id: str | None = None, progress: ProgressCallback | None = None) -> Answer:
        return self.driver.next_step(self.run.workflow_id, thread_id, progress)

    def complete(self, thread_id: str | None, step_id: str, status: str = "success", result: Any = None,
                 error: str | None = None, progress: ProgressCallback | None = None) -> StepCompleted:
        """What `workflow_step_complete` would answer (as `WorkflowService.step_complete` shapes it)."""
        done = self.driver.complete(self.run.workflow_id, thread_id, step_id, status, result, error, progress)
        return StepCompleted(success=done.success, status=done.answer.status, messages=done.answer.messages,
                             next_step=done.answer.step, error=done.answer.error)


@pytest.fixture(scope="session")
def engine() -> ExpressionEngine:
    return ExpressionEngine()


@pytest.fixture
def start(engine: ExpressionEngine, tmp_path: Path):
    """start(name_or_yaml, inputs, project_dir) -> (run, driver)."""

    def _start(workflow: str, inputs: dict[str, Any] | None = None, project_dir: Path | None = None):
        project = project_dir or tmp_path
        target = workflow
        if "\n" in workflow:
            path = tmp_path / f"wf_{next(_ids)}.yaml"
            path.write_text(workflow)
            target = str(path)
        loader = WorkflowLoader(WorkflowResolver(project_dir=project))
        bundle = load_valid_bundle(target, loader)
        run = WorkflowRun.start(f"wf_{next(_ids)}", bundle, engine, project, inputs or {})
        return run, RunDriver(run)

    return _start


def git_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"],
                   cwd=path, check=True)
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return path
