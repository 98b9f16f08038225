"""Helpers for the security tests that need the real CLI server on stdio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from srv_helpers import make_project


async def start_stdio(tmp_path: Path, extra: dict[str, str] | None = None, **env: str) -> Any:
    """The real CLI server (`python -m aromcp_workflows serve`) on stdio, as a RawServer."""
    from rawstdio import RawServer
    from srv_helpers import serve_args, server_env

    project = make_project(tmp_path / "project", extra)
    home, store = tmp_path / "home-stdio", tmp_path / "stdio.sqlite3"
    home.mkdir(exist_ok=True)
    server = RawServer(serve_args(project, store), server_env(home, store, **env), project,
                       tmp_path / "server.stderr")
    return await server.start()
