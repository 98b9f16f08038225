"""Which state names a computed field's transform reads, without running it.

Validation needs a transform's dependencies to find cycles before anything runs, and the
definition layer stays free of the expression engine.  A false cycle would reject a
valid workflow, so this analysis leaves out names the transform declares itself
(`const total`, `files => ...`), unlike a run-time analysis that may safely over-count.
"""

from __future__ import annotations

import re


def transform_reads(source: str) -> set[str]:
    """Names a transform may read from the flattened view (for dependency and cycle checks)."""
    return js_free_names(source)


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
