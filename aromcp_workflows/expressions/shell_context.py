"""Where each `{{ }}` of a shell command stands, in bash's quoting, and how to insert it there.

A value inserted into a command must arrive as data, whatever quotes the author wrote
around the template: `echo "v={{ x }}"` must print `v=$(touch PWNED)`, not run it.  So
the command template is lexed once (cached) with a small bash lexer that knows bare
words, `'…'`, `"…"`, `$(…)`/`<(…)` (a fresh bare context, even inside `"…"`) and here
documents, and each insertion is escaped for the context it stands in:

- bare word: single-quoted (`shlex.quote`);
- inside `"…"`: backslash before `\\ $ \\` "` (the four characters special there);
- inside `'…'`: each `'` becomes `'\\''`;
- here-document body with an unquoted delimiter: backslash before `\\ $ \\``; with a quoted
  delimiter the text is literal; in both, a value must not produce the delimiter line.

Inline escaping (rather than passing values through environment variables) is used because
the same text is handed to the agent for `agent_shell_command`, where there is no
environment to pass, and because the command then shows the actual values in history.

Contexts where no escaping is exact are refused when the workflow is validated, with the
fix: backticks, `${…}`, `$((…))`/`((…))`, `$'…'`, comments, a here-document delimiter, right
after an unescaped `\\` or `$`, and `case` inside `$(…)` (its `)` defeats the lexer).
`| raw` opts a value out: it is inserted as shell text, and is the author's responsibility.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

BARE, DQ, SQ, HEREDOC, HEREDOC_LITERAL = "bare", "double-quoted", "single-quoted", "heredoc", "heredoc-literal"
HOLE = "\x00"  # marks an insertion in the lexed text (a NUL cannot be in a runnable command)
_METACHARS = frozenset(" \t\n;&|<>()")
_DQ_ESCAPES = str.maketrans({c: "\\" + c for c in '\\$`"'})
_HEREDOC_ESCAPES = str.maketrans({c: "\\" + c for c in "\\$`"})


class ShellContextError(ValueError):
    """A template stands where no escaping makes its value literal; says where and the fix."""


@dataclass(frozen=True, slots=True)
class HeredocBody:
    start: int  # offsets in the lexed text (holes count one character)
    end: int
    delimiter: str
    strip_tabs: bool


@dataclass(frozen=True, slots=True)
class ShellPlan:
    """Per insertion, its quoting context; and the here-document bodies holding insertions."""

    contexts: tuple[str, ...]
    heredocs: tuple[HeredocBody, ...]
    hole_offsets: tuple[int, ...]


@dataclass
class _Frame:
    kind: str  # cmd | dq | hdoc | backtick | param | arith
    depth: int = 0  # open parens (cmd, arith) or braces (param)
    subst: bool = False  # a cmd frame opened by $( or <( / >(


@dataclass
class _Lexer:
    text: str
    raw: Sequence[bool]  # per hole: `| raw` (never refused)
    sources: Sequence[str]
    holes: dict[int, str] = field(default_factory=dict)  # offset → context
    heredocs: list[HeredocBody] = field(default_factory=list)
    pending: list[tuple[str, bool, bool]] = field(default_factory=list)  # (delimiter, strip tabs, quoted)
    unsure: str = ""
    order: dict[int, int] = field(default_factory=dict)  # offset → hole index

    def hole(self, offset: int, context: str) -> None:
        self.holes[offset] = context

    def refuse(self, offset: int, where: str, fix: str) -> None:
        """Refuse the insertion at `offset` unless it is `| raw`."""
        index = self.order[offset]
        if self.raw[index]:
            self.holes[offset] = BARE
            return
        raise ShellContextError(f"template {{{{ {self.sources[index]} }}}} stands {where}, where the server "
                                f"cannot insert a value literally; {fix} (or add `| raw` to insert it as "
                                "shell text on purpose)")

    # -- contexts -----------------------------------------------------------------
    def lex(self, i: int, end: int, stack: list[_Frame]) -> int:
        text = self.text
        word_start = True
        while i < end:
            frame, c = stack[-1], text[i]
            if c == HOLE:
                i = self.at_hole(i, frame, stack)
                word_start = False
                continue
            if frame.kind == "cmd":
                i, word_start = self.cmd_char(i, end, stack, word_start)
            elif frame.kind in ("dq", "hdoc"):
                i = self.quoted_char(i, stack)
            else:
                i = self.opaque_char(i, stack)
        return i

    def at_hole(self, i: int, frame: _Frame, stack: list[_Frame]) -> int:
        if self.unsure:
            self.refuse(i, "after a `case` inside $(…)", self.unsure)
        elif frame.kind == "cmd":
            self.hole(i, BARE)
        elif frame.kind == "dq":
            self.hole(i, DQ)
        elif frame.kind == "hdoc":
            self.hole(i, HEREDOC)
        elif frame.kind == "backtick":
            self.refuse(i, "inside `…` backticks", "write $(…) instead of backticks")
        elif frame.kind == "ansi":
            self.refuse(i, "inside $'…'", "put it inside '…' or \"…\" instead")
        elif frame.kind == "param":
            self.refuse(i, "inside ${…}", "compute the value in the template instead ({{ a || b }})")
        else:
            self.refuse(i, "inside an arithmetic $((…)) or ((…))",
                        "compute the number in the template, or pass it as a quoted word")
        return i + 1

    def cmd_char(self, i: int, end: int, stack: list[_Frame], word_start: bool) -> tuple[int, bool]:
        text, frame, c = self.text, stack[-1], self.text[i]
        if c == "\\":
            self.no_hole_after(i, "right after a backslash", "remove the backslash")
            return i + 2, False
        if c == "'":
            close = text.find("'", i + 1)
            close = end if close < 0 else close
            for j in range(i + 1, close):
                if text[j] == HOLE:
                    self.hole(j, SQ)
            return close + 1, False
        if c == "#" and word_start:
            stop = text.find("\n", i)
            stop = end if stop < 0 else stop
            for j in range(i, stop):
                if text[j] == HOLE:
                    self.refuse(j, "inside a shell comment", "move it out of the comment")
            return stop, True
        if c == "(" and word_start and text.startswith("((", i):
            stack.append(_Frame("arith"))
            return i + 2, False
        if c in "<>" and text.startswith("(", i + 1):
            stack.append(_Frame("cmd", subst=True))
            return i + 2, True
        if text.startswith("<<<", i):
            return i + 3, True
        if text.startswith("<<", i):
            return self.heredoc_operator(i + 2), False
        if c == "(":
            frame.depth += 1
        elif c == ")":
            if frame.depth:
                frame.depth -= 1
            elif frame.subst and len(stack) > 1:
                stack.pop()
                return i + 1, False
        elif c == "\n" and self.pending:
            return self.heredoc_bodies(i + 1, end), True
        elif c == "$" or c in "\"`":
            return self.dollar_or_quote(i, stack), False
        elif frame.subst and word_start and re.match(r"case[ \t\n]", text[i:i + 5]):
            self.unsure = "do not put templates after a `case` inside $(…); use an if/elif or a function"
        return i + 1, c in _METACHARS

    def dollar_or_quote(self, i: int, stack: list[_Frame]) -> int:
        """`"`, backtick, `$(`, `$((`, `${`, `$'`, `$"` or a lone `$` (in cmd, dq and hdoc frames)."""
        text, c = self.text, self.text[i]
        if c == '"':
            stack.append(_Frame("dq"))
            return i + 1
        if c == "`":
            stack.append(_Frame("backtick"))
            return i + 1
        if text.startswith("$((", i):
            stack.append(_Frame("arith"))
            return i + 3
        if text.startswith("$(", i):
            stack.append(_Frame("cmd", subst=True))
            return i + 2
        if text.startswith("${", i):
            stack.append(_Frame("param"))
            return i + 2
        if text.startswith("$'", i) and stack[-1].kind == "cmd":
            stack.append(_Frame("ansi"))
            return i + 2
        if text.startswith('$"', i) and stack[-1].kind == "cmd":
            stack.append(_Frame("dq"))
            return i + 2
        self.no_hole_after(i, "right after a `$`", "remove the `$` or use ${{...}} on a shell variable instead")
        return i + 1

    def quoted_char(self, i: int, stack: list[_Frame]) -> int:
        """Inside `"…"` or a here-document body that expands `$`, backticks and `\\`."""
        frame, c = stack[-1], self.text[i]
        if c == "\\":
            self.no_hole_after(i, "right after a backslash", "remove the backslash")
            return i + 2
        if c == '"' and frame.kind == "dq":
            stack.pop()
            return i + 1
        if c in "$`":
            return self.dollar_or_quote(i, stack)
        return i + 1

    def opaque_char(self, i: int, stack: list[_Frame]) -> int:
        """Backticks, `${…}`, `$((…))`, `$'…'`: only their end matters (insertions are refused)."""
        text, frame, c = self.text, stack[-1], self.text[i]
        if c == "\\":
            return i + 2
        closes = {"backtick": "`", "ansi": "'"}.get(frame.kind)
        if closes is not None and c == closes:
            stack.pop()
            return i + 1
        opens, shuts = ("{", "}") if frame.kind == "param" else ("(", ")")
        if frame.kind in ("param", "arith") and c == opens:
            frame.depth += 1
        elif frame.kind == "param" and c == shuts:
            if not frame.depth:
                stack.pop()
            frame.depth -= 1
        elif frame.kind == "arith" and c == shuts:
            if not frame.depth and text.startswith("))", i):
                stack.pop()
                return i + 2
            frame.depth -= 1
        return i + 1

    def no_hole_after(self, i: int, where: str, fix: str) -> None:
        if i + 1 < len(self.text) and self.text[i + 1] == HOLE:
            self.refuse(i + 1, where, fix)

    # -- here documents -------------------------------------------------------------
    def heredoc_operator(self, i: int) -> int:
        """After `<<`: note the delimiter; its body starts after the end of this line."""
        text = self.text
        strip = text.startswith("-", i)
        i += 1 if strip else 0
        while i < len(text) and text[i] in " \t":
            i += 1
        word, quoted = [], False
        while i < len(text) and text[i] not in _METACHARS:
            c = text[i]
            if c == HOLE:
                self.refuse(i, "in a here-document delimiter", "write the delimiter literally")
                i += 1
            elif c in "'\"":
                close = text.find(c, i + 1)
                close = len(text) if close < 0 else close
                word.append(text[i + 1:close])
                quoted, i = True, close + 1
            elif c == "\\":
                word.append(text[i + 1:i + 2])
                quoted, i = True, i + 2
            else:
                word.append(c)
                i += 1
        self.pending.append(("".join(word), strip, quoted))
        return i

    def heredoc_bodies(self, i: int, end: int) -> int:
        """Read the bodies of the here documents opened on the line that just ended."""
        text = self.text
        for delimiter, strip, quoted in self.pending:
            start = i
            while i < end:
                stop = text.find("\n", i, end)
                stop = end if stop < 0 else stop
                line = text[i:stop]
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
                i = stop + 1
            body_end = min(i, end)
            self.body(start, body_end, delimiter, strip, quoted)
            i = min(end, text.find("\n", body_end, end) + 1 or end) if body_end < end else end
        self.pending = []
        return i

    def body(self, start: int, end: int, delimiter: str, strip: bool, quoted: bool) -> None:
        if HOLE not in self.text[start:end]:
            return
        if quoted:
            for j in range(start, end):
                if self.text[j] == HOLE:
                    self.hole(j, HEREDOC_LITERAL)
        else:
            stack = [_Frame("hdoc")]
            self.lex(start, end, stack)
            if len(stack) != 1:
                raise ShellContextError("a here document's body has an unclosed $(…), ${…} or backtick; "
                                        "close it inside the body")
        self.heredocs.append(HeredocBody(start, end, delimiter, strip))


@lru_cache(maxsize=4096)
def shell_plan(literals: tuple[str, ...], sources: tuple[str, ...], raw: tuple[bool, ...]) -> ShellPlan:
    """The quoting context of each insertion of a command template.

    `literals` are the text pieces around the insertions (one more than `sources`).
    Raises ShellContextError for an insertion no escaping can make literal.
    """
    if any(HOLE in piece for piece in literals):
        raise ShellContextError("the command contains a NUL character, which no shell command can carry")
    text = HOLE.join(literals)
    offsets = [m.start() for m in re.finditer(HOLE, text)]
    lexer = _Lexer(text, raw, sources, order={o: n for n, o in enumerate(offsets)})
    stack = [_Frame("cmd")]
    lexer.lex(0, len(text), stack)
    if lexer.pending:
        lexer.heredoc_bodies(len(text), len(text))
    if len(stack) != 1 and not all(raw):
        raise ShellContextError("the command's quoting is unbalanced (an unclosed quote, $(…), ${…} or "
                                "backtick), so the context of its templates is unknown; close it")
    contexts = tuple(lexer.holes.get(o, BARE) for o in offsets)
    return ShellPlan(contexts, tuple(lexer.heredocs), tuple(offsets))


def escape(text: str, context: str) -> str:
    """`text` written so that bash reads it back literally in `context`."""
    if context == BARE:
        return shlex.quote(text)
    if context == DQ:
        return text.translate(_DQ_ESCAPES)
    if context == SQ:
        return text.replace("'", "'\\''")
    if context == HEREDOC:
        return text.translate(_HEREDOC_ESCAPES)
    return text  # HEREDOC_LITERAL


def assemble(literals: Sequence[str], plan: ShellPlan, values: Sequence[tuple[str, bool]]) -> str:
    """Join the command: each (text, raw) value escaped for its context.

    Raises ShellContextError for a value that would end a here document early (a line
    equal to its delimiter).  A NUL byte is left in: no command can be started with one,
    and the spawn reports that as the step's failure (where `on_error` applies).
    """
    out: list[str] = [literals[0]]
    grown: list[int] = []  # per hole: how many characters longer than its one-character marker
    for index, (text, raw) in enumerate(values):
        piece = text if raw else escape(text, plan.contexts[index])
        grown.append(len(piece) - 1)
        out.append(piece)
        out.append(literals[index + 1])
    command = "".join(out)
    for body in plan.heredocs:
        _check_body(command, body, plan.hole_offsets, grown)
    return command


def _check_body(command: str, body: HeredocBody, offsets: Sequence[int], grown: Sequence[int]) -> None:
    def shift(position: int) -> int:
        return position + sum(g for o, g in zip(offsets, grown, strict=True) if o < position)

    lines = command[shift(body.start):shift(body.end)].split("\n")
    for line in lines[:-1] if lines and lines[-1] == "" else lines:
        if (line.lstrip("\t") if body.strip_tabs else line) == body.delimiter:
            raise ShellContextError(f"the value puts the line {body.delimiter!r} into a here document whose "
                                    "delimiter it is, which would end the document early")
