"""The plugin against the real thing: its launcher over stdio, and the Claude Code CLI.

- `plugin/server/launch.py` makes its venv (cached between runs under ~/.cache, keyed by
  this checkout's path) and starts a server that answers `tools/list` over stdio; an older
  `python3` (3.6 to 3.10, where the machine has one) hands over to a `python3.11` on PATH.
- `claude plugin validate` (Claude Code 2.1.328 from npm, installed once into
  ~/.cache/aromcp-workflows-tests) accepts the plugin with `--profile directory` and the
  marketplace; `claude plugin marketplace add` + `plugin install` with HOME in a temp dir,
  then `claude mcp list` shows the server connected: with the venv ready, and from an empty
  data folder while the install is held up (the launcher answers the handshake meanwhile).

Without node/npm these tests skip, saying so; under CI (`CI=true`) a skip is a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from plugin_helpers import install_held, wait_until_ready

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
LAUNCHER = PLUGIN / "server" / "launch.py"
CLAUDE_VERSION = "2.1.328"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aromcp-workflows-tests"


def unavailable(reason: str) -> None:
    """Skip, except in CI, where a missing tool must not pass silently."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: this test must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def plugin_data() -> Path:
    """The plugin's data folder with its venv made by the launcher (`--prepare`)."""
    key = hashlib.sha256(str(REPO).encode()).hexdigest()[:10]
    data = CACHE / f"plugin-data-{key}"
    proc = subprocess.run([sys.executable, str(LAUNCHER), "--prepare"], capture_output=True, text=True,
                          env={**os.environ, "CLAUDE_PLUGIN_DATA": str(data)}, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ready:" in proc.stderr
    return data


@pytest.fixture(scope="module")
def claude() -> Path:
    """The Claude Code CLI from npm, installed once per machine: one install at a time (two
    suites may run at once, in two checkouts), and used only once its install has finished."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        unavailable("node and npm are needed to install the Claude Code CLI")
    prefix = CACHE / f"claude-code-{CLAUDE_VERSION}"
    binary, installed = prefix / "node_modules" / ".bin" / "claude", prefix / "installed"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"claude-code-{CLAUDE_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not installed.exists() or not binary.exists():
            proc = subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                                   f"@anthropic-ai/claude-code@{CLAUDE_VERSION}"], capture_output=True, text=True,
                                  timeout=900)
            if proc.returncode != 0 or not binary.exists():
                unavailable(f"npm could not install @anthropic-ai/claude-code@{CLAUDE_VERSION}: {proc.stderr[-1500:]}")
            installed.touch()
    return binary


def run_claude(claude: Path, home: Path, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "ANTHROPIC"))}
    env.update(HOME=str(home), DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    return subprocess.run([str(claude), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


async def list_tools_through_launcher(data: Path, cwd: Path) -> tuple[list[str], list[str], str]:
    params = StdioServerParameters(command=sys.executable, args=[str(LAUNCHER)], cwd=str(cwd),
                                   env={**os.environ, "CLAUDE_PLUGIN_DATA": str(data),
                                        "AROMCP_WORKFLOWS_STORE": str(cwd / "store.sqlite")})
    with tempfile.TemporaryFile("w+") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            listed = await client.call_tool("workflow_list", {})
        errlog.seek(0)
        assert isinstance(listed.structured_content, dict), listed.content
        return tools, [w["name"] for w in listed.structured_content["workflows"]], errlog.read()


async def test_launcher_starts_a_server_that_answers_over_stdio(plugin_data: Path, tmp_path: Path) -> None:
    tools, workflows, stderr = await list_tools_through_launcher(plugin_data, tmp_path)
    assert {"workflow_get_next_step", "workflow_step_complete", "workflow_start"} <= set(tools)
    assert "ci:retry-tests" in workflows  # the built-in workflows came along with the source
    assert "installing" not in stderr  # the venv was ready: the start reused it


def load_plugin_module(name: str) -> ModuleType:
    """`plugin/server/<name>.py`, imported the way the launcher imports its siblings."""
    spec = importlib.util.spec_from_file_location(f"aromcp_plugin_{name}", PLUGIN / "server" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_launcher_rebuilds_a_venv_made_for_something_else(tmp_path: Path) -> None:
    """A venv is reused only when it was made for these dependencies, this plugin folder
    (a plugin update lands in a new folder) and this Python minor version, and its
    interpreter is still there."""
    venvs: Any = load_plugin_module("venvs")
    env_dir = tmp_path / "venv"
    python = venvs.venv_python(env_dir)
    python.parent.mkdir(parents=True)
    python.write_text("")
    assert not venvs.is_ready(env_dir)  # no marker
    marker = env_dir / venvs.MARKER
    marker.write_text(json.dumps(venvs.fingerprint()))
    assert venvs.is_ready(env_dir)
    for key, other in (("dependencies", ["mcp>=1"]), ("lock", "0" * 64), ("source", "/elsewhere"), ("python", "3.99")):
        marker.write_text(json.dumps({**venvs.fingerprint(), key: other}))
        assert not venvs.is_ready(env_dir), key
    marker.write_text("{not json")
    assert not venvs.is_ready(env_dir)
    marker.write_text(json.dumps(venvs.fingerprint()))
    python.unlink()
    assert not venvs.is_ready(env_dir)


def test_launcher_refuses_an_old_python_clearly(tmp_path: Path) -> None:
    launch: Any = load_plugin_module("launch")
    launch.sys = type("FakeSys", (), {"version_info": (3, 9, 1), "version": "3.9.1 (fake)",
                                      "executable": "/usr/bin/python3", "stderr": sys.stderr})
    launch.newer_python = lambda: None
    assert launch.main([]) == 1


def old_pythons() -> list[str]:
    """Pythons 3.6 to 3.10 on this machine (on PATH, or pyenv's), to run the launcher with."""
    found = {shutil.which(f"python3.{minor}") for minor in range(6, 11)}
    found.update(str(path) for path in (Path.home() / ".pyenv" / "versions").glob("3.[0-9]*/bin/python3")
                 if path.parent.parent.name.split(".")[1] in {"6", "7", "8", "9", "10"})
    shims = "/shims/"  # pyenv's shims need pyenv on PATH
    return sorted({os.path.realpath(path) for path in found if path and shims not in path})


@pytest.mark.parametrize("python", old_pythons() or [pytest.param("", marks=pytest.mark.skip("no Python < 3.11 here"))])
def test_an_old_python3_says_what_it_needs_or_hands_over(python: str, plugin_data: Path, tmp_path: Path) -> None:
    """RHEL 8's `python3` is 3.6: the launcher must run far enough to look for a newer Python
    on PATH and hand over to it (here it then finds the venv made above), or say what to install."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "CLAUDE_PLUGIN_DATA": str(plugin_data)}
    alone = subprocess.run([python, str(LAUNCHER), "--prepare"], capture_output=True, text=True, env=env, timeout=60)
    assert alone.returncode == 1 and "Traceback" not in alone.stderr, alone.stderr
    assert "needs Python 3.11 or newer" in alone.stderr and "python3.11 on PATH" in alone.stderr
    (bin_dir / "python3.11").symlink_to(sys.executable)
    handed = subprocess.run([python, str(LAUNCHER), "--prepare"], capture_output=True, text=True, env=env, timeout=60)
    assert handed.returncode == 0 and "ready:" in handed.stderr, handed.stderr


def test_claude_validates_the_plugin(claude: Path, tmp_path: Path) -> None:
    proc = run_claude(claude, tmp_path, "plugin", "validate", "--profile", "directory", str(PLUGIN))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Validation passed" in out
    assert "skills: aromcp-workflows:workflow" in out and "agents: aromcp-workflows:workflow-task" in out
    assert "mcpServers: workflows stdio python3" in out


def test_claude_validates_the_marketplace(claude: Path, tmp_path: Path) -> None:
    proc = run_claude(claude, tmp_path, "plugin", "validate", str(REPO))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "marketplace" in out.lower() and "Validation passed" in out


def install_plugin(claude: Path, home: Path, project: Path) -> Path:
    """`/plugin marketplace add` + `/plugin install`, as a user does; the plugin's data folder."""
    added = run_claude(claude, home, "plugin", "marketplace", "add", str(REPO), cwd=project)
    assert added.returncode == 0 and "aromcp" in added.stdout, added.stdout + added.stderr
    installed = run_claude(claude, home, "plugin", "install", "aromcp-workflows@aromcp", cwd=project)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return home / ".claude" / "plugins" / "data" / "aromcp-workflows-aromcp"


def assert_connected(claude: Path, home: Path, project: Path) -> None:
    """`claude mcp list` starts the plugin's server and waits for its handshake (30 s at most)."""
    listed = run_claude(claude, home, "mcp", "list", cwd=project)
    line = next((row for row in listed.stdout.splitlines() if row.startswith("plugin:aromcp-workflows:")), "")
    assert line.startswith("plugin:aromcp-workflows:workflows:"), listed.stdout + listed.stderr
    assert "✔ Connected" in line, listed.stdout + listed.stderr


def test_claude_installs_the_plugin_and_connects(claude: Path, plugin_data: Path, tmp_path: Path) -> None:
    """A real install, then `claude mcp list` starts the server through the launcher (with
    the venv made above) and connects."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    data_root = home / ".claude" / "plugins" / "data"
    data_root.mkdir(parents=True)
    (data_root / "aromcp-workflows-aromcp").symlink_to(plugin_data)  # skip the first-start install
    install_plugin(claude, home, project)
    assert_connected(claude, home, project)


def test_claude_connects_on_the_first_start_while_the_install_runs(claude: Path, tmp_path: Path) -> None:
    """From an empty data folder, with the install held up (as on a slow network), the server
    still connects: the launcher answers the handshake while it installs. Once the install
    is done, the next start connects through the venv."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    data = install_plugin(claude, home, project)
    with install_held(data):
        assert_connected(claude, home, project)
        assert not list(data.glob("venvs/*/aromcp-workflows-plugin.json"))
    wait_until_ready(data)  # the install went on after `mcp list` closed the session
    assert_connected(claude, home, project)


def test_a_missing_cli_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    """Locally a missing node/npm skips these tests; in CI it must not pass unnoticed."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: this test must run"):
        unavailable("node and npm are needed")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="node and npm are needed"):
        unavailable("node and npm are needed")
