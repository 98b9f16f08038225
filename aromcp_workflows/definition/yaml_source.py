"""YAML text → plain Python data plus a map of where each node was written.

ruamel.yaml's round-trip loader keeps line and column for every key and list item; we
copy those into a `Positions` table keyed by the data path (`("steps", 2, "command")`) so
that later stages, which only see plain dicts, can still point at the source.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from aromcp_workflows.definition.errors import DefinitionError, Problem

Path = tuple[str | int, ...]


@dataclass
class Positions:
    """Line/column (1-based) of each key or list item, by data path."""

    file: str | None
    table: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: Path) -> tuple[int | None, int | None]:
        """The position of `path`, or of its nearest written ancestor."""
        probe = tuple(path)
        while probe:
            if probe in self.table:
                return self.table[probe]
            probe = probe[:-1]
        return self.table.get((), (None, None))

    def problem(self, path: Path, message: str, severity: str = "error") -> Problem:
        line, column = self.locate(path)
        return Problem(message, self.file, line, column, severity)  # type: ignore[arg-type]

    def shifted(self, prefix: Path) -> "Positions":
        """The sub-table under `prefix`, re-rooted (for `workflow:` wrappers and streams)."""
        size = len(prefix)
        table = {p[size:]: pos for p, pos in self.table.items() if p[:size] == prefix}
        return Positions(self.file, table)


@dataclass
class SourceDocument:
    data: Any
    positions: Positions


def parse_yaml(text: str, file: str | None = None) -> list[SourceDocument]:
    """Parse every document of a YAML stream; raise `DefinitionError` with a position."""
    if "\t" in text:
        _reject_tabs(text, file)
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        raw_docs = list(yaml.load_all(io.StringIO(text)))
    except DuplicateKeyError as exc:
        raise DefinitionError([_marked_problem(exc, file, _duplicate_message(exc))]) from None
    except MarkedYAMLError as exc:
        raise DefinitionError([_marked_problem(exc, file, _yaml_message(exc))]) from None
    except YAMLError as exc:
        raise DefinitionError([Problem(f"invalid YAML: {exc}", file, None, None)]) from None
    documents = []
    for raw in raw_docs:
        positions = Positions(file)
        documents.append(SourceDocument(_to_plain(raw, (), positions), positions))
    return documents


def _to_plain(node: Any, path: Path, positions: Positions) -> Any:
    """Copy ruamel's round-trip nodes into plain Python values, recording positions."""
    if isinstance(node, CommentedMap):
        if path == ():
            positions.table[()] = (node.lc.line + 1, node.lc.col + 1)
        result: dict[str, Any] = {}
        for key, value in node.items():
            line, col = node.lc.key(key)
            child = (*path, str(key))
            positions.table[child] = (line + 1, col + 1)
            result[str(key)] = _to_plain(value, child, positions)
        return result
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            line, col = node.lc.item(index)
            child = (*path, index)
            positions.table[child] = (line + 1, col + 1)
            items.append(_to_plain(value, child, positions))
        return items
    return _plain_scalar(node)


def _plain_scalar(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if hasattr(value, "value"):  # tagged scalars
        return _plain_scalar(value.value)
    return str(value)


def _reject_tabs(text: str, file: str | None) -> None:
    """YAML forbids tabs in indentation; say so plainly instead of a scanner error."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip(" ")
        if stripped.startswith("\t"):
            column = len(line) - len(stripped) + 1
            raise DefinitionError(
                [Problem("tab character in indentation; YAML indents with spaces only", file,
                         number, column)]
            )


def _marked_problem(exc: MarkedYAMLError, file: str | None, message: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return Problem(message, file, None, None)
    return Problem(message, file, mark.line + 1, mark.column + 1)


def _duplicate_message(exc: DuplicateKeyError) -> str:
    problem = str(exc.problem or "")
    key = problem.split('"')[1] if '"' in problem else problem
    first = exc.context_mark
    where = f" (first defined on line {first.line + 1})" if first else ""
    return f"duplicate key {key!r}{where}"


def _yaml_message(exc: MarkedYAMLError) -> str:
    problem = (exc.problem or "").strip()
    context = (exc.context or "").strip()
    text = f"{context}: {problem}" if context and problem else problem or context
    if "mapping values are not allowed" in text:
        return "invalid YAML: a ':' where a value was expected (bad indentation or an unquoted ': ')"
    if "could not find expected ':'" in text:
        return "invalid YAML: expected 'key: value' here (bad indentation or a missing ':')"
    if "expected <block end>" in text:
        return "invalid YAML: bad indentation (this line does not line up with its siblings)"
    return f"invalid YAML: {text}"
