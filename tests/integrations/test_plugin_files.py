"""The Claude Code plugin and marketplace as files: manifests, names, the tools they grant.

The plugin lives in ``plugin/`` (not the repository root, whose ``workflows/`` Claude Code
would read as its own JavaScript workflows); the marketplace at the root lists it. The
real Claude Code CLI checks the same files in `test_plugin_claude_cli.py`.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mcp import Client

from aromcp_workflows.integrations import plugin_texts
from aromcp_workflows.integrations.prompts import split_frontmatter

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "plugin"
PREFIX = "mcp__plugin_aromcp-workflows_workflows__"


def frontmatter(path: Path) -> dict[str, str]:
    meta, body = split_frontmatter(path.read_text(encoding="utf-8"))
    assert body.strip(), f"{path} has no body"
    return meta


def test_marketplace_lists_the_plugin_folder() -> None:
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    assert market["name"] == "aromcp" and market["owner"]["name"]
    [entry] = market["plugins"]
    assert entry["name"] == "aromcp-workflows" and entry["source"] == "./plugin"
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == entry["name"]
    assert manifest["version"] == entry["version"]
    assert {"description", "version", "author", "license"} <= set(manifest)
    assert manifest["license"] == "MIT" and (REPO / "LICENSE").read_text().startswith("MIT License")


def test_plugin_version_follows_the_package() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["version"] == project["version"]


def test_nothing_where_claude_code_looks_for_its_own_workflows() -> None:
    """Claude Code's built-in /workflows reads `.claude/workflows/` and a plugin's
    `workflows/` folder as JavaScript; our YAML must be in neither."""
    assert not (PLUGIN / "workflows").exists()
    assert not (REPO / ".claude" / "workflows").exists()
    assert not (REPO / ".claude-plugin" / "plugin.json").exists()  # the root is not a plugin


def test_mcp_server_starts_from_the_plugin_root_and_shares_the_clis_default_store() -> None:
    config = json.loads((PLUGIN / ".mcp.json").read_text())
    [(name, server)] = config["mcpServers"].items()
    assert name == plugin_texts.PLUGIN_SERVER
    assert server["args"] == ["${CLAUDE_PLUGIN_ROOT}/server/launch.py"]
    assert "AROMCP_WORKFLOWS_STORE" not in server.get("env", {})  # the default store: the CLI's too
    launcher = PLUGIN / "server" / "launch.py"
    assert launcher.is_file()
    for link in ("aromcp_workflows", "workflows", "prompts", "pyproject.toml"):  # the source it serves
        assert (PLUGIN / "server" / link).resolve() == (REPO / link).resolve(), link
    for own in ("launch.py", "venvs.py", "proxy.py", "answers.json"):  # files of the plugin itself, copied as they are
        assert (PLUGIN / "server" / own).is_file() and not (PLUGIN / "server" / own).is_symlink(), own


def test_the_launcher_reads_as_any_python_3() -> None:
    """`python3` may be older than 3.11: the launcher must get as far as its version check
    (which looks for a newer Python) instead of failing on syntax it does not know. (The
    plugin CLI tests run it with the older Pythons found on the machine.)"""
    import ast

    ast.parse((PLUGIN / "server" / "launch.py").read_text(), feature_version=(3, 4))


def test_skill_and_agent_frontmatter() -> None:
    skill = frontmatter(PLUGIN / "skills" / "workflow" / "SKILL.md")
    assert skill["name"] == "workflow" and len(skill["description"]) > 40
    assert "$ARGUMENTS" in (PLUGIN / "skills" / "workflow" / "SKILL.md").read_text()
    assert skill["allowed-tools"].split(", ")[0] == PREFIX + "*"
    agent = frontmatter(PLUGIN / "agents" / "workflow-task.md")
    assert agent["name"] == "workflow-task" and len(agent["description"]) > 40
    tools = [t.strip() for t in agent["tools"].split(",")]
    ours = {t.removeprefix(PREFIX) for t in tools if t.startswith(PREFIX)}
    assert ours == {"workflow_get_next_step", "workflow_step_complete", "workflow_state_read"}
    others = set(tools) - {PREFIX + t for t in ours}
    assert others == {"Bash", "Read", "Edit", "Write", "Grep", "Glob"}  # no Agent/Task: it starts no agents


def test_skill_names_the_plugin_agent_and_commands() -> None:
    text = (PLUGIN / "skills" / "workflow" / "SKILL.md").read_text()
    assert "`aromcp-workflows:workflow-task`" in text
    assert "/aromcp-workflows:workflow resume <workflow_id>" in text
    assert re.search(r"(?<![:\w])/workflow\b", text) is None  # every command is the namespaced one
    assert "mcp__aromcp-workflows__" not in text


async def test_agent_tools_exist_on_the_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool names in the agent's frontmatter are tools the server really lists."""
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", str(tmp_path / "s.sqlite"))
    server = build_server(lambda: WorkflowService(project_dir=tmp_path, store_path=tmp_path / "s.sqlite"))
    async with Client(server) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
    agent = frontmatter(PLUGIN / "agents" / "workflow-task.md")
    wanted = {t.strip().removeprefix(PREFIX) for t in agent["tools"].split(",") if t.strip().startswith(PREFIX)}
    assert wanted and wanted <= listed, wanted - listed


def test_wheel_ships_the_plugin_texts(tmp_path: Path) -> None:
    """`install claude` from an installed wheel (no repository) finds the same texts."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(REPO)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [wheel] = tmp_path.glob("aromcp_workflows-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        skill = archive.read("aromcp_workflows/_data/plugin/skills/workflow/SKILL.md").decode()
        agent = archive.read("aromcp_workflows/_data/plugin/agents/workflow-task.md").decode()
    assert skill == plugin_texts.skill_text() and agent == plugin_texts.agent_text()
    assert "aromcp_workflows/_data/prompts/orchestrator.md" in names


def test_package_data_wins_over_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "site" / "aromcp_workflows"
    skill = package / "_data" / "plugin" / "skills" / "workflow" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("---\nname: workflow\n---\ncall mcp__plugin_aromcp-workflows_workflows__workflow_list\n")
    monkeypatch.setattr(plugin_texts, "_PACKAGE_DIR", package)
    assert plugin_texts.project_command_text().endswith("call mcp__aromcp-workflows__workflow_list\n")
    with pytest.raises(FileNotFoundError, match="reinstall"):
        monkeypatch.setattr(plugin_texts, "_PACKAGE_DIR", tmp_path / "nowhere" / "aromcp_workflows")
        plugin_texts.agent_text()
