"""The simple JavaScript expressions Python evaluates itself: parsing them into a small tree.

A loop's condition (`n < inputs.n`), a guard (`!passed && attempts < 3`) or a transform
(`inputs.n - input`) is the same handful of operators over JSON values, evaluated again on
every iteration.  Sending each to V8 costs a crossing (~0.2 ms, more under load), which was
most of what a server-side loop costs.  This module recognises the subset that Python can
evaluate with exactly JavaScript's result (`simple_eval` says how, and hands V8 anything
whose operands fall outside it); anything else — a call, a function, a regex, a template
literal, an assignment, an operator not listed here — parses to None and goes to V8.

Grammar, loosest first: `a ? b : c`; `??`; `||`; `&&`; `=== !== == !=`; `< <= > >=`;
`+ -`; `* / %`; unary `! - typeof`; members `.name`, `?.name`, `[expr]`, `?.[expr]`,
`.length`, and the calls `.includes(x)`, `.startsWith(x)`, `.endsWith(x)`; literals
(decimal numbers, quoted strings with simple escapes, true, false, null, undefined),
names, parentheses.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from aromcp_workflows.expressions.errors import MISSING
from aromcp_workflows.expressions.lexer import LexError, Token, tokenize

BINARY_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"??"}), frozenset({"||"}), frozenset({"&&"}),
    frozenset({"===", "!==", "==", "!="}), frozenset({"<", "<=", ">", ">="}),
    frozenset({"+", "-"}), frozenset({"*", "/", "%"}),
)
METHODS = frozenset({"includes", "startsWith", "endsWith"})
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f",
            "v": "\v", "0": "\0"}
_KEYWORDS = frozenset({"true", "false", "null", "undefined", "typeof", "new", "void", "delete", "in",
                       "instanceof", "function", "class", "this", "await", "yield", "async", "super",
                       "import", "let", "var", "const", "return", "if", "else", "of"})


@dataclass(frozen=True, slots=True)
class Node:
    """`op` says what the node is: "lit" (value), "name" (name), "member" (object, key
    node, optional), "call" (object, method, argument, optional), "unary" (op, operand),
    "binary" (op, left, right), "cond" (test, then, else), "group" (a parenthesised
    node); `args` are its parts in that order."""

    op: str
    args: tuple[Any, ...]


class _Unsupported(Exception):
    """Outside the subset (or not valid JavaScript): V8 evaluates it."""


@lru_cache(maxsize=8192)
def parse_simple(source: str) -> Node | None:
    """The tree of `source` when it lies inside the subset, else None."""
    try:
        tokens = tokenize(source)
    except LexError:
        return None
    if not tokens:
        return None
    parser = _Parser(tokens)
    try:
        node = parser.conditional()
    except (_Unsupported, IndexError):
        return None
    return node if parser.at_end() else None


class _Parser:
    """Recursive descent over the lexer's tokens; raises `_Unsupported` on anything else."""

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.i = 0

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def peek(self) -> str | None:
        return None if self.at_end() else self.tokens[self.i].text

    def take(self, text: str | None = None) -> Token:
        token = self.tokens[self.i]
        if text is not None and token.text != text:
            raise _Unsupported
        self.i += 1
        return token

    def conditional(self) -> Node:
        test = self.binary(0)
        if self.peek() != "?":
            return test
        self.take("?")
        then = self.conditional()
        self.take(":")
        return Node("cond", (test, then, self.conditional()))

    def binary(self, level: int) -> Node:
        if level == len(BINARY_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in BINARY_LEVELS[level]:
            op = self.take().text
            left = Node("binary", (op, left, self.binary(level + 1)))
        if level <= 2:  # JavaScript refuses `a ?? b || c` without parentheses: so does V8's check
            _refuse_mixed_nullish(left)
        return left

    def unary(self) -> Node:
        if self.peek() in ("!", "-", "typeof"):
            op = self.take().text
            return Node("unary", (op, self.unary()))
        return self.postfix(self.primary())

    def postfix(self, node: Node) -> Node:
        while self.peek() in (".", "?.", "["):
            optional = self.take().text == "?."
            if self.tokens[self.i - 1].text == "[" or (optional and self.peek() == "["):
                if optional:
                    self.take("[")
                key = self.conditional()
                self.take("]")
                node = Node("member", (node, key, optional))
                continue
            name = self.take()
            if name.kind != "name":
                raise _Unsupported
            if self.peek() == "(":
                node = self.call(node, name.text, optional)
            else:
                node = Node("member", (node, Node("lit", (name.text,)), optional))
        if self.peek() == "(":
            raise _Unsupported  # calling anything but the methods above
        return node

    def call(self, target: Node, method: str, optional: bool) -> Node:
        if method not in METHODS:
            raise _Unsupported
        self.take("(")
        argument = self.conditional()
        self.take(")")
        return Node("call", (target, method, argument, optional))

    def primary(self) -> Node:
        token = self.take()
        if token.text == "(":
            inner = self.conditional()
            self.take(")")
            return Node("group", (inner,))
        if token.kind == "num":
            return Node("lit", (_number(token.text),))
        if token.kind == "str":
            return Node("lit", (_string(token.text),))
        if token.kind != "name":
            raise _Unsupported
        if token.text in ("true", "false"):
            return Node("lit", (token.text == "true",))
        if token.text in ("null", "undefined"):
            return Node("lit", (None if token.text == "null" else MISSING,))
        if token.text in _KEYWORDS:
            raise _Unsupported
        return Node("name", (token.text,))


def _refuse_mixed_nullish(node: Node) -> None:
    """`??` next to `||`/`&&` without parentheses is a syntax error in JavaScript."""
    if node.op != "binary":
        return
    op, left, right = node.args
    family = {"??"} if op == "??" else ({"||", "&&"} if op in ("||", "&&") else set())
    for side in (left, right):
        if side.op == "binary" and family and side.args[0] in ({"||", "&&", "??"} - family):
            raise _Unsupported


def _number(text: str) -> int | float:
    """A decimal literal; hex, octal, binary, BigInt and separators go to V8."""
    if not text or not (text[0].isdigit() or text[0] == ".") or any(c in text for c in "xXoObBn_"):
        raise _Unsupported
    if len(text) > 1 and text[0] == "0" and text[1].isdigit():
        raise _Unsupported  # legacy octal
    value = float(text)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _string(text: str) -> str:
    """A quoted literal whose escapes are the simple ones (no \\u, \\x, line continuations)."""
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if nxt not in _ESCAPES or (nxt == "0" and i + 2 < len(body) and body[i + 2].isdigit()):
                raise _Unsupported
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)
