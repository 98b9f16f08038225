from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import pytest

from aromcp_workflows.app.driver import Driver, new_lock
from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, load_valid_bundle
from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.interpreter import WorkflowRun

_ids = itertools.count()


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
        return run, Driver(run, new_lock())

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
