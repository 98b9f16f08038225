"""Fixtures for the workflow-language tests: isolated resolvers (fake home, empty project)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty project root with its `.aromcp/workflows` folder."""
    root = tmp_path / "project"
    (root / ".aromcp" / "workflows").mkdir(parents=True)
    return root


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A fake home directory, so the developer's real ~/.aromcp never leaks into a test."""
    path = tmp_path / "home"
    (path / ".aromcp" / "workflows").mkdir(parents=True)
    return path


@pytest.fixture
def loader(project: Path, home: Path) -> WorkflowLoader:
    return WorkflowLoader(WorkflowResolver(project_dir=project, home=home))
