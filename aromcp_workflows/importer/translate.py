"""The whole translation of one AroMCP file: its text (`translate_text`) or the file (`translate_file`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml.error import YAMLError

from aromcp_workflows.importer.reading import (
    dump_text,
    line_of,
    load_text,
    mark_trailing,
    tidy_comments,
    valid_here,
)
from aromcp_workflows.importer.report import FileResult, Notes, Refusal, Rewrite
from aromcp_workflows.importer.rules_workflow import translate_workflow
from aromcp_workflows.importer.writing import validation_errors

_HEADER = ("# Translated from AroMCP's workflow dialect by `aromcp-workflows import` (source: {name}).\n"
           "# Review the notes it printed: where AroMCP's meaning differs, they say what was chosen.\n")


def translate_text(text: str, source: str) -> FileResult:
    """Translate one file's text; `source` names it in the report and gives the file name.

    The loader's bounds come first (`yaml_limits`: size, nesting, alias expansion, tags),
    before anything is built: an alias bomb or a file nested thousands deep is refused with
    the loader's own message instead of stalling the import or ending in a traceback."""
    from aromcp_workflows.definition import check_events

    notes = Notes()
    refused = _out_of_bounds(lambda: check_events(text, source), source, notes)
    if refused is not None:
        return refused
    try:
        document = load_text(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        notes.refuse((mark.line + 1) if mark else 1, f"not valid YAML: {getattr(exc, 'problem', exc)}")
        return FileResult(source, notes, None)
    if isinstance(document, dict) and isinstance(document.get("workflow"), dict):
        document = document["workflow"]
    mark_trailing(document)
    translate_workflow(document, notes)
    if notes.refusals:
        return FileResult(source, notes, None)
    translated = text
    if notes.rewrites:
        tidy_comments(document)
        translated = _HEADER.format(name=Path(source).name) + dump_text(document)
    for error in validation_errors(translated, Path(source).name):
        notes.refuse(*(_source_problem(document, error) or
                       (1, f"the translation does not validate here ({error}); please report it with the file")))
    return FileResult(source, notes, None if notes.refusals else translated)


_CYCLE = re.compile(r"circular computed fields: ([\w$]+)((?: → [\w$]+)+)")


def _source_problem(document: Any, error: str) -> tuple[int, str] | None:
    """A validation error that is the source's own mistake, at its line in the source:
    circular computed fields (AroMCP's loader refuses those too)."""
    match = _CYCLE.search(error)
    computed = ((document.get("state_schema") or {}).get("computed") or {}) if isinstance(document, dict) else {}
    if match is None or match.group(1) not in computed:
        return None
    cycle = match.group(1) + match.group(2)
    return (line_of(computed, match.group(1), 1), f"circular computed fields: {cycle}; AroMCP refuses them too: "
                                                  "make one of them read state instead of the next")


def translate_file(path: Path, *, assume_aromcp: bool = False) -> FileResult:
    """Translate a file; a file already valid in this project's language is kept as it is.

    A file can be valid in both languages and still mean different things (`value: stdout`
    is the text "stdout" here, the command's output in AroMCP): such a file is still copied,
    with a hint naming those places, unless `assume_aromcp` asks to translate it anyway."""
    from aromcp_workflows.definition import check_size

    refused = _out_of_bounds(lambda: check_size(path.stat().st_size, str(path)), str(path), Notes())
    if refused is not None:  # before reading: a 50 MB file is refused unread
        return refused
    text = path.read_text(encoding="utf-8")
    if assume_aromcp or not valid_here(path):
        return translate_text(text, str(path))
    kept = FileResult(str(path), Notes(), text, already_ours=True)
    as_aromcp = translate_text(text, str(path))
    kept.aromcp_hints = [r for r in as_aromcp.notes.rewrites if r.note.startswith(MAGIC_NOTES)]
    return kept


def _out_of_bounds(check: Callable[[], None], source: str, notes: Notes) -> FileResult | None:
    """The refused result when `check` finds the file beyond a YAML bound, else None."""
    from aromcp_workflows.definition import DefinitionError

    try:
        check()
    except DefinitionError as exc:
        for problem in exc.problems:
            notes.refuse(problem.line or 1, problem.message)
        return FileResult(source, notes, None)
    return None


MAGIC_NOTES = ("AroMCP reads this name", "AroMCP's returncode", "the whole command result")


__all__ = ["FileResult", "Notes", "Refusal", "Rewrite", "translate_file", "translate_text"]
