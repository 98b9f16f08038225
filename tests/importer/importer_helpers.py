"""Helpers for the importer tests: translate, validate, and run with the headless runner.

Everything is real: the translated file is validated by the project's own validator and
run by `run_workflow`, which starts the MCP server as a subprocess and performs every
step (shell commands in bash, transforms in V8, state in SQLite under tmp_path).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check
from aromcp_workflows.importer.report import FileResult
from aromcp_workflows.importer.translate import translate_text
from aromcp_workflows.runner.answers import AnswerBook, ScriptedAnswer
from aromcp_workflows.runner.report import RunOutcome
from aromcp_workflows.runner.run import run_workflow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "aromcp"
ORIGINALS = FIXTURES / "original"
CORPUS = FIXTURES / "corpus"


def translate(path: Path) -> FileResult:
    return translate_text(path.read_text(encoding="utf-8"), str(path))


def validation_errors(path: Path) -> list[str]:
    report = check(str(path), WorkflowLoader(WorkflowResolver(project_dir=str(path.parent))))
    return [str(p) for p in report.errors]


def import_and_run(original: Path, tmp_path: Path, *, inputs: dict[str, Any] | None = None,
                   answers: dict[str, Any] | None = None, project: Path | None = None,
                   env: dict[str, str] | None = None) -> RunOutcome:
    """Translate `original`, write it, check it validates, and run it to its end."""
    result = translate(original)
    assert result.ok, result.lines()
    assert result.text is not None
    target = tmp_path / "imported" / original.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(result.text, encoding="utf-8")
    assert validation_errors(target) == []
    project = project or tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    return asyncio.run(run_workflow(str(target), inputs or {}, answers or {}, project,
                                    tmp_path / "store.sqlite", None, env=env))


def git_project(path: Path, files: dict[str, str]) -> Path:
    """A git repository on branch `main` with one empty commit; `files` left untracked."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "-c", "init.defaultBranch=main", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty",
                    "-m", "init"], cwd=path, check=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


class GenericAgent(AnswerBook):
    """An agent that knows no workflow: what a coding agent with no project-specific tools
    or knowledge would report.  A scripted answer still wins; otherwise an `mcp_call`
    gets `{"success": true}` (the tools ran and found nothing), an `agent_prompt` a
    minimal value its `response_schema` accepts (else "done"), a `user_input` its first
    choice (else its default, else "yes")."""

    def take(self, step: dict[str, Any], task_id: str | None) -> ScriptedAnswer | None:
        scripted = super().take(step, task_id)
        if scripted is not None or step.get("type") == "agent_shell_command":
            return scripted
        definition = step.get("definition") or {}
        if step.get("type") == "mcp_call":
            return ScriptedAnswer("generic", result={"success": True})
        if step.get("type") == "user_input":
            choices = definition.get("choices") or []
            return ScriptedAnswer("generic", result=str(choices[0]) if choices else definition.get("default") or "yes")
        schema = definition.get("response_schema")
        return ScriptedAnswer("generic", result=minimal_instance(schema) if isinstance(schema, dict) else "done")


def minimal_instance(schema: dict[str, Any]) -> Any:
    """The smallest value a (simple) JSON Schema accepts: required keys only, empty lists."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: minimal_instance(properties.get(name) or {}) for name in schema.get("required") or []}
    return {"array": [], "string": "", "number": 0, "integer": 0, "boolean": True, "null": None}.get(kind)
