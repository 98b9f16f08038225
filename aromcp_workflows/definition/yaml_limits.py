"""Bounds on a YAML file before it is built into Python data: size, nesting, aliases, tags.

A workflow file is small, plain data.  Without bounds, one file could stall or crash every
`workflow_list`: a 480-byte alias bomb ("billion laughs") expands to gigabytes when copied
into plain values, a few thousand nested `[` make the parser crawl and then raise
RecursionError, a 50 MB file takes most of a minute, and a custom tag (`!foo`,
`!!python/object`) makes the constructor fail in ways that are not YAML errors.

The check walks the parser's *events* (the parser is a state machine: no recursion), and
stops at the first bound crossed, so a hostile file costs at most the bound's worth of work.
It counts nodes as they would be after every alias is expanded, so the expansion is
refused before anything is copied.  Each bound is an environment variable (defaults below,
documented in docs/security.md).
"""

from __future__ import annotations

import io
import os
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem

MAX_BYTES = ("AROMCP_MAX_WORKFLOW_BYTES", 1_000_000)
MAX_DEPTH = ("AROMCP_MAX_YAML_DEPTH", 64)
MAX_NODES = ("AROMCP_MAX_YAML_NODES", 200_000)
_STANDARD_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq"))


def limit(setting: tuple[str, int]) -> int:
    """A bound's value: its environment variable when set to a positive integer, else the default."""
    name, default = setting
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


def check_size(size: int, file: str | None) -> None:
    """Refuse a file larger than AROMCP_MAX_WORKFLOW_BYTES before reading or parsing it."""
    bound = limit(MAX_BYTES)
    if size > bound:
        raise DefinitionError([DefinitionProblem(
            f"the workflow file is {size:,} bytes, more than the limit of {bound:,}; split it "
            f"(imports, include_workflow) or raise {MAX_BYTES[0]}", file)])


def check_events(text: str, file: str | None) -> None:
    """Refuse a YAML stream that nests too deeply, expands too far, or uses custom tags.

    YAML syntax errors are left to the real parse, which words them for the author.
    """
    check_size(len(text), file)
    depth_bound, node_bound = limit(MAX_DEPTH), limit(MAX_NODES)
    sizes: dict[str, int] = {}  # anchor → expanded node count of its node
    open_anchors: list[tuple[str | None, int]] = []  # per open collection: (anchor, count at start)
    count = 0
    try:
        for event in YAML(typ="rt").parse(io.StringIO(text)):
            kind = type(event).__name__
            if kind in ("MappingStartEvent", "SequenceStartEvent", "ScalarEvent"):
                _check_tag(event, file)
                count += 1
                if kind == "ScalarEvent":
                    if event.anchor:
                        sizes[event.anchor] = 1
                else:
                    open_anchors.append((event.anchor, count))
                    if len(open_anchors) > depth_bound:
                        raise _problem(event, file, f"the YAML nests deeper than {depth_bound} levels; "
                                       f"flatten it or raise {MAX_DEPTH[0]}")
            elif kind in ("MappingEndEvent", "SequenceEndEvent"):
                anchor, start = open_anchors.pop()
                if anchor:
                    sizes[anchor] = count - start + 1
            elif kind == "AliasEvent":
                count += _alias_size(event, sizes, open_anchors, file)
            if count > node_bound:
                raise _problem(event, file, f"the YAML expands to more than {node_bound:,} values (aliases "
                               f"included); use fewer or smaller '*alias' copies, or raise {MAX_NODES[0]}")
    except YAMLError:
        return  # a syntax error: the parse proper reports it with its position


def _alias_size(event: Any, sizes: dict[str, int], open_anchors: list[tuple[str | None, int]],
                file: str | None) -> int:
    anchor = event.anchor
    if any(name == anchor for name, _ in open_anchors):
        raise _problem(event, file, f"the alias '*{anchor}' sits inside the node it names, which would "
                       "repeat forever; copy the values instead")
    return sizes.get(anchor, 1)  # an unknown anchor is a syntax error the parse reports


def _check_tag(event: Any, file: str | None) -> None:
    tag = event.tag
    if tag is None:
        return
    text = str(getattr(tag, "value", tag))
    if text not in _STANDARD_TAGS:
        raise _problem(event, file, f"the YAML tag {text[:80]!r} is not allowed: a workflow is plain data "
                       "(strings, numbers, booleans, null, lists, mappings); remove the tag")


def _problem(event: Any, file: str | None, message: str) -> DefinitionError:
    mark = event.start_mark
    return DefinitionError([DefinitionProblem(message, file, mark.line + 1, mark.column + 1)])
