"""Reading AroMCP files with ruamel.yaml round-trip: values, comments, order and lines.

Round-trip nodes (`CommentedMap`, `CommentedSeq`) remember where each key was written,
so every rewrite and refusal can name the line of the original file, and the writer
keeps the author's comments and key order.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq


def round_trip_yaml() -> YAML:
    """The one YAML configuration for reading and writing (quotes kept, no re-wrapping)."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), _null)
    return yaml


def _null(representer: Any, _: None) -> Any:
    """Write `null` as `null` (ruamel's round-trip default leaves the value empty)."""
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def load_text(text: str) -> Any:
    """The document as round-trip nodes (raises ruamel's YAMLError on bad YAML)."""
    return round_trip_yaml().load(StringIO(text))


def dump_text(document: Any) -> str:
    stream = StringIO()
    round_trip_yaml().dump(document, stream)
    return stream.getvalue()


def line_of(node: Any, key: Any = None, default: int = 1) -> int:
    """1-based line of `key` in mapping `node` (or of the node itself); `default` if unknown."""
    try:
        if key is not None and isinstance(node, CommentedMap):
            return int(node.lc.key(key)[0]) + 1
        if key is not None and isinstance(node, CommentedSeq):
            return int(node.lc.item(key)[0]) + 1
        if isinstance(node, (CommentedMap, CommentedSeq)):
            return int(node.lc.line) + 1
    except (KeyError, IndexError, TypeError, AttributeError):
        pass
    return default


def valid_here(path: Path) -> bool:
    """True when the file already validates in this project's language (no errors)."""
    from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check

    loader = WorkflowLoader(WorkflowResolver(project_dir=str(path.parent)))
    return check(str(path), loader).valid


def rename_key(mapping: CommentedMap, old: str, new: str) -> None:
    """Rename a key in place, keeping its position (and so the file's order), its comment
    and its line: a refusal inside the renamed value (`then_steps: 5`) names that line."""
    keys = list(mapping.keys())
    position = keys.index(old)
    comment = mapping.ca.items.pop(old, None)
    where = (mapping.lc.data or {}).get(old)
    value = mapping.pop(old)
    if new in mapping:
        mapping.pop(new)
    mapping.insert(position, new, value)
    if comment is not None:
        mapping.ca.items[new] = comment
    if where is not None:
        mapping.lc.data[new] = where
    if _LAST.get(id(mapping)) == old:
        _LAST[id(mapping)] = new


def new_map(**items: Any) -> CommentedMap:
    out = CommentedMap()
    for key, value in items.items():
        out[key] = value
    return out


def _deepest_last(node: Any) -> tuple[CommentedMap, Any] | None:
    """The mapping and key of the last scalar written inside `node` (where trailing comments live)."""
    while True:
        if isinstance(node, CommentedMap) and node:
            key = list(node.keys())[-1]
            if not isinstance(node[key], (CommentedMap, CommentedSeq)) or not node[key]:
                return node, key
            node = node[key]
        elif isinstance(node, CommentedSeq) and node:
            node = node[-1]
            if not isinstance(node, (CommentedMap, CommentedSeq)):
                return None
        else:
            return None


def _attach(token: Any, text: str, target: tuple[CommentedMap, Any] | None) -> None:
    if target is None or not text:
        return
    mapping, key = target
    slot = mapping.ca.items.setdefault(key, [None, None, None, None])
    if slot[2] is None:
        token.value = "\n" + text
        slot[2] = token
    else:
        slot[2].value = slot[2].value + text


def delete_key(mapping: Any, key: Any) -> None:
    """Remove a key, handing the comment lines after it to what now comes before them."""
    if not isinstance(mapping, CommentedMap):
        mapping.pop(key, None)
        return
    keys = list(mapping.keys())
    entry = mapping.ca.items.pop(key, None)
    inner = mapping[key]
    if isinstance(inner, (CommentedMap, CommentedSeq)) and inner:
        holder = _deepest_last(inner)
        entry = holder[0].ca.items.get(holder[1]) if holder else None
    position = keys.index(key)
    del mapping[key]
    if _LAST.get(id(mapping)) == key and position > 0:
        _LAST[id(mapping)] = keys[position - 1]
    token = entry[2] if entry and len(entry) > 2 else None
    if token is None or position == 0:
        return
    _, _, tail = token.value.partition("\n")
    previous = keys[position - 1]
    value = mapping[previous]
    target = _deepest_last(value) if isinstance(value, (CommentedMap, CommentedSeq)) and value else (mapping, previous)
    _attach(token, tail, target)


# The last key of every block, noted before translation: the comment lines after the
# first line of that key's comment introduce whatever follows the block, so when keys are
# appended after it they must move to the new end.  One file at a time (`mark_trailing`).
_LAST: dict[int, Any] = {}


def mark_trailing(node: Any, *, top: bool = True) -> None:
    """Remember each mapping's last key before any key is added or removed."""
    if top:
        _LAST.clear()
    if isinstance(node, CommentedSeq):
        for item in node:
            mark_trailing(item, top=False)
    elif isinstance(node, CommentedMap):
        for value in node.values():
            mark_trailing(value, top=False)
        if node:
            _LAST[id(node)] = list(node.keys())[-1]


def tidy_comments(node: Any) -> None:
    """Move the comment lines that followed a block to its new end, where keys were appended."""
    if isinstance(node, CommentedSeq):
        for item in node:
            tidy_comments(item)
        return
    if not isinstance(node, CommentedMap):
        return
    for value in node.values():
        tidy_comments(value)
    old_last = _LAST.get(id(node))
    if not node or old_last not in node or old_last == list(node.keys())[-1]:
        return
    value = node[old_last]
    holder = _deepest_last(value) if isinstance(value, (CommentedMap, CommentedSeq)) else (node, old_last)
    entry = holder[0].ca.items.get(holder[1]) if holder else None
    token = entry[2] if entry and len(entry) > 2 else None
    if token is None:
        return
    head, sep, tail = token.value.partition("\n")
    if tail:
        token.value = head + sep
        from copy import copy

        _attach(copy(token), tail, _deepest_last(node))


def pop_key(mapping: Any, key: Any, default: Any = None) -> Any:
    """`mapping.pop(key, default)` that keeps the comments written after the key."""
    if not isinstance(mapping, CommentedMap) or key not in mapping:
        return mapping.pop(key, default) if isinstance(mapping, dict) else default
    value = mapping[key]
    delete_key(mapping, key)
    return value


def carry_comments(removed: Any, onto: Any) -> None:
    """A step that disappears (merged or dropped) hands the comment lines after it on."""
    holder = _deepest_last(removed)
    entry = holder[0].ca.items.get(holder[1]) if holder else None
    token = entry[2] if entry and len(entry) > 2 else None
    if token is None:
        return
    _, _, tail = token.value.partition("\n")
    if tail.strip():
        _attach(token, tail, _deepest_last(onto))
