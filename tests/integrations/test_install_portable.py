"""`install claude` writes into `.mcp.json` — a file usually committed — a command that works
on another checkout: tried by copying the project elsewhere, giving the copy its own venv
(as `make setup` would) and starting the server the way Claude Code does, from the copy's
root: over MCP stdio, and with the real Claude Code CLI (`claude mcp list`) when it is
cached (tests/integrations/test_plugin_claude_cli.py installs it)."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from aromcp_workflows.integrations import claude
from aromcp_workflows.integrations.claude import NOTE_ABSOLUTE, install_claude, project_server_command

REPO = Path(__file__).resolve().parents[2]
CLAUDE = (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "aromcp-workflows-tests"
          / "claude-code-2.1.328" / "node_modules" / ".bin" / "claude")
WORKFLOW = 'name: "local:hello"\ndescription: a project workflow\nsteps:\n  - {type: user_message, message: hi}\n'


def venv_in(project: Path) -> Path:
    """`project/.venv` with aromcp-workflows in it, as pip would leave it: a console script
    whose shebang is the venv's python (this test's packages are reached through a .pth)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(project / ".venv")], check=True, timeout=120)
    (packages,) = (project / ".venv" / "lib").glob("python3*/site-packages")
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (packages / "aromcp_test.pth").write_text(
        f"{REPO}\n" + "".join(f"import site; site.addsitedir({p!r})\n" for p in ours))
    script = project / ".venv" / "bin" / "aromcp-workflows"
    script.write_text(f"#!{project / '.venv' / 'bin' / 'python'}\nimport sys\n"
                      "from aromcp_workflows.cli.entry import main\nsys.exit(main())\n")
    script.chmod(0o755)
    return script


def project_at(path: Path) -> Path:
    (path / ".aromcp" / "workflows").mkdir(parents=True)
    (path / ".aromcp" / "workflows" / "local:hello.yaml").write_text(WORKFLOW)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path


def plain_path() -> str:
    """PATH without any aromcp-workflows on it (this test's own venv included)."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not (Path(d) / "aromcp-workflows").exists())


async def listed_by_server(project: Path, entry: dict[str, object], home: Path) -> list[dict[str, object]]:
    """Start the server as Claude Code does — the entry's command and args, in the
    directory Claude Code was started in — and list the workflows it sees."""
    env = {"PATH": plain_path(), "HOME": str(home), "AROMCP_WORKFLOWS_STORE": str(home / "s.sqlite3")}
    params = StdioServerParameters(command=str(entry["command"]), args=list(entry["args"]),  # type: ignore[call-overload]
                                   env=env, cwd=str(project))
    async with Client(stdio_client(params)) as client:
        result = await client.call_tool("workflow_list", {"include_global": False})
    return list(result.structured_content["workflows"])


@pytest.mark.slow
async def test_the_command_in_mcp_json_runs_in_a_copy_of_the_project(tmp_path: Path):
    first = project_at(tmp_path / "first")
    script = venv_in(first)
    done = subprocess.run([str(script), "install", "claude"], cwd=first, capture_output=True, text=True,
                          env={**os.environ, "PATH": plain_path(), "HOME": str(tmp_path)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "start Claude Code in the project root" in done.stdout
    text = (first / ".mcp.json").read_text()
    entry = json.loads(text)["mcpServers"]["aromcp-workflows"]
    assert entry["command"] == ".venv/bin/aromcp-workflows" and entry["args"] == ["serve"]
    assert str(tmp_path) not in text  # nothing of this machine's layout

    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(first, copy, ignore=shutil.ignore_patterns(".venv"))  # a checkout: the venv is not committed
    venv_in(copy)
    shutil.rmtree(first)  # the original is gone: nothing may point at it
    found = await listed_by_server(copy, entry, tmp_path)
    (ours,) = [w for w in found if w["name"] == "local:hello"]  # the copy's own workflow: it serves the copy
    assert Path(str(ours["path"])) == copy / ".aromcp" / "workflows" / "local:hello.yaml"

    if not CLAUDE.exists():
        pytest.skip("the Claude Code CLI is not cached (tests/integrations/test_plugin_claude_cli.py installs it)")
    home = tmp_path / "claude-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "settings.json").write_text('{"enableAllProjectMcpServers": true}')
    listed = subprocess.run([str(CLAUDE), "mcp", "list"], cwd=copy, capture_output=True, text=True, timeout=300,
                            env={"PATH": plain_path(), "HOME": str(home)})
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("aromcp-workflows:"))
    assert "Connected" in line, listed.stdout + listed.stderr


def test_an_installation_on_path_is_named_by_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """pipx, uv tool, a system install: the same bare command on every machine."""
    project = project_at(tmp_path / "p")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "aromcp-workflows").write_text("#!/bin/sh\n")
    (bindir / "aromcp-workflows").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "elsewhere" / "python"))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{plain_path()}")
    report = install_claude(project)
    assert report.server_entry["command"] == "aromcp-workflows" and report.note is None


def test_an_installation_nowhere_portable_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project = project_at(tmp_path / "p")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "opt" / "python"))
    monkeypatch.setattr(claude.shutil, "which", lambda name: None)
    chosen = project_server_command(project)
    assert chosen.argv == [str(tmp_path / "opt" / "python"), "-m", "aromcp_workflows"] and chosen.note == NOTE_ABSOLUTE
    assert f"Note: {NOTE_ABSOLUTE}" in str(install_claude(project))


def test_the_user_scope_keeps_this_machines_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """~/.claude.json is this machine's file: the absolute path of this installation."""
    project = project_at(tmp_path / "p")
    script = venv_in(project)
    monkeypatch.setattr(sys, "executable", str(project / ".venv" / "bin" / "python"))
    report = install_claude(project, global_scope=True, home=tmp_path / "home")
    assert report.server_entry["command"] == str(script) and report.note is None
