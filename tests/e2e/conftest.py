"""End-to-end fixtures (helpers live in e2e_helpers.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import run_cli


@pytest.fixture
def cli(tmp_path: Path):
    """cli(project_dir, *args) -> CompletedProcess of the CLI, isolated in tmp_path."""

    def run(project: Path, *args: str, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return run_cli(tmp_path, project, *args, timeout=timeout, cwd=cwd)

    return run
