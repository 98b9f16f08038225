"""Regenerate `plugin/server/pylock.txt`, the exact packages the Claude Code plugin installs.

The plugin's launcher (`plugin/server/venvs.py`) runs `pip install --require-hashes
--only-binary :all: -r pylock.txt`: every package pinned with `==` and the sha256 of each of
its wheels, no source build.  This script makes that file from `[project] dependencies`
of pyproject.toml with `uv pip compile --universal --generate-hashes` (uv, a dev
dependency: pip-tools resolves for the machine it runs on only, and the plugin runs on
Linux, macOS and Windows, Python 3.11 and newer, where the dependencies differ by markers:
`pywin32` on Windows).  The file records a digest of the dependencies it was made from;
`tests/security/test_plugin_lock.py` fails when pyproject.toml has moved on.

Run: `make plugin-lock` (needs PyPI).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "plugin" / "server" / "pylock.txt"
MIN_PYTHON = "3.11"


def dependencies_digest() -> str:
    """What the lock is checked against: the dependency lines of pyproject.toml, sorted."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return hashlib.sha256("\n".join(sorted(project["dependencies"])).encode()).hexdigest()


def main() -> int:
    uv = Path(sys.executable).with_name("uv")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "pylock.txt"
        done = subprocess.run([str(uv), "pip", "compile", str(REPO / "pyproject.toml"), "--universal",
                               "--generate-hashes", "--python-version", MIN_PYTHON, "--only-binary", ":all:",
                               "--no-header", "--quiet", "-o", str(out)], check=False)
        if done.returncode != 0:
            print(f"error: uv pip compile exited {done.returncode} (is {uv} installed? make setup)", file=sys.stderr)
            return 1
        body = out.read_text(encoding="utf-8")
    header = ("# The exact packages the Claude Code plugin installs (plugin/server/venvs.py):\n"
              "#   pip install --require-hashes --only-binary :all: -r pylock.txt\n"
              f"# Made by `make plugin-lock` from pyproject.toml's dependencies, for every platform and Python "
              f"{MIN_PYTHON}+.\n"
              f"# pyproject-dependencies-sha256: {dependencies_digest()}\n")
    LOCK.write_text(header + body, encoding="utf-8")
    print(f"wrote {LOCK.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
