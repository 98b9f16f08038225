"""Fixtures for the explain tests: a project with workflows written by the test, a
service over a temporary store and HOME, and a way to run the CLI in-process against
that same project and store."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from explain_helpers import Project


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    proj = Project(tmp_path / "project", tmp_path / "home", tmp_path / "s.sqlite3")
    monkeypatch.setenv("HOME", str(proj.home))  # the CLI finds ~/.aromcp through HOME
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(proj.store))  # never the user's store
    return proj


@pytest.fixture
def service(project: Project) -> Any:
    return project.service()


@pytest.fixture
def cli(project: Project, capsys: pytest.CaptureFixture[str]):
    """cli(*args) -> (exit code, stdout, stderr), run in-process in the test project."""
    from aromcp_workflows.cli.entry import main

    def run(*args: str) -> tuple[int, str, str]:
        try:
            code = main(["--project-dir", str(project.root), *args])
        except SystemExit as exc:  # a message as exit code goes to stderr, status 1 (as Python does)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
