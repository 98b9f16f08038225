"""`aromcp-workflows install claude`: register the server with Claude Code and add `/workflow`.

For users who do not install the plugin (``plugin/``). Three files change, nothing else:

- the MCP configuration: ``<project>/.mcp.json`` (project scope, shared through version
  control) or, with ``global_scope``, ``~/.claude.json`` whose top-level ``mcpServers``
  holds Claude Code's user-scope servers (``$CLAUDE_CONFIG_DIR/.claude.json`` when that
  variable is set). Only the ``aromcp-workflows`` entry is added or updated; every other
  key and server is kept as it was (a JSON round trip with 2-space indent).
- the slash command: ``<project>/.claude/commands/workflow.md`` or
  ``~/.claude/commands/workflow.md`` (``$CLAUDE_CONFIG_DIR/commands``): the plugin's skill
  ``plugin/skills/workflow/SKILL.md`` with plain names (`plugin_texts`);
- the sub-agent: ``.claude/agents/workflow-task.md`` next to the command (the plugin's
  ``agents/workflow-task.md``, same renaming), which pulls one task's steps.

Running it twice changes nothing. A file that is not valid JSON is never overwritten:
the error names it and the position of the problem, and no file is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aromcp_workflows.integrations.plugin_texts import AGENT_NAME, project_agent_text
from aromcp_workflows.integrations.prompts import slash_command_text

SERVER_NAME = "aromcp-workflows"
SCRIPT_NAME = "aromcp-workflows"
CONFIG_DIR_ENV = "CLAUDE_CONFIG_DIR"

Action = Literal["created", "updated", "unchanged"]


class InstallError(Exception):
    """Installation refused or failed; the message names the file and what to do."""


@dataclass(frozen=True)
class FileChange:
    """What happened to one file."""

    path: Path
    action: Action
    what: str


@dataclass(frozen=True)
class InstallReport:
    """The outcome of `install_claude`, for the CLI to print and for tests to check."""

    scope: Literal["project", "user"]
    config_path: Path
    command_path: Path
    server_entry: dict[str, Any]
    agent_path: Path | None = None
    changes: tuple[FileChange, ...] = field(default_factory=tuple)
    note: str | None = None  # what the server command asks of whoever starts Claude Code

    @property
    def changed(self) -> bool:
        return any(change.action != "unchanged" for change in self.changes)

    def lines(self) -> list[str]:
        """Human-readable summary, one line per file plus the next step."""
        command = " ".join([self.server_entry["command"], *self.server_entry["args"]])
        out = [f"Claude Code ({self.scope} scope), server command: {command}"]
        out += [f"  {c.action:<9} {c.path}  ({c.what})" for c in self.changes]
        if self.note:
            out.append(f"Note: {self.note}")
        if not self.changed:
            out.append("Already installed: nothing changed.")
        elif self.scope == "project":
            out.append(
                "Next: start Claude Code in this project, approve the project MCP server "
                f"{SERVER_NAME!r} when asked, then run /workflow list."
            )
        else:
            out.append(
                "Next: restart any running Claude Code session (it rereads its config at "
                "start), then run /workflow list in any project."
            )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def default_server_command() -> list[str]:
    """How Claude Code should start this installation's server (without ``serve``).

    The console script next to the running interpreter first (the same installation as
    the code running now, even when its venv is not on PATH), then one on PATH, else
    ``python -m aromcp_workflows`` with this interpreter.
    """
    bindir = Path(sys.executable).parent
    for name in (SCRIPT_NAME, f"{SCRIPT_NAME}.exe"):
        sibling = bindir / name
        if sibling.is_file() and os.access(sibling, os.X_OK):
            return [str(sibling.absolute())]
    found = shutil.which(SCRIPT_NAME)
    if found:
        return [str(Path(found).absolute())]
    return [sys.executable, "-m", "aromcp_workflows"]


NOTE_RELATIVE = ("the command is relative to the project root, so every checkout with its own {where} runs it; "
                 "start Claude Code in the project root (from a subfolder Claude Code finds .mcp.json but "
                 "cannot start a relative command), or install aromcp-workflows on PATH (pipx install "
                 "aromcp-workflows) and run this again for a plain `aromcp-workflows` command")
NOTE_ABSOLUTE = ("the command is a path of this machine, which .mcp.json (usually committed) carries to other "
                 "checkouts where it does not exist; install aromcp-workflows on PATH (pipx install "
                 "aromcp-workflows, or a venv inside the project) and run this again, or use --global")


@dataclass(frozen=True)
class ServerCommand:
    """The server command to register, and what it needs from whoever starts Claude Code."""

    argv: list[str]
    note: str | None = None


def project_server_command(project_dir: Path) -> ServerCommand:
    """The command a project's `.mcp.json` names — a file usually committed, so one that
    works on other checkouts: this installation by a path relative to the project root
    when it lives in the project (its `.venv`: Claude Code resolves a relative command in
    the directory it was started in), else the bare name when `aromcp-workflows` is on PATH
    (pipx, uv tool, a system install), else this machine's absolute path, with a note."""
    argv = default_server_command()
    inside = _relative_to(Path(argv[0]), project_dir)
    if inside is not None:
        return ServerCommand([inside, *argv[1:]], NOTE_RELATIVE.format(where=inside.split("/")[0]))
    if shutil.which(SCRIPT_NAME):
        return ServerCommand([SCRIPT_NAME])
    return ServerCommand(argv, NOTE_ABSOLUTE)


def _relative_to(path: Path, folder: Path) -> str | None:
    """`path` relative to `folder` (POSIX separators), when it is inside it."""
    for base in {folder.absolute(), folder.resolve()}:
        try:
            return path.absolute().relative_to(base).as_posix()
        except ValueError:
            continue
    return None


def claude_paths(
    project_dir: Path, *, global_scope: bool = False, home: Path | None = None
) -> tuple[Path, Path]:
    """(MCP config file, slash command file) for the chosen scope."""
    if not global_scope:
        return project_dir / ".mcp.json", project_dir / ".claude" / "commands" / "workflow.md"
    if home is None and os.environ.get(CONFIG_DIR_ENV):
        config_dir = Path(os.environ[CONFIG_DIR_ENV]).expanduser()
        return config_dir / ".claude.json", config_dir / "commands" / "workflow.md"
    base = home if home is not None else Path.home()
    return base / ".claude.json", base / ".claude" / "commands" / "workflow.md"


def agent_path_for(command_path: Path) -> Path:
    """The sub-agent file: ``agents/`` beside the ``commands/`` folder of the command."""
    return command_path.parent.parent / "agents" / f"{AGENT_NAME}.md"


def install_claude(
    project_dir: Path,
    *,
    global_scope: bool = False,
    command: list[str] | None = None,
    home: Path | None = None,
) -> InstallReport:
    """Register the server and install `/workflow` for Claude Code; idempotent.

    `command` is the server command without ``serve`` (default: `project_server_command`
    for a project, `default_server_command` for the user scope, whose file is this machine's).
    `home` replaces the user's home directory (tests; unusual layouts). Everything is
    checked before the first write, so an error leaves all files as they were.
    """
    project_dir = Path(project_dir)
    if not global_scope and not project_dir.is_dir():
        raise InstallError(
            f"Project directory {project_dir} does not exist or is not a directory. Run the "
            "command from your project, or pass the project directory."
        )
    chosen = ServerCommand(command) if command is not None else \
        ServerCommand(default_server_command()) if global_scope else project_server_command(project_dir)
    argv = _server_argv(chosen.argv)
    config_path, command_path = claude_paths(project_dir, global_scope=global_scope, home=home)
    config = _read_config(config_path)
    servers = _servers_of(config, config_path)
    old_entry = servers.get(SERVER_NAME)
    entry = servers[SERVER_NAME] = _server_entry(old_entry, argv)
    slash_text, agent_text = slash_command_text(), project_agent_text()
    agent_path = agent_path_for(command_path)
    for path in (command_path, agent_path):
        if path.is_dir():
            raise InstallError(f"{path} is a directory; move it away and run the install again.")

    # A new ~/.claude.json is private (it also holds account data); .mcp.json is shared.
    new_mode = 0o600 if global_scope else 0o644
    changes = (
        _write_config(config_path, config, old_entry, entry, new_mode),
        _write_text(command_path, slash_text, "slash command /workflow"),
        _write_text(agent_path, agent_text, f"sub-agent {AGENT_NAME}"),
    )
    return InstallReport(
        scope="user" if global_scope else "project",
        config_path=config_path,
        command_path=command_path,
        server_entry=entry,
        agent_path=agent_path,
        changes=changes,
        note=chosen.note,
    )


def _server_argv(command: list[str]) -> list[str]:
    """The server command to register, checked now: Claude Code runs it as an argv, so an
    empty or non-string part would fail only later, in the user's editor, far from its cause."""
    argv = list(command)
    if not argv or not all(isinstance(part, str) and part for part in argv):
        raise InstallError(f"The server command must be a non-empty list of strings, not {argv!r}.")
    return argv


def _servers_of(config: dict[str, Any], config_path: Path) -> dict[str, Any]:
    """The config's ``mcpServers`` object, added when absent.  Anything else under that key
    is the user's data we do not understand: refused, never replaced."""
    servers = config.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(
            f"{config_path}: \"mcpServers\" is a {type(servers).__name__}, not an object. "
            "Nothing was changed; fix that key (it maps server names to settings) and run "
            "the install again."
        )
    return servers


def _server_entry(old_entry: Any, argv: list[str]) -> dict[str, Any]:
    """Our server's entry for `argv`; the environment variables the user added to an
    earlier entry are kept, so reinstalling never drops their settings."""
    env = old_entry.get("env") if isinstance(old_entry, dict) else None
    return {
        "type": "stdio",
        "command": argv[0],
        "args": [*argv[1:], "serve"],
        "env": env if isinstance(env, dict) else {},
    }


def _read_config(path: Path) -> dict[str, Any]:
    """The existing JSON object, or {} when the file does not exist (or is empty)."""
    if path.is_dir():
        raise InstallError(
            f"{path} is a directory, not a JSON file; move it away and run the install again."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"Cannot read {path}: {exc}. Nothing was changed.") from exc
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstallError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}. "
            "Nothing was changed; fix the file (or move it away) and run the install again."
        ) from exc
    if not isinstance(data, dict):
        raise InstallError(
            f"{path} holds a JSON {type(data).__name__}, not an object. Nothing was changed; "
            "fix the file (or move it away) and run the install again."
        )
    return data


def _write_config(
    path: Path, config: dict[str, Any], old_entry: Any, entry: dict[str, Any], new_mode: int
) -> FileChange:
    what = f"MCP server {SERVER_NAME!r}"
    if path.exists() and old_entry == entry:
        return FileChange(path, "unchanged", what)
    text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    action: Action = "updated" if path.exists() else "created"
    _atomic_write(path, text, new_mode)
    return FileChange(path, action, what)


def _write_text(path: Path, text: str, what: str) -> FileChange:
    try:
        current = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        current = None
    if current == text:
        return FileChange(path, "unchanged", what)
    action: Action = "updated" if path.exists() else "created"
    _atomic_write(path, text, 0o644)
    return FileChange(path, action, what)


def _atomic_write(path: Path, text: str, new_mode: int) -> None:
    """Write via a temp file and rename, so a crash never leaves half a config file.

    A symlinked file (dotfile managers) is written through to its target; an existing
    file keeps its permissions (``~/.claude.json`` holds account data).
    """
    target = path.resolve() if path.is_symlink() else path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else new_mode
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InstallError(
            f"Cannot write {path}: {exc.strerror or exc}. Check that the directory is writable."
        ) from exc
