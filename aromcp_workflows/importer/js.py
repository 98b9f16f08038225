"""Renaming variables inside AroMCP's JavaScript: expressions, `{{ }}` templates, transforms.

AroMCP and this project both evaluate JavaScript, but they put different names in scope
(AroMCP puts workflow inputs at the top level, calls the foreach variable whatever
`variable_name` says, and keeps loop values under `loop.` or in `state.loop_item`).  The
importer therefore rewrites *names*, never code: it tokenizes with the project's own
JavaScript lexer and replaces identifiers that are read (not object keys, not members,
not parameters of an arrow function declared in the same expression).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aromcp_workflows.expressions import LexError, Token, find_template_end, tokenize

_BINDERS = frozenset({"const", "let", "var", "function", "catch"})


@dataclass
class Renames:
    """What to rename: bare names, `root.member` pairs (member `*` = any), whole roots."""

    bare: dict[str, str] = field(default_factory=dict)
    member: dict[tuple[str, str], str] = field(default_factory=dict)
    root: dict[str, str] = field(default_factory=dict)

    def merged(self, other: Renames) -> Renames:
        """These renames with `other`'s on top (an inner scope wins)."""
        return Renames({**self.bare, **other.bare}, {**self.member, **other.member},
                       {**self.root, **other.root})


def _bound_names(tokens: list[Token]) -> set[str]:
    """Names the expression binds itself (arrow parameters, const/let/var): never renamed."""
    bound: set[str] = set()
    for i, tok in enumerate(tokens):
        if tok.kind == "punct" and tok.text == "=>" and i > 0:
            prev = tokens[i - 1]
            if prev.kind == "name":
                bound.add(prev.text)
            elif prev.text == ")":
                bound |= _names_in_group(tokens, i - 1)
        elif tok.kind == "name" and tok.text in _BINDERS:
            bound |= _declared(tokens[i + 1:], single=tok.text in ("function", "catch"))
    return bound


def _declared(rest: list[Token], *, single: bool) -> set[str]:
    """Names declared after const/let/var (destructuring included) up to `=`, `of`, `in`."""
    names: set[str] = set()
    for tok in rest:
        if tok.text in ("=", ";", "of", "in", ")") or (single and names):
            break
        if tok.kind == "name":
            names.add(tok.text)
    return names


def _names_in_group(tokens: list[Token], close: int) -> set[str]:
    """The names between the `(` matching tokens[close] and it (arrow parameter lists)."""
    depth, names = 0, set()
    for j in range(close, -1, -1):
        text = tokens[j].text
        if text in (")", "]", "}"):
            depth += 1
        elif text in ("(", "[", "{"):
            depth -= 1
            if depth == 0:
                break
        elif tokens[j].kind == "name":
            names.add(text)
    return names


def _replacement(tokens: list[Token], i: int, renames: Renames, bound: set[str]) -> tuple[int, str] | None:
    """(index of the last token replaced, new text) for the name at i, or None."""
    tok = tokens[i]
    prev = tokens[i - 1] if i > 0 else None
    nxt = tokens[i + 1] if i + 1 < len(tokens) else None
    if tok.text in bound or (prev is not None and prev.kind == "punct" and prev.text in (".", "?.")):
        return None
    if nxt is not None and nxt.text == ":" and (prev is None or prev.text in ("{", ",")):
        return None  # an object key
    if nxt is not None and nxt.text in (".", "?.") and i + 2 < len(tokens) and tokens[i + 2].kind == "name":
        member = tokens[i + 2].text
        new = renames.member.get((tok.text, member)) or renames.member.get((tok.text, "*"))
        if new is not None:
            return i + 2, new
    if tok.text in renames.root:
        return i, renames.root[tok.text]
    if tok.text in renames.bare:
        return i, renames.bare[tok.text]
    return None


def _edits(tokens: list[Token] | tuple[Token, ...], renames: Renames, bound: set[str]) -> list[tuple[int, int, str]]:
    toks = list(tokens)
    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        for part in tok.inner:
            edits += _edits(part, renames, bound)
        found = _replacement(toks, i, renames, bound) if tok.kind == "name" else None
        if found is not None:
            last, text = found
            edits.append((tok.start, toks[last].end, text))
            i = last
        i += 1
    return edits


def rewrite_expression(src: str, renames: Renames) -> str:
    """`src` with the renamed identifiers replaced; unchanged when it does not tokenize."""
    try:
        tokens = tokenize(src)
    except LexError:
        return src
    bound = _bound_names(tokens)
    out = src
    for start, end, text in sorted(_edits(tokens, renames, bound), reverse=True):
        out = out[:start] + text + out[end:]
    return out


def map_templates(text: str, change: Callable[[str], str]) -> str:
    """`text` with the expression of every `{{ ... }}` passed through `change`."""
    out, pos = [], 0
    while True:
        start = text.find("{{", pos)
        if start < 0:
            out.append(text[pos:])
            return "".join(out)
        try:
            end = find_template_end(text, start + 2)
        except LexError:
            out.append(text[pos:])
            return "".join(out)
        out.append(text[pos:start + 2])
        out.append(change(text[start + 2:end]))
        out.append("}}")
        pos = end + 2


def rewrite_templates(text: str, renames: Renames) -> str:
    """Rename inside every template of a text value (text outside templates is kept)."""
    return map_templates(text, lambda expr: rewrite_expression(expr, renames))


def has_template(text: str) -> bool:
    return "{{" in text and "}}" in text


def add_raw_filter(expr: str) -> str:
    """`expr | raw` unless it already ends with the `raw` filter (keeps its spacing)."""
    body = expr.rstrip()
    if body.replace(" ", "").endswith("|raw"):
        return expr
    return f"{body} | raw{expr[len(body):]}"
