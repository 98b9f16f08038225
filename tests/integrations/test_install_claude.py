"""`install claude`: writes .mcp.json / ~/.claude.json, /workflow and the workflow-task agent,
idempotently and safely; the texts are the plugin's, with plain names."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from aromcp_workflows.integrations import claude
from aromcp_workflows.integrations.claude import (
    InstallError,
    default_server_command,
    install_claude,
)

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
SKILL = (PLUGIN / "skills" / "workflow" / "SKILL.md").read_text(encoding="utf-8")
AGENT = (PLUGIN / "agents" / "workflow-task.md").read_text(encoding="utf-8")
RENAMES = [("mcp__plugin_aromcp-workflows_workflows__", "mcp__aromcp-workflows__"),
           ("aromcp-workflows:workflow-task", "workflow-task"), ("/aromcp-workflows:workflow", "/workflow")]


def plain(text: str) -> str:
    for old, new in RENAMES:
        assert old in text or new == "workflow-task"
        text = text.replace(old, new)
    return text


SLASH = plain(SKILL)
AGENT_TEXT = plain(AGENT)
CMD = ["/opt/venv/bin/aromcp-workflows"]
ENTRY = {"type": "stdio", "command": CMD[0], "args": ["serve"], "env": {}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    p = tmp_path / "proj"
    p.mkdir()
    return p


def read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_fresh_project(project: Path) -> None:
    report = install_claude(project, command=CMD)
    assert report.scope == "project"
    assert [c.action for c in report.changes] == ["created", "created", "created"]
    mcp = project / ".mcp.json"
    assert read(mcp) == {"mcpServers": {"aromcp-workflows": ENTRY}}
    assert mcp.read_text().startswith('{\n  "mcpServers": {\n    "aromcp-workflows": {')
    assert mcp.read_text().endswith("}\n")
    assert (project / ".claude" / "commands" / "workflow.md").read_text() == SLASH
    assert (project / ".claude" / "agents" / "workflow-task.md").read_text() == AGENT_TEXT
    assert report.agent_path == project / ".claude" / "agents" / "workflow-task.md"
    assert "created" in str(report) and "approve" in str(report)


def test_installed_texts_name_no_plugin_names(project: Path) -> None:
    """Outside a plugin the tools are mcp__aromcp-workflows__*, the agent workflow-task, the
    command /workflow: no plugin-namespaced name may survive the renaming."""
    install_claude(project, command=CMD)
    for path in (project / ".claude" / "commands" / "workflow.md", project / ".claude" / "agents" / "workflow-task.md"):
        text = path.read_text()
        assert "mcp__plugin_" not in text and "aromcp-workflows:" not in text, path
    agent = (project / ".claude" / "agents" / "workflow-task.md").read_text()
    tools = agent.split("tools:", 1)[1].splitlines()[0]
    assert "mcp__aromcp-workflows__workflow_get_next_step" in tools and "Bash" in tools
    assert "subagent_type` `workflow-task`" in SLASH


def test_second_run_changes_nothing(project: Path) -> None:
    install_claude(project, command=CMD)
    files = [project / ".mcp.json", project / ".claude" / "commands" / "workflow.md",
             project / ".claude" / "agents" / "workflow-task.md"]
    before = [(f.read_bytes(), f.stat().st_mtime_ns) for f in files]
    report = install_claude(project, command=CMD)
    assert [c.action for c in report.changes] == ["unchanged", "unchanged", "unchanged"]
    assert not report.changed and "nothing changed" in str(report)
    assert [(f.read_bytes(), f.stat().st_mtime_ns) for f in files] == before


def test_preserves_other_servers_and_keys(project: Path) -> None:
    existing = {
        "$schema": "https://example.invalid/schema.json",
        "mcpServers": {
            "github": {"type": "http", "url": "https://api.example/mcp", "headers": {"X": "ü"}},
            "aromcp-workflows": {"type": "stdio", "command": "old", "args": ["serve"],
                                 "env": {"AROMCP_WORKFLOWS_STORE": "/data/w.sqlite3"}},
            "zeta": {"command": "z", "args": []},
        },
        "other": [1, 2.5, None, True],
    }
    (project / ".mcp.json").write_text(json.dumps(existing), encoding="utf-8")
    report = install_claude(project, command=CMD)
    assert report.changes[0].action == "updated"
    after = read(project / ".mcp.json")
    assert list(after) == ["$schema", "mcpServers", "other"]
    assert list(after["mcpServers"]) == ["github", "aromcp-workflows", "zeta"]  # order kept
    assert after["mcpServers"]["github"] == existing["mcpServers"]["github"]
    assert after["mcpServers"]["zeta"] == existing["mcpServers"]["zeta"]
    assert after["other"] == existing["other"]
    ours = after["mcpServers"]["aromcp-workflows"]
    assert ours["command"] == CMD[0] and ours["args"] == ["serve"]
    assert ours["env"] == {"AROMCP_WORKFLOWS_STORE": "/data/w.sqlite3"}  # user's env kept
    assert '"X": "ü"' in (project / ".mcp.json").read_text(encoding="utf-8")


def test_multi_part_command(project: Path) -> None:
    install_claude(project, command=["/usr/bin/python3", "-m", "aromcp_workflows"])
    entry = read(project / ".mcp.json")["mcpServers"]["aromcp-workflows"]
    assert entry["command"] == "/usr/bin/python3"
    assert entry["args"] == ["-m", "aromcp_workflows", "serve"]


def test_malformed_json_is_not_overwritten(project: Path) -> None:
    bad = '{\n  "mcpServers": {\n    "x": {"command": "y",}\n  }\n}\n'
    (project / ".mcp.json").write_text(bad)
    with pytest.raises(InstallError) as info:
        install_claude(project, command=CMD)
    message = str(info.value)
    assert str(project / ".mcp.json") in message
    assert "line 3, column" in message and "Nothing was changed" in message
    assert (project / ".mcp.json").read_text() == bad
    assert not (project / ".claude").exists()  # nothing else written either


@pytest.mark.parametrize("content, fragment", [
    ("[1, 2]", "holds a JSON list, not an object"),
    ('{"mcpServers": []}', '"mcpServers" is a list, not an object'),
])
def test_wrong_shapes_refused(project: Path, content: str, fragment: str) -> None:
    (project / ".mcp.json").write_text(content)
    with pytest.raises(InstallError, match=fragment):
        install_claude(project, command=CMD)
    assert (project / ".mcp.json").read_text() == content


def test_empty_file_is_filled(project: Path) -> None:
    (project / ".mcp.json").write_text("\n")
    report = install_claude(project, command=CMD)
    assert report.changes[0].action == "updated"
    assert read(project / ".mcp.json") == {"mcpServers": {"aromcp-workflows": ENTRY}}


def test_modified_slash_command_is_updated(project: Path) -> None:
    install_claude(project, command=CMD)
    target = project / ".claude" / "commands" / "workflow.md"
    target.write_text("old version")
    report = install_claude(project, command=CMD)
    assert [c.action for c in report.changes] == ["unchanged", "updated", "unchanged"]
    assert target.read_text() == SLASH


def test_missing_project_dir(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="does not exist"):
        install_claude(tmp_path / "nope", command=CMD)


def test_bad_command(project: Path) -> None:
    with pytest.raises(InstallError, match="non-empty list"):
        install_claude(project, command=[])


def test_global_scope_uses_claude_json(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    claude_json = home / ".claude.json"
    existing = {
        "numStartups": 12,
        "projects": {"/x": {"mcpServers": {"a": {"command": "a"}}}},
        "mcpServers": {"memory": {"type": "stdio", "command": "npx", "args": [], "env": {}}},
    }
    claude_json.write_text(json.dumps(existing))
    claude_json.chmod(0o600)
    report = install_claude(project, global_scope=True, command=CMD, home=home)
    assert report.scope == "user" and report.config_path == claude_json
    after = read(claude_json)
    assert after["numStartups"] == 12 and after["projects"] == existing["projects"]
    assert after["mcpServers"]["memory"] == existing["mcpServers"]["memory"]
    assert after["mcpServers"]["aromcp-workflows"] == ENTRY
    assert stat.S_IMODE(claude_json.stat().st_mode) == 0o600  # permissions kept
    assert (home / ".claude" / "commands" / "workflow.md").read_text() == SLASH
    assert (home / ".claude" / "agents" / "workflow-task.md").read_text() == AGENT_TEXT
    assert not (project / ".mcp.json").exists()
    assert "restart" in str(report)
    assert not install_claude(project, global_scope=True, command=CMD, home=home).changed


def test_global_scope_creates_private_claude_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    report = install_claude(tmp_path, global_scope=True, command=CMD, home=home)
    assert read(home / ".claude.json") == {"mcpServers": {"aromcp-workflows": ENTRY}}
    assert stat.S_IMODE((home / ".claude.json").stat().st_mode) == 0o600
    assert [c.action for c in report.changes] == ["created", "created", "created"]


def test_claude_config_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_dir = tmp_path / "alt"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config_dir))
    report = install_claude(tmp_path, global_scope=True, command=CMD)
    assert report.config_path == config_dir / ".claude.json"
    assert report.command_path == config_dir / "commands" / "workflow.md"
    assert report.agent_path == config_dir / "agents" / "workflow-task.md"
    assert read(config_dir / ".claude.json")["mcpServers"]["aromcp-workflows"] == ENTRY


def test_home_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    report = install_claude(tmp_path, global_scope=True, command=CMD)
    assert report.config_path == tmp_path / ".claude.json"


def test_symlinked_config_written_through(tmp_path: Path) -> None:
    home = tmp_path / "home"
    dotfiles = tmp_path / "dotfiles"
    home.mkdir()
    dotfiles.mkdir()
    real = dotfiles / "claude.json"
    real.write_text('{"theme": "dark"}')
    (home / ".claude.json").symlink_to(real)
    install_claude(tmp_path, global_scope=True, command=CMD, home=home)
    assert (home / ".claude.json").is_symlink()
    assert read(real) == {"theme": "dark", "mcpServers": {"aromcp-workflows": ENTRY}}


def test_no_temp_files_left(project: Path) -> None:
    install_claude(project, command=CMD)
    assert sorted(p.name for p in project.iterdir()) == [".claude", ".mcp.json"]


def test_default_command_prefers_script_next_to_python(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "aromcp-workflows"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    assert default_server_command() == [str(script)]


def test_default_command_falls_back_to_python_m(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(claude.shutil, "which", lambda name: None)
    assert default_server_command() == [str(tmp_path / "python"), "-m", "aromcp_workflows"]


def test_default_command_uses_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(claude.shutil, "which", lambda name: "/usr/local/bin/" + name)
    assert default_server_command() == ["/usr/local/bin/aromcp-workflows"]


def test_default_command_is_absolute_here() -> None:
    argv = default_server_command()
    assert os.path.isabs(argv[0])
