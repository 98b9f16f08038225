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
    depth = 0
    prev: Token | None = None
    while (i := _skip_trivia(src, i)) < len(src):
        if depth == 0 and src[i] == "}" and _ends_here(src, i, stop_at_brace, stop_at_template_end):
            return i
        tok = _token(src, i, prev)
        if tok.kind == "punct":
            depth = _nesting(tok, depth)
        out.append(tok)
        prev, i = tok, tok.end
    if stop_at_brace or stop_at_template_end:
        raise LexError("unterminated '${' or '{{'")
    return len(src)


_SPACE = " \t\r\n\f\v\u00a0\ufeff\u2028\u2029"


def _skip_trivia(src: str, i: int) -> int:
    """The index of the next token at or after `i`: whitespace and comments skipped."""
    n = len(src)
    while i < n:
        if src[i] in _SPACE:
            i += 1
        elif src.startswith("//", i):
            nl = src.find("\n", i)
            i = n if nl < 0 else nl
        elif src.startswith("/*", i):
            close = src.find("*/", i + 2)
            if close < 0:
                raise LexError(f"unterminated comment starting at offset {i}")
            i = close + 2
        else:
            break
    return i


def _ends_here(src: str, i: int, stop_at_brace: bool, stop_at_template_end: bool) -> bool:
    """Whether the `}` at bracket depth 0 at `i` ends the lexing; a lone `}` inside a
    `{{ }}` is an error, and elsewhere it is an ordinary (unbalanced) token."""
    closes_template = src.startswith("}}", i)
    if stop_at_brace or (stop_at_template_end and closes_template):
        return True
    if stop_at_template_end:
        raise LexError(f"unbalanced '}}' at offset {i}")
    return False


def _token(src: str, start: int, prev: Token | None) -> Token:
    """The token that starts at `start` (not whitespace or a comment)."""
    ch, n = src[start], len(src)
    i = start + 1
    if _is_ident_start(ch):
        while i < n and _is_ident_part(src[i]):
            i += 1
        return Token("name", src[start:i], start, i)
    if ch.isdigit() or (ch == "." and i < n and src[i].isdigit()):
        while i < n and (_is_ident_part(src[i]) or src[i] == "." or (
            src[i] in "+-" and src[i - 1] in "eE" and not src[start:i].startswith(("0x", "0X"))
        )):
            i += 1
        return Token("num", src[start:i], start, i)
    if ch in "'\"":
        i = _skip_string(src, start, ch)
        return Token("str", src[start:i], start, i)
    if ch == "`":
        i, parts = _lex_template(src, start)
        return Token("tmpl", src[start:i], start, i, parts)
    if ch == "/" and _regex_allowed(prev):
        i = _skip_regex(src, start)
        return Token("regex", src[start:i], start, i)
    return _punct(src, start)


def _punct(src: str, start: int) -> Token:
    """The longest punctuator at `start` (one character when none is longer)."""
    for p in _PUNCTS:
        # `?.5` is a conditional followed by a number, not optional chaining.
        if src.startswith(p, start) and not (p == "?." and src[start + 2:start + 3].isdigit()):
            return Token("punct", p, start, start + len(p))
    return Token("punct", src[start], start, start + 1)


def _nesting(tok: Token, depth: int) -> int:
    """The bracket depth after a punctuator; an unmatched closing bracket is an error."""
    if tok.text in "([{":
        return depth + 1
    if tok.text in ")]}":
        if depth == 0:
            raise LexError(f"unbalanced {tok.text!r} at offset {tok.start}")
        return depth - 1
    return depth


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
