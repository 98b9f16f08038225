"""A small JavaScript tokenizer: just enough JS to find names and template ends.

Why not a real parser: we only need to know (1) where a `{{ ... }}` template ends, which
means telling a `}}` that closes the template from one inside a string, template literal,
regex or object literal, and (2) which identifiers an expression reads.  V8 does the real
parsing later; anything this lexer gets slightly wrong (an exotic regex, say) can only make
us send V8 one name too many, never run different code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["name", "num", "str", "tmpl", "regex", "punct"]

# After these tokens a `/` starts a regex literal rather than a division.
_REGEX_AFTER_KEYWORDS = frozenset(
    {"return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw",
     "case", "do", "else", "yield", "await"}
)
_PUNCTS = (
    ">>>=", "...", "===", "!==", "**=", "<<=", ">>=", ">>>", "&&=", "||=", "??=",
    "=>", "==", "!=", "<=", ">=", "&&", "||", "??", "?.", "++", "--", "+=", "-=", "*=",
    "/=", "%=", "&=", "|=", "^=", "**", "<<", ">>",
)


@dataclass(frozen=True, slots=True)
class Token:
    """One lexical token; `inner` holds the tokens of each `${...}` of a template literal."""

    kind: TokenKind
    text: str
    start: int
    end: int
    inner: tuple[tuple[Token, ...], ...] = ()


class LexError(ValueError):
    """The text is not lexically valid JavaScript (unterminated string, comment, ...)."""


def _is_ident_start(ch: str) -> bool:
    return ch.isalpha() or ch in "_$" or ord(ch) > 127


def _is_ident_part(ch: str) -> bool:
    return ch.isalnum() or ch in "_$" or ord(ch) > 127


def _regex_allowed(prev: Token | None) -> bool:
    if prev is None:
        return True
    if prev.kind == "name":
        return prev.text in _REGEX_AFTER_KEYWORDS
    if prev.kind in ("num", "str", "tmpl", "regex"):
        return False
    return prev.text not in (")", "]", "}")


def _skip_string(src: str, i: int, quote: str) -> int:
    """Return the index just after the closing quote of the string opened at `i`."""
    n = len(src)
    j = i + 1
    while j < n:
        ch = src[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j + 1
        if ch == "\n":
            break
        j += 1
    raise LexError(f"unterminated string starting at offset {i}")


def _skip_regex(src: str, i: int) -> int:
    n = len(src)
    j = i + 1
    in_class = False
    while j < n:
        ch = src[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "\n":
            break
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
        elif ch == "/":
            j += 1
            while j < n and _is_ident_part(src[j]):
                j += 1
            return j
        j += 1
    raise LexError(f"unterminated regular expression starting at offset {i}")


def _lex_template(src: str, i: int) -> tuple[int, tuple[tuple[Token, ...], ...]]:
    """Lex a template literal opened at `i`; return its end and the tokens of each `${}`."""
    n = len(src)
    j = i + 1
    parts: list[tuple[Token, ...]] = []
    while j < n:
        ch = src[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "`":
            return j + 1, tuple(parts)
        if ch == "$" and j + 1 < n and src[j + 1] == "{":
            toks: list[Token] = []
            end = _lex_into(src, j + 2, toks, stop_at_brace=True)
            parts.append(tuple(toks))
            j = end + 1
            continue
        j += 1
    raise LexError(f"unterminated template literal starting at offset {i}")


def _lex_into(src: str, i: int, out: list[Token], *, stop_at_brace: bool = False,
              stop_at_template_end: bool = False) -> int:
    """Tokenize from `i`, appending to `out`.

    With `stop_at_brace`, stop at the `}` that closes an already-open `${` (returns its
    index).  With `stop_at_template_end`, stop at a `}}` at bracket depth 0 (returns the
    index of its first `}`).  Otherwise lex to the end of `src` and return `len(src)`.
    """
    n = len(src)
    depth = 0
    prev: Token | None = None
    while i < n:
        ch = src[i]
        if ch in " \t\r\n\f\v\u00a0\ufeff\u2028\u2029":
            i += 1
            continue
        if ch == "/" and i + 1 < n and src[i + 1] == "/":
            nl = src.find("\n", i)
            i = n if nl < 0 else nl
            continue
        if ch == "/" and i + 1 < n and src[i + 1] == "*":
            close = src.find("*/", i + 2)
            if close < 0:
                raise LexError(f"unterminated comment starting at offset {i}")
            i = close + 2
            continue
        if ch == "}" and depth == 0:
            if stop_at_brace:
                return i
            if stop_at_template_end and i + 1 < n and src[i + 1] == "}":
                return i
        if stop_at_template_end and depth == 0 and ch == "}" and not (
            i + 1 < n and src[i + 1] == "}"
        ):
            raise LexError(f"unbalanced '}}' at offset {i}")
        start = i
        if _is_ident_start(ch):
            i += 1
            while i < n and _is_ident_part(src[i]):
                i += 1
            tok = Token("name", src[start:i], start, i)
        elif ch.isdigit() or (ch == "." and i + 1 < n and src[i + 1].isdigit()):
            i += 1
            while i < n and (_is_ident_part(src[i]) or src[i] == "." or (
                src[i] in "+-" and src[i - 1] in "eE" and not src[start:i].startswith(("0x", "0X"))
            )):
                i += 1
            tok = Token("num", src[start:i], start, i)
        elif ch in "'\"":
            i = _skip_string(src, i, ch)
            tok = Token("str", src[start:i], start, i)
        elif ch == "`":
            i, parts = _lex_template(src, i)
            tok = Token("tmpl", src[start:i], start, i, parts)
        elif ch == "/" and _regex_allowed(prev):
            i = _skip_regex(src, i)
            tok = Token("regex", src[start:i], start, i)
        else:
            for p in _PUNCTS:
                if src.startswith(p, i):
                    # `?.5` is a conditional followed by a number, not optional chaining.
                    if p == "?." and i + 2 < n and src[i + 2].isdigit():
                        continue
                    i += len(p)
                    break
            else:
                i += 1
            tok = Token("punct", src[start:i], start, i)
            if tok.text in "([{":
                depth += 1
            elif tok.text in ")]}":
                depth -= 1
                if depth < 0:
                    raise LexError(f"unbalanced {tok.text!r} at offset {start}")
        out.append(tok)
        prev = tok
    if stop_at_brace or stop_at_template_end:
        raise LexError("unterminated '${' or '{{'")
    return n


def tokenize(src: str) -> list[Token]:
    """Tokenize a whole JavaScript expression or function body."""
    out: list[Token] = []
    _lex_into(src, 0, out)
    return out


def find_template_end(text: str, start: int) -> int:
    """Index of the `}}` closing a template whose expression starts at `start`.

    Raises LexError when there is none; a `}}` inside a string, template literal, regex,
    comment or a nested object literal does not count.
    """
    return _lex_into(text, start, [], stop_at_template_end=True)


def iter_tokens(tokens: list[Token] | tuple[Token, ...]) -> Iterator[Token]:
    """All tokens in source order, descending into `${...}` of template literals."""
    for tok in tokens:
        yield tok
        for part in tok.inner:
            yield from iter_tokens(part)
