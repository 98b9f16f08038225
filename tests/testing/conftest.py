"""Fixtures for `aromcp-workflows test` and `migrate`: a tmp project, its store, and the CLI
run in this process (as `aromcp-workflows` runs it: `cli.entry.main`), capturing what it
prints.  Test files are written into tmp folders, never into the repository, so the outer
pytest session (whose plugin collects `*.test.yaml`) never sees them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aromcp_workflows.app.service import WorkflowService


@dataclass
class Cli:
    code: int
    out: str
    err: str


@dataclass
class Project:
    """A project folder with `.aromcp/workflows/`, its own store and HOME."""

    root: Path
    store: Path
    home: Path
    capsys: pytest.CaptureFixture[str]

    @property
    def workflows(self) -> Path:
        return self.root / ".aromcp" / "workflows"

    def write(self, name: str, text: str) -> Path:
        path = self.workflows / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def cli(self, *args: str) -> Cli:
        """`aromcp-workflows ARGS` in the project folder, in this process."""
        from aromcp_workflows.cli.entry import main

        self.capsys.readouterr()
        before = Path.cwd()
        os.chdir(self.root)
        try:
            code = main(["--project-dir", str(self.root), *args])
        except SystemExit as exc:
            code = int(exc.code or 0)
        finally:
            os.chdir(before)
        captured = self.capsys.readouterr()
        return Cli(code, captured.out, captured.err)

    def service(self) -> WorkflowService:
        return WorkflowService(project_dir=self.root, store_path=self.store, home=self.home)


@pytest.fixture
def project(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    root = tmp_path / "project"
    (root / ".aromcp" / "workflows").mkdir(parents=True)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(tmp_path / "store.db"))
    yield Project(root, tmp_path / "store.db", home, capsys)


def parent_workflow(after: str = "", inputs: str = "{}") -> str:
    """`demo:parent`: imports shared/child.yaml and runs `demo:child` inline as `run_child`
    (with `inputs`), then the steps in `after`."""
    return ('name: "demo:parent"\nimports: ["shared/child.yaml"]\nsteps:\n  - id: run_child\n'
            f'    type: include_workflow\n    workflow: "demo:child"\n    inputs: {inputs}\n' + after)
