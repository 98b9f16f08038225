"""The Claude Code skill and agent texts, read from the plugin folder (their one source).

The repository's ``plugin/`` is the Claude Code plugin: ``skills/workflow/SKILL.md`` (the
orchestrator loop, `/aromcp-workflows:workflow`) and ``agents/workflow-task.md`` (the
sub-agent). `aromcp-workflows install claude` writes the same texts into a project for
users without plugins; only the names a plugin namespaces are rewritten
(`for_project_install`), so the two installs never drift apart.

The files are found in the installed package (``aromcp_workflows/_data/plugin``, where the
wheel puts ``plugin/skills`` and ``plugin/agents``), else in the repository's ``plugin/``.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent

PLUGIN_NAME = "aromcp-workflows"
PLUGIN_SERVER = "workflows"  # the key in plugin/.mcp.json
PROJECT_SERVER = "aromcp-workflows"  # the key `install claude` writes to .mcp.json
SKILL_FILE = "skills/workflow/SKILL.md"
AGENT_FILE = "agents/workflow-task.md"
AGENT_NAME = "workflow-task"

# plugin name -> the name outside a plugin, applied in this order (longest first).
PROJECT_NAMES: tuple[tuple[str, str], ...] = (
    (f"mcp__plugin_{PLUGIN_NAME}_{PLUGIN_SERVER}__", f"mcp__{PROJECT_SERVER}__"),
    (f"{PLUGIN_NAME}:{AGENT_NAME}", AGENT_NAME),
    (f"/{PLUGIN_NAME}:workflow", "/workflow"),
)


class PluginTextNotFoundError(FileNotFoundError):
    """A plugin text is missing from both the installed package and the source tree."""


def plugin_dirs() -> list[Path]:
    """Where the plugin texts are looked for, in order: package data, then the repo."""
    return [_PACKAGE_DIR / "_data" / "plugin", _PACKAGE_DIR.parent / "plugin"]


def plugin_text(relative: str) -> str:
    """A file of the plugin folder, as written there."""
    for base in plugin_dirs():
        path = base / relative
        if path.is_file():
            return path.read_text(encoding="utf-8")
    searched = " and ".join(str(base / relative) for base in plugin_dirs())
    raise PluginTextNotFoundError(
        f"{relative} is missing (searched {searched}): the installation is incomplete; "
        "reinstall aromcp-workflows."
    )


def for_project_install(text: str) -> str:
    """The plugin text with plugin-namespaced names replaced by a plain install's names:
    tools ``mcp__aromcp-workflows__…``, agent ``workflow-task``, command ``/workflow``."""
    for plugin_name, plain_name in PROJECT_NAMES:
        text = text.replace(plugin_name, plain_name)
    return text


def skill_text() -> str:
    """The orchestrator skill as the plugin ships it."""
    return plugin_text(SKILL_FILE)


def agent_text() -> str:
    """The sub-agent definition as the plugin ships it."""
    return plugin_text(AGENT_FILE)


def project_command_text() -> str:
    """``.claude/commands/workflow.md`` for `install claude` (the skill, renamed)."""
    return for_project_install(skill_text())


def project_agent_text() -> str:
    """``.claude/agents/workflow-task.md`` for `install claude`."""
    return for_project_install(agent_text())
