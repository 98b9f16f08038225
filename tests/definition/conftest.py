"""Shared helpers for the workflow-language tests: isolated resolvers and tiny files."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver

REPO = Path(__file__).resolve().parents[2]
BUILTIN_DIR = REPO / "workflows"
EXAMPLES_DIR = REPO / "examples"
MALFORMED_DIR = Path(__file__).resolve().parent / "malformed"


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


def write(path: Path, text: str) -> Path:
    """Write dedented YAML, creating folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def minimal(name: str, message: str = "hi") -> str:
    """The smallest valid workflow, named `name`."""
    return f'name: "{name}"\nsteps:\n  - type: user_message\n    message: "{message}"\n'
