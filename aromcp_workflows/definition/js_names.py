"""Which computed fields a transform reads, without running it.

Validation must find the cycles the state store will refuse at start, so it asks the
same free-name analysis the store uses (`expressions.reads_of`) and applies the same
rules: a free name that is a computed field is a dependency (even when the transform
also declares it locally: the run-time analysis counts generously, so that no value is
ever stale), `this.x`/`computed.x` read `x`, and a bare `this`/`computed` reads them all.
Without the expression package a local tokenizer gives a close answer.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass


@dataclass(frozen=True)
class TransformReads:
    """The computed fields a transform reads, or why its source cannot be analysed."""

    fields: frozenset[str]
    error: str | None = None


def computed_reads(source: str, computed: Collection[str]) -> TransformReads:
    """The computed fields `source` reads, by the rules of the state store's graph."""
    try:
        from aromcp_workflows.expressions import ExpressionError, reads_of
    except ImportError:  # the definition layer also works on its own
        names = js_free_names(source)
        return TransformReads(frozenset(n for n in names if n in computed))
    try:
        reads = reads_of(source)
    except ExpressionError as exc:
        return TransformReads(frozenset(), str(exc.js_message or exc))
    found: set[str] = set()
    for name in reads.names:
        if name in ("this", "computed"):
            keys = reads.keys_of(name)
            found |= set(computed) if keys is None else {k for k in keys if k in computed}
        elif name in computed:
            found.add(name)
    return TransformReads(frozenset(found))


_JS_TOKEN = re.compile(r"""
    (?P<skip>//[^\n]*|/\*.*?\*/|'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*")
  | (?P<template>`(?:\\.|[^`\\])*`)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<punct>\?\.|=>|\.\.\.|\S)
""", re.DOTALL | re.VERBOSE)
_DECLARES = frozenset({"const", "let", "var", "function"})
_KEYWORDS = frozenset(
    ["async", "await", "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do", "else", "false", "finally", "for", "function", "if", "in", "instanceof", "let", "new", "null", "of", "return", "switch", "this", "throw", "true", "try", "typeof", "undefined", "var", "void", "while", "yield"])


def js_free_names(source: str) -> set[str]:
    """A careful approximation of a JS transform's free names, without a JS parser.

    Over-counting would report cycles that do not exist, so this leaves out what is surely
    not a read of state: property names (`input.files`), object keys (`{ files: x }`),
    strings, comments, and names the transform declares (`const files`, `files => ...`).
    """
    tokens: list[tuple[str, str]] = []
    for match in _JS_TOKEN.finditer(source):
        kind = match.lastgroup or "punct"
        if kind == "template":  # only the code inside ${ ... } can read names
            for code in re.findall(r"\$\{(.*?)\}", match.group()):
                tokens.append(("code", code))
        elif kind != "skip":
            tokens.append((kind, match.group()))
    names: set[str] = set()
    local: set[str] = set()
    for index, (kind, text) in enumerate(tokens):
        before = tokens[index - 1][1] if index else ""
        after = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if kind == "code":
            names |= js_free_names(text)
        elif kind == "name" and before == "." and index > 1 and tokens[index - 2][1] == "this":
            names.add(text)  # `this.x` is the flattened `x`
        elif kind != "name" or before in (".", "?.") or text in _KEYWORDS:
            if text == "=>" and before == ")":
                local |= _arrow_params(tokens, index - 1)
        elif before in _DECLARES or after == "=>":
            local.add(text)
        elif after == ":" and before in ("{", ","):
            continue
        else:
            names.add(text)
    return names - local


def _arrow_params(tokens: list[tuple[str, str]], close: int) -> set[str]:
    depth, index, params = 0, close, set()
    while index >= 0:
        kind, text = tokens[index]
        depth += text == ")"
        depth -= text == "("
        if kind == "name" and depth == 1:
            params.add(text)
        if depth == 0:
            break
        index -= 1
    return params
