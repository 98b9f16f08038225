"""Fixtures for the security tests: a tmp project with extra workflows, a tmp HOME and store,
and `build_server(WorkflowService(...))` for a real in-memory `mcp.Client`.

The attacks of issue 10 are reproduced here through the same surfaces an attacker has: MCP
tool calls, workflow files in the workflow directories, and raw JSON-RPC lines over stdio."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from srv_helpers import make_project


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def make_server(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """make_server(extra={name: yaml}) -> (server, project dir) with those workflows installed."""
    from aromcp_workflows.server.mcp import build_server

    store_path = tmp_path / "s.sqlite3"
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(store_path))

    def build(extra: dict[str, str] | None = None) -> tuple[Any, Path]:
        project = make_project(tmp_path / "project", extra)

        def factory() -> Any:
            from aromcp_workflows.app.service import WorkflowService

            return WorkflowService(project_dir=project, store_path=store_path, home=home)

        return build_server(factory), project

    return build


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    """The MCP client's protocol era: `legacy` (a form is a request sent mid-call) or `auto`
    (2026-07-28: the form comes back in an `InputRequiredResult`)."""
    return str(request.param)
