"""Helpers for the importer tests: translate, validate, and run with the headless runner.

Everything is real: the translated file is validated by the project's own validator and
run by `run_workflow`, which starts the MCP server as a subprocess and performs every
step (shell commands in bash, transforms in V8, state in SQLite under tmp_path).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check
from aromcp_workflows.importer import FileResult, translate_text
from aromcp_workflows.runner.report import RunOutcome
from aromcp_workflows.runner.run import run_workflow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "aromcp"
ORIGINALS = FIXTURES / "original"
CORPUS = FIXTURES / "corpus"


def translate(path: Path) -> FileResult:
    return translate_text(path.read_text(encoding="utf-8"), str(path))


def validation_errors(path: Path) -> list[str]:
    report = check(str(path), WorkflowLoader(WorkflowResolver(project_dir=str(path.parent))))
    return [str(p) for p in report.errors]


def import_and_run(original: Path, tmp_path: Path, *, inputs: dict[str, Any] | None = None,
                   answers: dict[str, Any] | None = None, project: Path | None = None,
                   env: dict[str, str] | None = None) -> RunOutcome:
    """Translate `original`, write it, check it validates, and run it to its end."""
    result = translate(original)
    assert result.ok, result.lines()
    assert result.text is not None
    target = tmp_path / "imported" / original.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(result.text, encoding="utf-8")
    assert validation_errors(target) == []
    project = project or tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    return asyncio.run(run_workflow(str(target), inputs or {}, answers or {}, project,
                                    tmp_path / "store.sqlite", None, env=env))


def git_project(path: Path, files: dict[str, str]) -> Path:
    """A git repository on branch `main` with one empty commit; `files` left untracked."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "-c", "init.defaultBranch=main", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty",
                    "-m", "init"], cwd=path, check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path
