"""YAML text → plain Python data plus a map of where each node was written.

ruamel.yaml's round-trip loader keeps line and column for every key and list item; we
copy those into a `Positions` table keyed by the data path (`("steps", 2, "command")`) so
that later stages, which only see plain dicts, can still point at the source.
"""

from __future__ import annotations

import io
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedKeyMap, CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem
from aromcp_workflows.definition.yaml_limits import check_events

NodePath = tuple[str | int, ...]  # where a node sits in its YAML document: keys and list indices
Finding = tuple[NodePath, str, str]  # a problem found at a node: its path, the message, the severity


@dataclass
class Positions:
    """Line/column (1-based) of each key or list item, by data path."""

    file: str | None
    table: dict[NodePath, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: NodePath) -> tuple[int | None, int | None]:
        """The position of `path`, or of its nearest written ancestor."""
        probe = tuple(path)
        while probe:
            if probe in self.table:
                return self.table[probe]
            probe = probe[:-1]
        return self.table.get((), (None, None))

    def problem(self, path: NodePath, message: str, severity: str = "error") -> DefinitionProblem:
        line, column = self.locate(path)
        return DefinitionProblem(message, self.file, line, column, severity)  # type: ignore[arg-type]

    def shifted(self, prefix: NodePath) -> Positions:
        """The sub-table under `prefix`, re-rooted (for `workflow:` wrappers and streams)."""
        size = len(prefix)
        table = {p[size:]: pos for p, pos in self.table.items() if p[:size] == prefix}
        top_keys = [pos for p, pos in table.items() if len(p) == 1]
        if top_keys:  # "missing key" problems point at the body, not at `workflow:` above it
            table[()] = min(top_keys)
        return Positions(self.file, table)


@dataclass
class SourceDocument:
    data: Any
    positions: Positions


def parse_yaml(text: str | bytes, file: str | None = None) -> list[SourceDocument]:
    """Parse every document of a YAML stream; raise `DefinitionError` with a position.

    Never lets a parser exception escape: ruamel raises plain `ValueError`s for bad
    tagged scalars (`!!int zz`), and an author must see a position, not a traceback.
    Bytes are decoded here, so a byte that is not UTF-8 is pointed at like any other mistake.
    """
    if isinstance(text, bytes):
        text = _utf8_text(text, file)
    check_events(text, file)  # size, depth, alias expansion and tags, before anything is built
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        raw_docs = list(yaml.load_all(io.StringIO(text)))
    except DuplicateKeyError as exc:
        raise DefinitionError([_marked_problem(exc, file, _duplicate_message(exc, text))]) from None
    except MarkedYAMLError as exc:
        raise DefinitionError([_yaml_problem(exc, file, text)]) from None
    except ReaderError as exc:  # a character YAML does not allow: ruamel gives only its offset
        raise DefinitionError([_reader_problem(exc, file, text)]) from None
    except YAMLError as exc:
        message = " ".join(str(exc).split())  # ruamel's text spans lines; a problem is one
        raise DefinitionError([DefinitionProblem(f"invalid YAML: {message}", file, None, None)]) from None
    except (ValueError, TypeError, OverflowError) as exc:  # a bad `!!int`/`!!float` etc.
        raise DefinitionError([DefinitionProblem(f"invalid YAML: cannot read a tagged value ({exc}); "
                                       "fix the value or remove its '!!' tag", file)]) from None
    except RecursionError:  # a bound was raised past what the parser can nest
        too_deep = DefinitionProblem("invalid YAML: nested too deeply to read; flatten it", file)
        raise DefinitionError([too_deep]) from None
    documents = []
    problems: list[DefinitionProblem] = []
    for raw in raw_docs:
        positions = Positions(file)
        positions.table[()] = _root_position(raw)
        documents.append(SourceDocument(_to_plain(raw, (), positions, problems), positions))
    if problems:
        raise DefinitionError(problems)
    return documents


def _utf8_text(data: bytes, file: str | None) -> str:
    """The file's text; the first byte that is not UTF-8 is a problem at its line and column
    (an offset in bytes is no place an editor can go to)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[:exc.start].decode("utf-8")  # all UTF-8: the first bad byte is at `start`
        line, column = _line_column(before, len(before))
        raise DefinitionError([DefinitionProblem(f"file is not UTF-8 text ({exc.reason}); save it as UTF-8",
                                                 file, line, column)]) from None


def _reader_problem(exc: ReaderError, file: str | None, text: str) -> DefinitionProblem:
    """A character YAML does not allow (NUL, another control character), at its line and
    column, with the escape that writes it when it is meant."""
    line, column = _line_column(text, exc.position)
    if not isinstance(exc.character, int):  # a byte ruamel could not decode: it is given text, never bytes
        return DefinitionProblem(f"invalid YAML: {' '.join(str(exc).split())}", file, line, column)
    code = exc.character
    kind = "control character" if unicodedata.category(chr(code)) == "Cc" else "character"
    escape = f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
    return DefinitionProblem(f"invalid YAML: {kind} U+{code:04X} is not allowed; remove it, or write it as "
                             f'"{escape}" inside a double-quoted string', file, line, column)


def _line_column(text: str, offset: int) -> tuple[int, int]:
    """Line and column (1-based, as editors count: a byte-order mark is no column) of the
    character at `offset` in `text`; past the end, the end."""
    before = text[:offset]
    line, start = before.count("\n") + 1, before.rfind("\n") + 1
    if line == 1 and before.startswith("\ufeff"):
        start = 1
    return line, len(before) - start + 1


def _root_position(node: Any) -> tuple[int, int]:
    """Where a document's top node starts (line 1, column 1 for scalars and empty ones)."""
    lc = getattr(node, "lc", None)
    if lc is not None and lc.line is not None:
        return (lc.line + 1, lc.col + 1)
    return (1, 1)


def _to_plain(node: Any, path: NodePath, positions: Positions, problems: list[DefinitionProblem]) -> Any:
    """Copy ruamel's round-trip nodes into plain Python values, recording positions."""
    if isinstance(node, CommentedMap):
        result: dict[str, Any] = {}
        own = node.lc.data or {}
        for key, value in node.items():
            if isinstance(key, (CommentedKeyMap, tuple)):
                problems.append(_unquoted_template(node, key, positions.file))
                continue
            # keys pulled in by a `<<: *anchor` merge have no position of their own here
            line, col = own[key][:2] if key in own else (node.lc.line, node.lc.col)
            child = (*path, str(key))
            positions.table[child] = (line + 1, col + 1)
            result[str(key)] = _to_plain(value, child, positions, problems)
        return result
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            line, col = node.lc.item(index)
            child = (*path, index)
            positions.table[child] = (line + 1, col + 1)
            items.append(_to_plain(value, child, positions, problems))
        return items
    return _plain_scalar(node)


def _unquoted_template(node: CommentedMap, key: Any, file: str | None) -> DefinitionProblem:
    """`message: {{ x }}` is a YAML mapping inside a mapping, not a template: say so."""
    inner = next(iter(key), "...") if isinstance(key, CommentedKeyMap) else "..."
    template = "{{ " + str(inner) + " }}"
    return DefinitionProblem(f"YAML reads the unquoted {template} as a mapping; quote a value that "
                   f'starts with {{{{: "{template}"', file, node.lc.line + 1, node.lc.col + 1)


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


def _marked_problem(exc: MarkedYAMLError, file: str | None, message: str) -> DefinitionProblem:
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return DefinitionProblem(message, file, None, None)
    return DefinitionProblem(message, file, mark.line + 1, mark.column + 1)


def _duplicate_message(exc: DuplicateKeyError, text: str) -> str:
    """`duplicate key 'command' (first written on line 4)`: both places, so either can go."""
    problem = str(exc.problem or "")
    key = problem.split('"')[1] if '"' in problem else problem
    first = _first_occurrence(key, exc, text)
    where = f" (first written on line {first})" if first else ""
    return f"duplicate key {key!r}{where}; a key may appear only once in a mapping"


def _first_occurrence(key: str, exc: DuplicateKeyError, text: str) -> int | None:
    """The line of the earlier `key:` in the same mapping (same column, between the marks)."""
    start, dup = exc.context_mark, exc.problem_mark
    if start is None or dup is None:
        return None
    lines = text.splitlines()
    for number in range(start.line, dup.line):
        rest = lines[number][dup.column:] if number < len(lines) else ""
        for spelling in (key, f'"{key}"', f"'{key}'"):
            if rest.startswith(spelling) and rest[len(spelling):].lstrip(" ").startswith(":"):
                return number + 1
    return None


def _unclosed(text: str, upto: int, otherwise: str) -> tuple[str, str]:
    """The closer the innermost `[` or `{` left open before `upto` needs, and where it was
    opened ("line L, column C"); quoted text and comments are skipped.  `otherwise`: the
    place to name when none is found (the closer is then `}`)."""
    stack: list[tuple[str, int]] = []
    quote, index = "", 0
    while index < min(upto, len(text)):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"':
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t\n"):
            index = text.find("\n", index) if "\n" in text[index:] else len(text)
            continue
        elif char in "[{":
            stack.append((char, index))
        elif char in "]}" and stack:
            stack.pop()
        index += 1
    if not stack:
        return "}", otherwise
    opener, at = stack[-1]
    line, column = _line_column(text, at)
    return ("]" if opener == "[" else "}"), f"line {line}, column {column}"


def _yaml_problem(exc: MarkedYAMLError, file: str | None, text: str) -> DefinitionProblem:
    """Turn ruamel's parser jargon into what the author should fix, at the right place."""
    problem = (exc.problem or "").strip()
    context = (exc.context or "").strip()
    opened = exc.context_mark
    opened_at = f"line {opened.line + 1}, column {opened.column + 1}" if opened else "earlier"
    if "found character '\\t'" in problem:
        return _marked_problem(exc, file, "invalid YAML: tab character; YAML indents and "
                               "separates with spaces only")
    if "quoted scalar" in context and opened is not None:
        quote = text.splitlines()[opened.line][opened.column] if text else '"'
        return DefinitionProblem(f"invalid YAML: the string opened with {quote!r} here is never closed; "
                       f"add the closing {quote!r}", file, opened.line + 1, opened.column + 1)
    if context.startswith("while parsing a flow"):
        closer = "]" if "sequence" in context else "}"
        if "node" in context:  # ruamel does not say which: the innermost bracket left open says
            closer, opened_at = _unclosed(text, exc.problem_mark.index if exc.problem_mark else len(text), opened_at)
        opener = "[" if closer == "]" else "{"
        found = problem.rsplit("but got", 1)[-1].rsplit("but found", 1)[-1].strip()
        message = (f"invalid YAML: expected ',' or '{closer}' but found {found}; "
                   f"is the '{opener}' on {opened_at} missing its '{closer}'?")
        return _marked_problem(exc, file, message)
    if "cannot start any token" in problem:
        char = problem.split("'")[1] if "'" in problem else "this character"
        return _marked_problem(exc, file, f"invalid YAML: '{char}' cannot start a plain value; "
                               "put the value in quotes")
    if "undefined alias" in problem:
        return _marked_problem(exc, file, f"invalid YAML: {problem} (an '*name' needs an "
                               "earlier '&name' anchor; quote the value if '*' is literal)")
    combined = f"{context}: {problem}" if context and problem else problem or context
    if "mapping values are not allowed" in combined:
        message = "invalid YAML: a ':' where a value was expected (bad indentation or an unquoted ': ')"
    elif "could not find expected ':'" in combined:
        message = "invalid YAML: expected 'key: value' here (bad indentation or a missing ':')"
    elif "expected <block end>" in combined:
        message = "invalid YAML: bad indentation (this line does not line up with its siblings)"
    else:
        message = f"invalid YAML: {combined}"
    return _marked_problem(exc, file, message)
