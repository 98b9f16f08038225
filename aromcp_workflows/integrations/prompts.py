"""The agent-facing texts in ``prompts/``: where they are found and how placeholders are filled.

The texts are data, not code, so improving a prompt never needs a code change. They are
found in the installed package (``aromcp_workflows/_data/prompts``, where the wheel puts
the repository's ``prompts/``), else in the repository's ``prompts/`` next to the
package (editable installs and a source checkout).

Placeholder scheme: ``{name}`` where *name* is one of the placeholders declared for that
prompt (`PLACEHOLDERS`) is replaced; everything else is left exactly as it is — other
braces, JSON examples, ``{{ templates }}`` and doubled ``{{name}}`` alike. Replacement is
a single pass, so a value that itself contains ``{task_id}`` is not expanded again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent

# name -> file, and the placeholders each text declares.
PROMPT_FILES: dict[str, str] = {
    "orchestrator": "orchestrator.md",  # the MCP prompt `workflow`
    "sub_agent": "sub_agent.md",  # the MCP prompt `sub_agent` and parallel_tasks steps
}
PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "orchestrator": ("action", "target"),
    "sub_agent": ("workflow_id", "task_id"),
}
_MAX_VALUE_CHARS = 200


class PromptNotFoundError(FileNotFoundError):
    """A prompt file is missing from both the installed package and the source tree."""


def prompt_dirs() -> list[Path]:
    """Where prompts are looked for, in order: installed package data, then the repo."""
    return [_PACKAGE_DIR / "_data" / "prompts", _PACKAGE_DIR.parent / "prompts"]


def prompts_dir() -> Path:
    """The first directory of `prompt_dirs()` that exists."""
    for candidate in prompt_dirs():
        if candidate.is_dir():
            return candidate
    searched = " and ".join(str(p) for p in prompt_dirs())
    raise PromptNotFoundError(
        f"No prompts directory found (searched {searched}). The installation is incomplete: "
        "reinstall aromcp-workflows."
    )


@cache
def load_prompt(name: str) -> str:
    """The raw text of a known prompt (frontmatter included), read once per process."""
    if name not in PROMPT_FILES:
        known = ", ".join(sorted(PROMPT_FILES))
        raise KeyError(f"Unknown prompt {name!r}; known prompts: {known}.")
    path = prompts_dir() / PROMPT_FILES[name]
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise PromptNotFoundError(
            f"Prompt file {path} is missing: the installation is incomplete; reinstall "
            "aromcp-workflows."
        ) from exc


def split_frontmatter(text: str) -> tuple[dict[str, str], str]:
    """Split a ``---`` frontmatter block of ``key: value`` lines from the body.

    Only the flat form our slash command uses is understood; no YAML parser is imported
    for it (server start-up time).
    """
    if not text.startswith("---\n"):
        return {}, text
    end = text.find("\n---\n", 4)
    if end < 0:
        return {}, text
    meta: dict[str, str] = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            meta[key.strip()] = value.strip()
    return meta, text[end + 5 :].lstrip("\n")


def _clean(value: object) -> str:
    """A value as one safe line: no newlines or backticks that could break the prompt."""
    text = " ".join(str(value).split()).replace("`", "'")
    return text[:_MAX_VALUE_CHARS]


def render(text: str, values: Mapping[str, object]) -> str:
    """Replace ``{name}`` for each name in `values`; leave every other brace untouched."""
    if not values:
        return text
    names = "|".join(re.escape(name) for name in values)
    pattern = re.compile(r"(?<!\{)\{(" + names + r")\}(?!\})")
    cleaned = {name: _clean(value) for name, value in values.items()}
    return pattern.sub(lambda m: cleaned[m.group(1)], text)


def render_prompt(name: str, **values: object) -> str:
    """A prompt's body with its declared placeholders filled (missing ones become empty).

    Unknown keyword names are refused, so a typo cannot silently leave a placeholder.
    """
    declared = PLACEHOLDERS.get(name, ())
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise ValueError(
            f"Prompt {name!r} has no placeholder {', '.join(unknown)}; "
            f"it declares: {', '.join(declared) or 'none'}."
        )
    _, body = split_frontmatter(load_prompt(name))
    filled = {key: ("" if values.get(key) is None else values[key]) for key in declared}
    return render(body, filled)


def orchestrator_prompt(action: str | None = None, target: str | None = None) -> str:
    """The body of the MCP prompt `workflow` (orchestrator instructions)."""
    return render_prompt("orchestrator", action=action, target=target)


def sub_agent_prompt(workflow_id: str | None = None, task_id: str | None = None) -> str:
    """The standard sub-agent prompt. Without ids the placeholders stay, for the
    orchestrator to fill per task (that is what `parallel_tasks.sub_agent_prompt` carries).
    """
    if workflow_id is None and task_id is None:
        return split_frontmatter(load_prompt("sub_agent"))[1]
    values = {k: v for k, v in (("workflow_id", workflow_id), ("task_id", task_id)) if v}
    return render(split_frontmatter(load_prompt("sub_agent"))[1], values)


def slash_command_text() -> str:
    """The file installed as ``.claude/commands/workflow.md`` (frontmatter included): the
    plugin's skill with plain names (`plugin_texts`, its one source)."""
    from aromcp_workflows.integrations.plugin_texts import project_command_text

    return project_command_text()
