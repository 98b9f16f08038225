"""Fixtures for the repair tests: a project holding the workflows below, a real SQLite
store, and the MCP server over them (`server`), which the tests drive with `mcp.Client`
in memory, exactly as a client would: retry and fork, then the repaired instance run to
its end by a scripted agent that speaks only the protocol."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repair.workflows import WORKFLOWS


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    for name, text in WORKFLOWS.items():
        (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
    return tmp_path / "project"


@pytest.fixture
def service_factory(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    from aromcp_workflows.app.service import WorkflowService

    store = tmp_path / "store.sqlite3"
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(store))  # never the user's store
    (tmp_path / "home").mkdir()
    return lambda: WorkflowService(project_dir=project, store_path=store, home=tmp_path / "home")


@pytest.fixture
def service(service_factory: Callable[[], Any]) -> Any:
    return service_factory()


@pytest.fixture
def server(service: Any) -> Any:
    from aromcp_workflows.server.mcp import build_server

    return build_server(lambda: service)
