"""End-to-end helpers: temporary git projects, an isolated store, the CLI as a subprocess.

Everything here is real: the server runs as a subprocess over MCP stdio, shell commands
run in bash, the store is SQLite in tmp_path, transforms run in V8.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SEVEN_FILES = {
    "src/a.ts": "a", "src/b.ts": "b", "src/c.ts": "c", "src/d.js": "d",
    "lib/e.py": "e", "lib/f.py": "f", "README.md": "g",
    "node_modules/x/index.js": "ignored", "dist/app.min.js": "ignored", "types/t.d.ts": "ignored",
}
FIX_SUMMARY = "Standards fix complete: 7 files in 3 batches, 14 fixes applied, 0 batches failed."


def git_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository with one empty commit and `files` left as untracked changes."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty",
                    "-m", "init"], cwd=path, check=True)
    for name, text in (files or {}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return path


def run_cli(base: Path, project: Path, *args: str, timeout: float = 60,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m aromcp_workflows --project-dir PROJECT ARGS` with its store and HOME under `base`."""
    env = {**os.environ, "AROMCP_WORKFLOWS_STORE": str(base / "store.sqlite"), "HOME": str(base / "home")}
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), *args],
                          capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL,
                          cwd=cwd)
