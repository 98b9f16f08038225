"""Free-name analysis: which outside values a JavaScript expression or body reads.

Two users need this.  The engine sends V8 only the values an expression reads (sending a
whole 10,000-item state for `files.length > 0` would dominate the cost), and the state
store turns the names a transform reads into dependencies so that no computed value is
ever stale.  The analysis therefore errs on the side of *more* names: a locally declared
`f` in `input.filter(f => ...)` is reported too.  That costs at most an extra value sent
or an extra recompute; missing a name would be a correctness bug.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.expressions.lexer import Token, tokenize

# Words that are never a reference to an outside value.  Contextual keywords (`of`,
# `async`, `get`, `set`, `let`, ...) are included: treating them as parameters would break
# the syntax they take part in, and nobody names a state field `async`.
JS_KEYWORDS = frozenset([
    "break", "case", "catch", "class", "const", "continue", "debugger", "default", "delete", "do", "else",
    "export", "extends", "finally", "for", "function", "if", "import", "in", "instanceof", "new", "return",
    "super", "switch", "throw", "try", "typeof", "var", "void", "while", "with", "yield", "let", "static",
    "await", "async", "of", "get", "set", "true", "false", "null", "this", "arguments", "enum", "implements",
    "interface", "package", "private", "protected", "public", "target", "meta",
])

# Globals of the bare V8 context (Object.getOwnPropertyNames(globalThis)) plus our own
# helpers.  A free name from this set is left to the global unless the scope has a value
# of that name, so `Math.max(...)` works and a state field called `escape` still does.
JS_GLOBALS = frozenset([
    "Object", "Function", "Array", "Number", "parseFloat", "parseInt", "Infinity", "NaN", "undefined",
    "Boolean", "String", "Symbol", "Date", "Promise", "RegExp", "Error", "AggregateError", "EvalError",
    "RangeError", "ReferenceError", "SyntaxError", "TypeError", "URIError", "globalThis", "JSON", "Math",
    "Intl", "ArrayBuffer", "Atomics", "Uint8Array", "Int8Array", "Uint16Array", "Int16Array", "Uint32Array",
    "Int32Array", "BigUint64Array", "BigInt64Array", "Uint8ClampedArray", "Float32Array", "Float64Array",
    "DataView", "Map", "BigInt", "Set", "Iterator", "WeakMap", "WeakSet", "Proxy", "Reflect",
    "FinalizationRegistry", "WeakRef", "decodeURI", "decodeURIComponent", "encodeURI", "encodeURIComponent",
    "escape", "unescape", "eval", "isFinite", "isNaN", "console", "Temporal", "SuppressedError",
    "DisposableStack", "AsyncDisposableStack", "Float16Array", "SharedArrayBuffer", "WebAssembly",
    "setTimeout", "clearTimeout", "now", "uuid", "path_to_key",
])


@dataclass(frozen=True, slots=True)
class Reads:
    """What an expression reads from outside.

    `names`: free identifiers (keywords removed; JS globals kept only in `globals_used`).
    `members[n]`: the static first-level keys read as `n.key`, `n?.key` or `n["key"]`,
    present only when *every* use of `n` has such a key (so a partial object with just
    those keys behaves exactly like the whole value).  `this` is reported as the name
    `this` when used.
    """

    names: frozenset[str]
    members: dict[str, frozenset[str]] = field(default_factory=dict)
    globals_used: frozenset[str] = frozenset()
    bound: frozenset[str] = frozenset()  # declared somewhere in the source (params, const..)

    @property
    def likely_free(self) -> frozenset[str]:
        """Names minus those declared in the source: for display, not for dependencies."""
        return self.names - self.bound

    def keys_of(self, name: str) -> frozenset[str] | None:
        """The static keys read from `name`, or None when the whole value is needed."""
        return self.members.get(name)


def _static_key(tokens: list[Token], i: int) -> tuple[str | None, int]:
    """If tokens[i:] start a static member access, return (key, tokens consumed)."""
    if i >= len(tokens):
        return None, 0
    tok = tokens[i]
    if tok.kind == "punct" and tok.text in (".", "?.") and i + 1 < len(tokens):
        nxt = tokens[i + 1]
        if nxt.kind == "name":
            return nxt.text, 2
    if tok.kind == "punct" and tok.text in ("[", "?.") :
        j = i + 1 if tok.text == "[" else i + 2
        if tok.text == "?." and not (i + 1 < len(tokens) and tokens[i + 1].text == "["):
            return None, 0
        if j + 1 < len(tokens) and tokens[j + 1].text == "]":
            key_tok = tokens[j]
            if key_tok.kind == "str":
                return _unquote(key_tok.text), j + 2 - i
            if key_tok.kind == "num" and key_tok.text.isdigit():
                return str(int(key_tok.text)), j + 2 - i
    return None, 0


def _unquote(literal: str) -> str | None:
    body = literal[1:-1]
    if "\\" in body:
        return None  # escapes: let V8 decide, treat as a dynamic access
    return body


def _analyse(tokens: list[Token], names: set[str], members: dict[str, set[str] | None],
             globals_used: set[str]) -> None:
    # Bracket stack to know whether `name :` is an object key.
    stack: list[str] = []
    prev: Token | None = None
    for idx, tok in enumerate(tokens):
        if tok.kind == "tmpl":
            for part in tok.inner:
                _analyse(list(part), names, members, globals_used)
        if tok.kind == "punct":
            if tok.text in "([{":
                stack.append(tok.text)
            elif tok.text in ")]}" and stack:
                stack.pop()
        if tok.kind == "name" and not (
            prev is not None and prev.kind == "punct" and prev.text in (".", "?.")
        ):
            word = tok.text
            nxt = tokens[idx + 1] if idx + 1 < len(tokens) else None
            is_key = (
                nxt is not None and nxt.text == ":" and stack and stack[-1] == "{"
                and prev is not None and prev.text in ("{", ",")
            )
            if word == "this" or (word not in JS_KEYWORDS and not is_key):
                if word in JS_GLOBALS:
                    globals_used.add(word)
                else:
                    names.add(word)
                key, used = _static_key(tokens, idx + 1)
                after = tokens[idx + 1 + used] if idx + 1 + used < len(tokens) else None
                if after is not None and ((after.text in ("(", "?.") and after.kind == "punct")
                                          or after.kind == "tmpl"):
                    key = None  # a method call (obj.hasOwnProperty(k)) needs the whole value
                if key is None:
                    members[word] = None
                elif word not in members:
                    members[word] = {key}
                elif members[word] is not None:
                    members[word].add(key)  # type: ignore[union-attr]
        prev = tok


def _bound(tokens: list[Token], out: set[str]) -> None:
    """Names in declaration position: const/let/var, function and arrow parameters."""
    for i, tok in enumerate(tokens):
        for part in tok.inner:
            _bound(list(part), out)
        if tok.kind == "name" and tok.text in ("const", "let", "var", "function", "catch"):
            j = i + 1
            if j < len(tokens) and tokens[j].kind == "name":
                out.add(tokens[j].text)
                j += 1
            if j < len(tokens) and tokens[j].text in ("(", "{", "["):
                depth = 0
                for t in tokens[j:]:
                    if t.text in ("(", "{", "["):
                        depth += 1
                    elif t.text in (")", "}", "]"):
                        depth -= 1
                        if depth == 0:
                            break
                    elif t.kind == "name" and depth == 1:
                        out.add(t.text)
        if tok.text == "=>" and i > 0:
            prev = tokens[i - 1]
            if prev.kind == "name":
                out.add(prev.text)
            elif prev.text == ")":
                depth = 0
                for t in reversed(tokens[:i]):
                    if t.text in (")", "}", "]"):
                        depth += 1
                    elif t.text in ("(", "{", "["):
                        depth -= 1
                        if depth == 0:
                            break
                    elif t.kind == "name" and depth >= 1:
                        out.add(t.text)


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness of a JSON-like value (`[]` and `{}` are true, NaN false).

    Conditions must use this rather than Python's bool(): `{{ files }}` with an empty
    list is truthy in JS.
    """
    from aromcp_workflows.expressions.errors import MISSING

    if value is None or value is MISSING or value is False:
        return False
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


def analyse(src: str) -> Reads:
    """Free names of `src` (an expression or a function body) and their static keys."""
    tokens = tokenize(src)
    names: set[str] = set()
    members: dict[str, set[str] | None] = {}
    globals_used: set[str] = set()
    bound: set[str] = set()
    _analyse(tokens, names, members, globals_used)
    _bound(tokens, bound)
    return Reads(
        names=frozenset(names),
        members={k: frozenset(v) for k, v in members.items() if v is not None},
        globals_used=frozenset(globals_used),
        bound=frozenset(bound),
    )
