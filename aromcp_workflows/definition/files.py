"""One workflow file read into the workflows it holds, and the stamp that says when it changed.

The text is size-checked before it is read and must be UTF-8; a file holds one workflow,
one wrapped in `workflow:`, a `workflows:` list, or a stream of documents, and the names
in it are unique.  Whatever goes wrong is that file's `DefinitionError`, with file, line
and column where there are some.  Caching and resolving names and imports is the
loader's (definition/loader.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aromcp_workflows.definition.build import build_definition
from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_limits import check_size
from aromcp_workflows.definition.yaml_source import Positions, parse_yaml

Stamp = tuple[int, int]  # (mtime in ns, size): changes when a file is edited


def read_definitions(path: Path) -> list[tuple[WorkflowDefinition, Positions]]:
    """The workflows of one file; whatever goes wrong is that file's DefinitionError, so one
    bad file never hides the others (workflow_list, `list`)."""
    try:
        return _definitions_in(_read_bytes(path), str(path))
    except DefinitionError:
        raise
    except Exception as exc:
        raise DefinitionError([DefinitionProblem(f"cannot read this workflow ({type(exc).__name__}: {str(exc)[:200]}); "
                                       "please report it with the file", str(path))]) from None


def _definitions_in(data: bytes, file: str) -> list[tuple[WorkflowDefinition, Positions]]:
    """A file holds one workflow, one wrapped in `workflow:`, a `workflows:` list, or a stream."""
    documents = parse_yaml(data, file)
    bodies: list[tuple[Any, Positions]] = []
    for document in documents:
        data, positions = document.data, document.positions
        if data is None:
            continue  # an empty document (a stray `---` or a comment-only file)
        if isinstance(data, dict) and set(data) == {"workflow"}:
            bodies.append((data["workflow"], positions.shifted(("workflow",))))
        elif isinstance(data, dict) and set(data) == {"workflows"} and isinstance(data["workflows"], list):
            for index, item in enumerate(data["workflows"]):
                bodies.append((item, positions.shifted(("workflows", index))))
        else:
            bodies.append((data, positions))
    if not bodies:
        raise DefinitionError([DefinitionProblem("the file is empty; a workflow needs at least 'name' and "
                                       "'steps'", file, 1, 1)])
    problems: list[DefinitionProblem] = []
    results = []
    for body, positions in bodies:
        try:
            results.append((build_definition(body, positions), positions))
        except DefinitionError as exc:
            problems.extend(exc.problems)
    first_seen: dict[str, Positions] = {}
    for definition, positions in results:
        earlier = first_seen.setdefault(definition.name, positions)
        if earlier is not positions:
            line = earlier.locate(("name",))[0]
            problems.append(positions.problem(("name",), (
                f"another workflow in this file is already named {definition.name!r} "
                f"(line {line}); names must be unique")))
    if problems:
        raise DefinitionError(problems)
    return results


def file_stamp(path: Path, shown: str) -> Stamp:
    try:
        info = path.stat()
    except OSError as exc:
        raise DefinitionError([DefinitionProblem(f"cannot read workflow file: {exc.strerror}", shown)]) from None
    return (info.st_mtime_ns, info.st_size)


def stamp_or_none(path: Path) -> Stamp | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)


def _read_bytes(path: Path) -> bytes:
    """The file as it is on disk: `parse_yaml` decodes it, and points at a byte that is not UTF-8."""
    try:
        check_size(path.stat().st_size, str(path))  # before reading: a 50 MB file is refused unread
        return path.read_bytes()
    except OSError as exc:
        raise DefinitionError([DefinitionProblem(f"cannot read workflow file: {exc.strerror}", str(path))]) from None
