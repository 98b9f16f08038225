"""`{{ }}` templates: parsing, filters, plain paths and JS-style text rendering.

Parsing happens once per distinct string (cached); rendering decides per expression
whether Python can answer alone (plain paths such as `item`, `inputs.branch`,
`a.b[0]`, literals, `now()`, `uuid()`) or V8 must.  Keeping the common cases out of V8
is what lets a step with only plain paths render in microseconds.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import uuid as _uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from aromcp_workflows.expressions.errors import MISSING, ExpressionError, UnclosedTemplate, UnknownFilter
from aromcp_workflows.expressions.lexer import LexError, Token, find_template_end, tokenize

FILTERS = frozenset({"path_to_key", "json", "length", "default", "raw"})
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*\Z")
_FORBIDDEN_KEYS = frozenset({"__proto__", "constructor", "prototype"})


@dataclass(frozen=True, slots=True)
class Filter:
    name: str
    arg: str | None = None  # JS source of the argument of `default(x)`


@dataclass(frozen=True, slots=True)
class ExprPart:
    """One `{{ ... }}`: the JS expression and the filters after its top-level `|`."""

    source: str
    filters: tuple[Filter, ...] = ()

    @property
    def is_raw(self) -> bool:
        return any(f.name == "raw" for f in self.filters)


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed string: literal text pieces and expression parts, in order.

    `whole` is true when the string is exactly one template (surrounding whitespace
    allowed): such a value keeps the JS type of its expression.
    """

    parts: tuple[str | ExprPart, ...]
    whole: bool

    @property
    def expressions(self) -> tuple[ExprPart, ...]:
        return tuple(p for p in self.parts if isinstance(p, ExprPart))


@lru_cache(maxsize=8192)
def parse_template(text: str) -> Template:
    """Split `text` into literal text and `{{ }}` expressions (cached per string)."""
    parts: list[str | ExprPart] = []
    pos = 0
    while True:
        start = text.find("{{", pos)
        if start < 0:
            break
        try:
            end = find_template_end(text, start + 2)
        except LexError as exc:
            raise UnclosedTemplate(text, "", f"cannot find the closing '}}}}': {exc}", "syntax") from None
        if start > pos:
            parts.append(text[pos:start])
        parts.append(parse_expression(text[start + 2:end]))
        pos = end + 2
    if pos < len(text):
        parts.append(text[pos:])
    exprs = [p for p in parts if isinstance(p, ExprPart)]
    whole = len(exprs) == 1 and all(isinstance(p, ExprPart) or not p.strip() for p in parts)
    return Template(tuple(parts), whole)


@lru_cache(maxsize=8192)
def parse_expression(src: str) -> ExprPart:
    """Split a template body into the JS expression and its filter chain.

    A top-level `|` (not `||`, not inside brackets, strings or template literals) starts a
    filter when a filter name follows; an unknown name after `|` is an error rather than
    a silent bitwise OR, because a misspelt filter is the far likelier intent.
    """
    try:
        tokens = tokenize(src)
    except LexError as exc:
        raise ExpressionError(src, "", str(exc), "syntax") from exc
    depth = 0
    cuts: list[int] = []
    for i, tok in enumerate(tokens):
        if tok.kind != "punct":
            continue
        if tok.text in "([{":
            depth += 1
        elif tok.text in ")]}":
            depth -= 1
        elif tok.text == "|" and depth == 0:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and nxt.kind == "name":
                cuts.append(i)
    if not cuts:
        return ExprPart(src.strip())
    expr = src[: tokens[cuts[0]].start].strip()
    filters: list[Filter] = []
    bounds = cuts + [len(tokens)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        filters.append(_parse_filter(src, tokens[a + 1:b]))
    return ExprPart(expr, tuple(filters))


def _parse_filter(src: str, toks: list[Token]) -> Filter:
    name = toks[0].text
    if name not in FILTERS:
        raise UnknownFilter(src, name, sorted(FILTERS))
    if len(toks) == 1:
        return Filter(name)
    if toks[1].text != "(" or toks[-1].text != ")" or name != "default":
        raise ExpressionError(src, "", f"bad use of filter '{name}'", "syntax")
    return Filter(name, src[toks[1].end:toks[-1].start].strip() or "undefined")


# ---------------------------------------------------------------------------------------
# Plain paths: answered in Python.

class NeedsV8(Exception):
    """The Python fast path cannot answer this exactly like JavaScript would."""


@dataclass(frozen=True, slots=True)
class PlainPath:
    root: str
    steps: tuple[tuple[str | int, bool], ...]  # (key or index, optional-chained)


@lru_cache(maxsize=8192)
def classify(src: str) -> tuple[str, Any]:
    """('literal', value) | ('path', PlainPath) | ('call', 'now'|'uuid') | ('js', None)."""
    s = src.strip()
    if s in ("now()", "uuid()"):
        return "call", s[:-2]
    lit = _literal(s)
    if lit is not _NOT_LITERAL:
        return "literal", lit
    try:
        tokens = tokenize(s)
    except LexError:
        return "js", None
    if not tokens or tokens[0].kind != "name" or not _IDENT.match(tokens[0].text):
        return "js", None
    root = tokens[0].text
    if root in _NON_PATH_ROOTS:
        return "js", None
    steps: list[tuple[str | int, bool]] = []
    i = 1
    while i < len(tokens):
        t = tokens[i]
        optional = t.text == "?."
        if t.text in (".", "?.") and i + 1 < len(tokens) and tokens[i + 1].kind == "name":
            steps.append((tokens[i + 1].text, optional))
            i += 2
            continue
        j = i + 1 if t.text == "[" else (i + 2 if optional and i + 1 < len(tokens)
                                         and tokens[i + 1].text == "[" else -1)
        if j > 0 and j + 1 < len(tokens) and tokens[j + 1].text == "]":
            key = _literal(tokens[j].text)
            if isinstance(key, str) and tokens[j].kind == "str":
                steps.append((key, optional))
                i = j + 2
                continue
            if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
                steps.append((key, optional))
                i = j + 2
                continue
        return "js", None
    return "path", PlainPath(root, tuple(steps))


_NOT_LITERAL = object()
_NON_PATH_ROOTS = frozenset({"true", "false", "null", "undefined", "new", "typeof", "void",
                             "delete", "function", "class", "await", "yield", "NaN",
                             "Infinity"})
_NUM = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")


def _literal(s: str) -> Any:
    if s in ("true", "false"):
        return s == "true"
    if s == "null":
        return None
    if s == "undefined":
        return MISSING
    if _NUM.match(s):
        v = json.loads(s)
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            return int(v)
        return float(v) if isinstance(v, int) and abs(v) > 2**53 else v
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" and "\\" not in s and s[0] not in s[1:-1] and "\n" not in s:
        return s[1:-1]
    return _NOT_LITERAL


def resolve_path(path: PlainPath, scope: Mapping[str, Any]) -> Any:
    """Value of a plain path in `scope`, exactly as JavaScript would see it.

    Raises NeedsV8 where Python's answer could differ from JavaScript's (reading a member
    of null/undefined, string indexing, prototype keys, globals): V8 then answers.
    """
    root = path.root
    if root == "this":
        if not path.steps or not isinstance(path.steps[0][0], str):
            raise NeedsV8
        root, steps = path.steps[0][0], path.steps[1:]
    else:
        steps = path.steps
    if root in _FORBIDDEN_KEYS:
        raise NeedsV8
    value = scope.get(root, MISSING)
    if value is MISSING:
        from aromcp_workflows.expressions.analysis import JS_GLOBALS
        if root in JS_GLOBALS:
            raise NeedsV8
    for key, optional in steps:
        if value is None or value is MISSING:
            if optional:
                return MISSING
            raise NeedsV8  # JS throws a TypeError; let V8 word it
        if isinstance(key, str) and key in _FORBIDDEN_KEYS:
            raise NeedsV8
        if isinstance(value, dict):
            value = value.get(key if isinstance(key, str) else str(key), MISSING)
        elif isinstance(value, list):
            if key == "length":
                value = len(value)
            elif isinstance(key, int):
                value = value[key] if key < len(value) else MISSING
            elif isinstance(key, str) and key.isdigit() and key == str(int(key)):
                value = value[int(key)] if int(key) < len(value) else MISSING
            else:
                raise NeedsV8
        elif isinstance(value, str) and key == "length":
            value = len(value.encode("utf-16-le")) // 2
        else:
            raise NeedsV8
    return value


def call_builtin(name: str) -> str:
    """`now()` and `uuid()` in Python, identical in form to the JS versions."""
    if name == "now":
        return datetime.now(UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")
    return str(_uuid.uuid4())


# ---------------------------------------------------------------------------------------
# Filters and rendering.

def apply_filter(f: Filter, value: Any, arg: Any = MISSING) -> Any:
    """Apply one filter to an evaluated value (the `default` argument already evaluated)."""
    if f.name == "raw":
        return value
    if f.name == "json":
        return MISSING if value is MISSING else to_json(value)
    if f.name == "length":
        if isinstance(value, str):
            return len(value.encode("utf-16-le")) // 2
        if isinstance(value, (list, dict)):
            return len(value)
        return 0 if value is None or value is MISSING else MISSING
    if f.name == "default":
        return arg if value is None or value is MISSING else value
    if f.name == "path_to_key":
        return path_to_key(value)
    raise AssertionError(f.name)


def path_to_key(value: Any) -> str:
    """A file path (or any value) as a key safe inside a dotted state path.

    Every run of characters other than letters, digits, `_` and `-` becomes one `_`:
    `src/app/Button.tsx` → `src_app_Button_tsx`.
    """
    text = to_text(value)
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)


def to_json(value: Any) -> str:
    """Compact JSON, like JSON.stringify."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                      default=_json_default)


def _json_default(value: Any) -> Any:
    if value is MISSING:
        return None
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def to_text(value: Any) -> str:
    """Render a value inside text as JavaScript's String() would; objects as JSON."""
    if value is None or value is MISSING:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    return to_json(value)


def js_number(x: float) -> str:
    """Number::toString of ECMAScript for a float (shortest round-trip digits)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 2**53:
        return str(int(x))
    sign = "-" if x < 0 else ""
    mant, _, exp = repr(abs(x)).partition("e")
    int_part, _, frac = mant.partition(".")
    digits = (int_part + frac).lstrip("0")
    # value = 0.<digits> * 10**n
    n = len(int_part.lstrip("0")) if int_part.strip("0") else -(len(frac) - len(frac.lstrip("0")))
    n += int(exp) if exp else 0
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        body = digits[0] + ("." + digits[1:] if k > 1 else "") + ("e+" if e >= 0 else "e-") \
            + str(abs(e))
    return sign + body


def shell_quote(text: str) -> str:
    """POSIX shell quoting of one inserted value (empty text becomes '')."""
    return shlex.quote(text)
