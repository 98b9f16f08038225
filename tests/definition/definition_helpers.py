"""Paths and tiny-file helpers for the workflow-language tests (imported by name, so it
has a name no other test folder uses)."""

from __future__ import annotations

import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILTIN_DIR = REPO / "workflows"
EXAMPLES_DIR = REPO / "examples"
MALFORMED_DIR = Path(__file__).resolve().parent / "malformed"


def write(path: Path, text: str) -> Path:
    """Write dedented YAML, creating folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def minimal(name: str, message: str = "hi") -> str:
    """The smallest valid workflow, named `name`."""
    return f'name: "{name}"\nsteps:\n  - type: user_message\n    message: "{message}"\n'
