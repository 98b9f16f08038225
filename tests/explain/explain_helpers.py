"""Shared helpers for the explain tests (a uniquely named module: `conftest` itself
cannot be imported from tests when several test folders each have one)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class Project:
    def __init__(self, root: Path, home: Path, store: Path):
        self.root, self.home, self.store = root, home, store
        (root / ".aromcp" / "workflows").mkdir(parents=True, exist_ok=True)
        home.mkdir(parents=True, exist_ok=True)

    def put(self, name: str, text: str) -> Path:
        path = self.root / ".aromcp" / "workflows" / f"{name}.yaml"
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def service(self) -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=self.root, store_path=self.store, home=self.home)
