#!/usr/bin/env python3
"""Start the aromcp-workflows MCP server for the Claude Code plugin (stdio).

Claude Code runs ``python3 ${CLAUDE_PLUGIN_ROOT}/server/launch.py``. The first start makes a
virtual environment under ``${CLAUDE_PLUGIN_DATA}/venv`` with the package's dependencies
(read from ``pyproject.toml`` next to this file) and points it at the package source
in this folder (a ``.pth`` file, nothing is built); every later start finds it ready and
only replaces itself with ``venv/bin/python -m aromcp_workflows serve``.

Why a venv and not ``uvx``: the plugin must start on a machine that has Python 3.11+
and pip but no uv. The venv is rebuilt when the dependency list or the plugin's location
changes (a plugin update lands in a new folder), or its interpreter is gone.

stdout is the MCP channel: everything this script prints goes to stderr.
Options: ``--prepare`` installs and exits (run it once by hand to avoid a slow first
start); any other argument is passed to ``serve`` (``--store PATH``, ``--http``).
Written for any Python 3, so that an old ``python3`` can look for a newer one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

MIN_PYTHON = (3, 11)
CANDIDATES = ("python3.14", "python3.13", "python3.12", "python3.11")
SOURCE = Path(__file__).resolve().parent  # the package source (links into the repository)
MARKER = "aromcp-workflows-plugin.json"


def say(text: str) -> None:
    print(f"aromcp-workflows plugin: {text}", file=sys.stderr, flush=True)


def data_dir() -> Path:
    """Where the venv lives: the plugin's data folder (kept across plugin updates)."""
    configured = os.environ.get("CLAUDE_PLUGIN_DATA")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "aromcp-workflows-plugin"


def newer_python() -> str | None:
    """A Python >= 3.11 on PATH, for when `python3` itself is older."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def dependencies() -> list[str]:
    import tomllib  # 3.11+, which main() has made sure of

    with open(SOURCE / "pyproject.toml", "rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def fingerprint() -> dict[str, object]:
    """What the venv was made for; any difference means it is made again. (Which `python3`
    made it does not matter: the venv keeps its own interpreter, checked by `is_ready`.)"""
    return {"dependencies": dependencies(), "source": str(SOURCE)}


def venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / ("python.exe" if os.name == "nt" else "python")


def is_ready(env_dir: Path) -> bool:
    try:
        recorded = json.loads((env_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == fingerprint() and venv_python(env_dir).exists()  # a removed base Python breaks the link


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, stdout=subprocess.PIPE, text=True)
    return Path(out.stdout.strip())


def build(env_dir: Path) -> None:
    """Make the venv from scratch in a side folder, then move it into place, so an
    interrupted install never leaves a venv that looks ready."""
    staging = env_dir.with_name(env_dir.name + ".new")
    shutil.rmtree(staging, ignore_errors=True)
    say(f"first start: installing dependencies into {env_dir} (needs PyPI; about a minute)")
    python = venv_python(staging)
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(staging)
        pip = [str(python), "-m", "pip"]
    except subprocess.CalledProcessError:  # Debian without python3-venv: no ensurepip
        venv.EnvBuilder(with_pip=False, clear=True).create(staging)
        pip = [sys.executable, "-m", "pip", "--python", str(python)]  # this Python's pip, into the venv
    command = [*pip, "install", "--quiet", "--disable-pip-version-check", *dependencies()]
    result = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise SystemExit(f"aromcp-workflows plugin: pip could not install the dependencies (exit "
                         f"{result.returncode}); check the network or a proxy (PIP_INDEX_URL), then restart "
                         "the server with /mcp.")
    (site_packages(python) / "aromcp_workflows_plugin.pth").write_text(str(SOURCE) + "\n", encoding="utf-8")
    (staging / MARKER).write_text(json.dumps(fingerprint()), encoding="utf-8")
    shutil.rmtree(env_dir, ignore_errors=True)
    os.replace(staging, env_dir)
    say("dependencies installed")


def prepare(env_dir: Path) -> None:
    """Build the venv unless it is ready; one launcher at a time (two sessions may start
    the server together)."""
    if is_ready(env_dir):
        return
    env_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(env_dir.parent / "install.lock", "w") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # Windows: no lock, the staging folder still keeps the venv whole
            pass
        if not is_ready(env_dir):
            build(env_dir)


def main(argv: list[str]) -> int:
    if sys.version_info < MIN_PYTHON:
        other = newer_python()
        if other is None:
            say(f"needs Python 3.11 or newer; {sys.executable} is {sys.version.split()[0]}. Install "
                "Python 3.11+ (python3.11 on PATH is enough) and restart the server with /mcp.")
            return 1
        os.execv(other, [other, __file__, *argv])
    env_dir = data_dir() / "venv"
    prepare(env_dir)
    if argv[:1] == ["--prepare"]:
        say(f"ready: {venv_python(env_dir)}")
        return 0
    if os.environ.get("CLAUDE_PROJECT_DIR") and not os.environ.get("AROMCP_PROJECT_DIR"):
        os.environ["AROMCP_PROJECT_DIR"] = os.environ["CLAUDE_PROJECT_DIR"]
    python = str(venv_python(env_dir))
    os.execv(python, [python, "-m", "aromcp_workflows", "serve", *argv])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
