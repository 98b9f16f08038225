"""The text half of `shell.dialect`: is a command inside the subset of the shell language
that bash and dash run alike, and what must the run-time check look at?

One pass over the text (no general shell parser): lists (`;` `&&` `||` newline) of
pipelines of simple commands, leading `NAME=value` assignments, comments, single quotes,
double quotes holding only `$NAME`/`${NAME}`/`$?` and `\\ \\" \\$`, backslash escapes,
redirections that cannot fail (fd dups onto 0-2, files only /dev/null), and the builtins
that behave the same.  Everything else raises `_Reject`, and the command runs with bash.
Why each rule exists is shown by `tests/shell/test_dialect.py::test_rejected_commands_really_differ`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXIT_ARG = re.compile(r"0|[1-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-5]")
_EXPORT_ARG = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(=[A-Za-z0-9_./:,@%+-]*)?")
# Names bash gives a meaning dash does not (or the other way round).  Derived once on bash
# 5.2.15 / dash 0.5.12: the names in `env -i bash -c set` missing from `env -i dash -c set`,
# plus the other way round (PS1 PS2), plus bash's documented dynamic and special variables
# (bash(1) "Shell Variables"), plus PWD/OLDPWD/_ to stay clear of their corner cases.
# Every name starting with BASH is refused as well (see `_name_ok`).
_SPECIAL_NAMES = _names("""
    CDPATH CHILD_MAX COLUMNS COMP_CWORD COMP_KEY COMP_LINE COMP_POINT COMP_TYPE COMP_WORDBREAKS
    COMP_WORDS COMPREPLY COPROC DIRSTACK EMACS ENV EPOCHREALTIME EPOCHSECONDS EUID EXECIGNORE
    FCEDIT FIGNORE FUNCNAME FUNCNEST GLOBIGNORE GROUPS HISTCMD HISTCONTROL HISTFILE HISTFILESIZE
    HISTIGNORE HISTSIZE HISTTIMEFORMAT HOSTFILE HOSTNAME HOSTTYPE IFS IGNOREEOF INPUTRC INSIDE_EMACS
    LINENO LINES MACHTYPE MAIL MAILCHECK MAILPATH MAPFILE OLDPWD OPTERR OPTIND OSTYPE PATH
    PIPESTATUS POSIXLY_CORRECT PROMPT_COMMAND PROMPT_DIRTRIM PS0 PS1 PS2 PS3 PS4 PWD RANDOM
    READLINE_ARGUMENT READLINE_LINE READLINE_MARK READLINE_POINT REPLY SECONDS SHELL SHELLOPTS
    SHLVL SRANDOM TERM TIMEFORMAT TMOUT UID auto_resume histchars _""")
_KEYWORDS = _names("if then else elif fi for while until do done case esac in function select time coproc")
_BUILTINS = _names(""". : [ alias bg bind break builtin caller cd chdir command compgen complete compopt
    continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs
    kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt
    source suspend test times trap true type typeset ulimit umask unalias unset wait""")
SAME_BUILTINS = frozenset({"true", "false", ":", "exit", "export", "echo"})
_ENV_PRINTERS = frozenset({"env", "printenv"})  # they print `_` and SHLVL, which only bash sets
# What may follow the last command for bash to exec it instead of forking (bash 5.2, measured:
# `P\n` and `P # c` are exec'd, `P\n\n` and `P\n ` are not).
_EXEC_TAIL = re.compile(r"[ \t]*(;[ \t]*)?(#[^\n]*)?\n?")
MAX_LENGTH = 4096
_WORD_END = " \t\n;&|<>"
_DELIMITERS = " \t\n;&|"


class _Reject(Exception):
    """The command leaves the subset: run it with bash."""


@dataclass(frozen=True)
class Shape:
    """What the run-time check needs to know about an accepted command text."""

    words: tuple[str, ...]  # command words, in order
    globs: bool  # an unquoted * or ? in an argument: results depend on the locale in bash
    unquoted: frozenset[str]  # names expanded outside quotes: split and globbed
    echoed: frozenset[str]  # names expanded in echo's arguments
    exec_at: int | None  # where the last command's word starts when bash execs it (dash must too)
    programs: tuple[tuple[int, str], ...] = ()  # (where its word starts, the word) of each program run


@dataclass
class _Word:
    start: int
    raw: str
    unquoted: set[str]
    quoted: set[str]
    glob: bool


def _name_ok(name: str) -> bool:
    return name not in _SPECIAL_NAMES and not name.startswith("BASH")


class _Parser:
    """One pass over the text: lists of simple commands, each checked as it ends."""

    def __init__(self, text: str):
        self.s, self.i = text, 0
        self.words: list[str] = []
        self.globs = False
        self.unquoted: set[str] = set()
        self.echoed: set[str] = set()
        self.assigned: set[str] = set()
        self._reset()
        self.pending = False  # after && || |: a command must follow
        self.after_pipe = False
        self.token_end = 0
        self.last: tuple[int, int, bool] | None = None  # (word start, end, bash would exec it) of the last command
        self.programs: list[tuple[int, str]] = []

    def _reset(self) -> None:
        self.cmd: list[_Word] = []
        self.nonempty = self.assigns = self.redirected = self.redirects = False

    def parse(self) -> Shape:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "#":
                end = s.find("\n", self.i)
                self.i = len(s) if end < 0 else end
            elif c == "\n":
                self._finish("\n")
                self.i += 1
            elif c in ";&|":
                self._operator(c)
            elif c in "<>" or (c.isdigit() and s[self.i + 1:self.i + 2] in ("<", ">")):
                self._redirect()
            else:
                self._add(self._word())
        self._finish("")
        if (self.unquoted | self.echoed) & self.assigned:
            raise _Reject("a name set by the command is expanded where its value matters")
        return Shape(tuple(self.words), self.globs, frozenset(self.unquoted), frozenset(self.echoed), self._exec_at(),
                     tuple(self.programs))

    def _exec_at(self) -> int | None:
        """bash -c execs its last command when it is a program without redirections, not in
        a pipeline, followed by nothing but `;`, a comment and
        one newline.  Then the program's parent and its death by a signal (exit code -N, no
        message) show it, so dash is told to `exec` it too; otherwise both shells fork."""
        if self.last is None or not self.last[2] or not _EXEC_TAIL.fullmatch(self.s, self.last[1]):
            return None
        return self.last[0]

    def _operator(self, c: str) -> None:
        two = self.s[self.i:self.i + 2]
        if two in (";;", "&>", "|&"):
            raise _Reject(two)
        op = two if two in ("&&", "||") else c
        if op == "&":  # bash execs a backgrounded program in its subshell, with SHLVL lowered again
            raise _Reject("a background job")
        self._finish(op)
        self.i += len(op)

    def _finish(self, op: str) -> None:
        """End the current simple command at `op` ("" at the end of the text); a syntax error
        in either shell (an empty command) is rejected."""
        if not self.nonempty:
            if op not in ("\n", "") or self.pending:
                raise _Reject("empty command")
        else:
            self._check_command()
            program = bool(self.cmd) and self.cmd[0].raw not in SAME_BUILTINS
            if program:
                self.programs.append((self.cmd[0].start, self.cmd[0].raw))
            alone = not (self.redirects or self.after_pipe)
            execs = program and alone and op in (";", "\n", "")
            self.last = (self.cmd[0].start if self.cmd else 0, self.token_end, execs)
            self._reset()
        self.pending = op in ("&&", "||", "|")
        self.after_pipe = op == "|"

    def _redirect(self) -> None:
        """Only fd duplications onto 0-2 and files opened on /dev/null: neither can fail."""
        s = self.s
        self.i += 1 if s[self.i].isdigit() else 0
        op, self.i = s[self.i], self.i + 1
        if s[self.i:self.i + 1] == "&":
            if s[self.i + 1:self.i + 2] not in ("0", "1", "2") or s[self.i + 2:self.i + 3] not in ("", *_DELIMITERS):
                raise _Reject("fd duplication other than onto 0, 1 or 2")
            self.i += 2
        else:
            if op == ">" and s[self.i:self.i + 1] == ">":
                self.i += 1
            elif s[self.i:self.i + 1] in ("<", ">", "|"):
                raise _Reject("here-document, <>, >| or ><")
            while s[self.i:self.i + 1] in (" ", "\t"):
                self.i += 1
            if not s.startswith("/dev/null", self.i) or s[self.i + 9:self.i + 10] not in ("", *_DELIMITERS):
                raise _Reject("redirection to a file other than /dev/null")
            self.i += 9
        self.nonempty = self.redirected = self.redirects = True
        self.token_end = self.i

    def _word(self) -> _Word:
        s, start = self.s, self.i
        word = _Word(start, "", set(), set(), False)
        while self.i < len(s) and s[self.i] not in _WORD_END:
            c = s[self.i]
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise _Reject("unterminated quote")
                self.i = end + 1
            elif c == '"':
                self._double_quoted(word.quoted)
            elif c == "\\":
                if s[self.i + 1:self.i + 2] in ("", "\n"):
                    raise _Reject("backslash at the end of a line")
                self.i += 2
            elif c == "$":
                self._dollar(word.unquoted)
            elif c in "*?":
                word.glob, self.i = True, self.i + 1
            elif c in "`(){}[]!~":
                raise _Reject(c)
            else:
                self.i += 1
        word.raw = s[start:self.i]
        self.token_end = self.i
        if word.raw.isdigit() and s[self.i:self.i + 1] in ("<", ">"):
            raise _Reject("multi-digit file descriptor")  # bash reads `12>` as fd 12, dash as fd 1
        return word

    def _double_quoted(self, names: set[str]) -> None:
        s = self.s
        self.i += 1
        while self.i < len(s):
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                if s[self.i + 1:self.i + 2] not in ("\\", '"', "$"):
                    raise _Reject("backslash escape in double quotes")
                self.i += 2
            elif c == "$":
                self._dollar(names)
            elif c in "`!":
                raise _Reject(c)
            else:
                self.i += 1
        raise _Reject("unterminated quote")

    def _dollar(self, names: set[str]) -> None:
        """Only $NAME, ${NAME} and $?, for names without a special meaning in bash."""
        s, at = self.s, self.i + 1
        if s[at:at + 1] == "?":
            self.i = at + 1
            return
        braced = s[at:at + 1] == "{"
        match = NAME.match(s, at + braced)
        if match is None or (braced and s[match.end():match.end() + 1] != "}"):
            raise _Reject("$ form other than $NAME, ${NAME}, $?")
        if not _name_ok(match.group()):
            raise _Reject(f"${match.group()} means something else in bash")
        names.add(match.group())
        self.i = match.end() + braced

    def _add(self, word: _Word) -> None:
        match = NAME.match(word.raw)
        if not self.cmd and not self.redirected and match and word.raw[match.end():match.end() + 1] == "=":
            if not _name_ok(match.group()):
                raise _Reject(f"assignment to {match.group()}")
            self.assigned.add(match.group())
            self.assigns = True
        else:
            self.cmd.append(word)
        self.nonempty = True

    def _check_command(self) -> None:
        if not self.cmd:
            return
        head, args = self.cmd[0].raw, self.cmd[1:]
        if any(c in head for c in "$'\"*?\\=") or head in _KEYWORDS or Path(head).name in _ENV_PRINTERS:
            raise _Reject(f"command word {head!r}")
        if head in _BUILTINS:
            self._check_builtin(head, args)
        self.words.append(head)
        for arg in args:
            self.globs |= arg.glob
            self.unquoted |= arg.unquoted

    def _check_builtin(self, head: str, args: list[_Word]) -> None:
        """The builtins that behave the same in both shells, with the arguments for which they do."""
        raws = [a.raw for a in args]
        if head not in SAME_BUILTINS or self.assigns:  # `A=1 :` keeps A in dash only
            raise _Reject(f"builtin {head}")
        if head == "exit" and not (not raws or (len(raws) == 1 and _EXIT_ARG.fullmatch(raws[0]))):
            raise _Reject("exit argument")
        if head == "export":
            matches = [_EXPORT_ARG.fullmatch(r) for r in raws]
            if not matches or not all(m and _name_ok(m.group(1)) for m in matches):
                raise _Reject("export arguments")
            self.assigned.update(m.group(1) for m in matches if m)
        if head == "echo":  # dash's echo reads backslash escapes, bash's takes -n/-e/-E options
            if "\\" in self.s or any(a.glob or a.raw.lstrip("'\"").startswith("-") for a in args):
                raise _Reject("echo with a backslash, a glob or a leading -")
            for arg in args:
                self.echoed |= arg.unquoted | arg.quoted


@functools.lru_cache(maxsize=2048)
def shape(command: str) -> Shape | None:
    """The command's `Shape` if its text is inside the subset, else None (pure; cached, so
    long texts, rare and spawned at a relative saving too small to matter, are left to bash)."""
    if len(command) > MAX_LENGTH or not command.isascii() or any(not (c.isprintable() or c in "\t\n") for c in command):
        return None
    try:
        return _Parser(command).parse()
    except _Reject:
        return None
