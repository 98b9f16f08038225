"""Fixtures for the server tests: a tmp project, tmp HOME, tmp store, and the server object
`build_server(WorkflowService(...))` that tests connect to with `mcp.Client` (in memory).

Clients are opened inside each test (`async with Client(server, mode=mode)`), not in
async fixtures: anyio cancel scopes must be entered and left in the same task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from srv_helpers import make_project


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "s.sqlite3"


@pytest.fixture
def server(project: Path, store_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from aromcp_workflows.server.mcp import build_server

    def factory() -> Any:
        from aromcp_workflows.app.service import WorkflowService  # lazily, as the real server does

        return WorkflowService(project_dir=project, store_path=store_path, home=home)

    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(store_path))  # belt and braces: never the user's store
    return build_server(factory)


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes seconds (server subprocesses); still runs by default")
