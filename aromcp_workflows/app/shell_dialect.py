"""When a `shell_command` may run under dash instead of bash with the same observable result.

Authors write commands for bash; dash starts in about 0.6 of bash's time, so a command that
both shells run identically is spawned with dash (argv[0] still "bash", so `$0` matches).
"Identically" is decided conservatively: the text must lie inside a small subset of the
shell language whose meaning, output and exit codes are the same in both shells (simple
commands, lists, pipes, plain quoting, `$NAME`, redirections that cannot fail), every
command word must be a builtin that behaves the same or a program both shells exec the same
way, and nothing in the environment may change bash's start-up.  Anything else, and
anything in doubt, runs under bash.  `tests/app/test_shell_dialect.py` runs both shells on
the accepted commands and compares stdout, stderr and exit codes.

Known residual differences (not decidable from the text): a program that prints its own
environment sees no `_` and `SHLVL` from dash (so `env` and `printenv` are rejected by
name), `/proc/PID/comm` of the shell says "dash", and a program killed by a signal other
than SIGINT/SIGPIPE is reported differently on stderr.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from collections.abc import Mapping
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
# Environment keys that change how bash starts or behaves (a BASH_FUNC_* key is a function).
_STARTUP_ENV = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "POSIXLY_CORRECT", "GLOBIGNORE",
                "EXECIGNORE", "BASH_COMPAT", "BASH_XTRACEFD", "PS4")
_STARTUP_ENV_BYTES = frozenset(os.fsencode(key) for key in _STARTUP_ENV)
_KEYWORDS = _names("if then else elif fi for while until do done case esac in function select time coproc")
_BUILTINS = _names(""". : [ alias bg bind break builtin caller cd chdir command compgen complete compopt
    continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history jobs
    kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift shopt
    source suspend test times trap true type typeset ulimit umask unalias unset wait""")
_SAME_BUILTINS = frozenset({"true", "false", ":", "exit", "export", "echo"})
_ENV_PRINTERS = frozenset({"env", "printenv"})  # they print `_` and SHLVL, which only bash sets
_WORD_END = " \t\n;&|<>"
_DELIMITERS = " \t\n;&|"
_LOOKUP_TTL_S = 1.0  # a PATH search result is trusted this long (a newly installed program is seen after it)
_lookups: dict[tuple[str, str], tuple[str | None, float]] = {}


class _Reject(Exception):
    """The command leaves the subset: run it with bash."""


@dataclass(frozen=True)
class Shape:
    """What the run-time check needs to know about an accepted command text."""

    words: tuple[str, ...]  # command words, in order
    globs: bool  # an unquoted * or ? in an argument: results depend on the locale in bash
    unquoted: frozenset[str]  # names expanded outside quotes: split and globbed
    echoed: frozenset[str]  # names expanded in echo's arguments


@dataclass
class _Word:
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

    def _reset(self) -> None:
        self.cmd: list[_Word] = []
        self.nonempty = self.assigns = self.redirected = False

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
                self._finish(needs_current=False, needs_next=False)
                self.i += 1
            elif c in ";&|":
                self._operator(c)
            elif c in "<>" or (c.isdigit() and s[self.i + 1:self.i + 2] in ("<", ">")):
                self._redirect()
            else:
                self._add(self._word())
        self._finish(needs_current=False, needs_next=False)
        if (self.unquoted | self.echoed) & self.assigned:
            raise _Reject("a name set by the command is expanded where its value matters")
        return Shape(tuple(self.words), self.globs, frozenset(self.unquoted), frozenset(self.echoed))

    def _operator(self, c: str) -> None:
        two = self.s[self.i:self.i + 2]
        if two in (";;", "&>", "|&"):
            raise _Reject(two)
        double = two in ("&&", "||")
        self._finish(needs_current=True, needs_next=double or c == "|")
        self.i += 2 if double else 1

    def _finish(self, needs_current: bool, needs_next: bool) -> None:
        """End the current simple command (a syntax error in either shell is rejected)."""
        if not self.nonempty:
            if needs_current or self.pending:
                raise _Reject("empty command")
        else:
            self._check_command()
            self._reset()
        self.pending = needs_next

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
        self.nonempty = self.redirected = True

    def _word(self) -> _Word:
        s, start = self.s, self.i
        word = _Word("", set(), set(), False)
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
        if head not in _SAME_BUILTINS or self.assigns:  # `A=1 :` keeps A in dash only
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
    """The command's `Shape` if its text is inside the subset, else None (pure; cached)."""
    if not command.isascii() or any(not (c.isprintable() or c in "\t\n") for c in command):
        return None
    try:
        return _Parser(command).parse()
    except _Reject:
        return None


def posix_words(command: str) -> tuple[str, ...] | None:
    """The command words (first word of each simple command) if `command` is inside the subset, else None."""
    found = shape(command)
    return None if found is None else found.words


def runs_same_under_sh(command: str, env: Mapping[str, str], cwd: str | os.PathLike[str]) -> bool:
    """Whether dash gives what bash gives: the text is inside the subset, the environment leaves
    bash's start-up alone, expanded values and the locale cannot make the shells differ, and
    every program is one both shells find and exec the same way."""
    found = shape(command)
    if found is None or not _env_ok(env):
        return False
    for name in found.echoed:  # echo: dash reads escapes in the value, bash reads options
        value = env.get(name, "")
        if "\\" in value or value.startswith("-") or any(c in value for c in "*?["):
            return False
    patterns = found.globs
    for name in found.unquoted:
        value = env.get(name, "")
        if "\\" in value:
            return False
        patterns = patterns or any(c in value for c in "*?[")
    if patterns and not _c_locale(env):  # bash matches characters of the locale, dash bytes
        return False
    path = env.get("PATH", "")
    return all(word in _SAME_BUILTINS or _program_ok(word, path, os.fspath(cwd)) for word in found.words)


def _env_ok(env: Mapping[str, str]) -> bool:
    """No key that changes bash's start-up, and no exported bash function (BASH_FUNC_*).  For
    os.environ its bytes keys are read directly: iterating os.environ decodes every key (~10 µs)."""
    if env is os.environ:
        data = os.environ._data  # type: ignore[attr-defined]
        return bool(data.keys().isdisjoint(_STARTUP_ENV_BYTES) and b"\0BASH_FUNC_" not in b"\0" + b"\0".join(data))
    return env.keys().isdisjoint(_STARTUP_ENV) and "\0BASH_FUNC_" not in "\0" + "\0".join(env)


def _c_locale(env: Mapping[str, str]) -> bool:
    """Whether pattern matching and sorting are bytewise (the C locale) for bash as for dash."""
    return all((env.get("LC_ALL") or env.get(cat) or env.get("LANG") or "C") in ("C", "POSIX")
               for cat in ("LC_CTYPE", "LC_COLLATE"))


def _program_ok(word: str, path: str, cwd: str) -> bool:
    """The program both shells would exec exists and the kernel can exec it (one stat when cached)."""
    target = os.path.join(cwd, word) if "/" in word else _lookup(word, path)
    if target is None:
        return False
    try:
        st = os.stat(target)
    except OSError:
        return False
    return _runnable(target, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_mode)


def _lookup(word: str, path: str) -> str | None:
    """The first entry named `word` along PATH, whatever it is (a directory or a file without
    the x bit first makes the shells differ: then None).  No PATH (the shells' defaults
    differ) or a relative entry (depends on cwd) is None too."""
    now = time.monotonic()
    cached = _lookups.get((word, path))
    if cached is not None and now - cached[1] < _LOOKUP_TTL_S:
        return cached[0]
    entries = path.split(":")
    found = None
    if path and all(entry.startswith("/") for entry in entries):
        for entry in entries:
            candidate = f"{entry.rstrip('/')}/{word}"
            if os.path.lexists(candidate):
                found = candidate
                break
    if len(_lookups) > 4096:
        _lookups.clear()
    _lookups[(word, path)] = (found, now)
    return found


@functools.lru_cache(maxsize=4096)
def _runnable(target: str, dev: int, ino: int, mtime_ns: int, mode: int) -> bool:
    """An executable regular file the kernel execs itself: ELF, or `#!` naming an absolute ELF
    interpreter.  (A file without either is run by bash as bash and by dash as sh.)"""
    if not stat.S_ISREG(mode) or not os.access(target, os.X_OK):
        return False
    head = _head(target)
    if head.startswith(b"\x7fELF"):
        return True
    if not head.startswith(b"#!") or b"\n" not in head:
        return False
    parts = head[2:head.index(b"\n")].split()
    interpreter = os.fsdecode(parts[0]) if parts else ""
    return interpreter.startswith("/") and _head(interpreter, need_x=True).startswith(b"\x7fELF")


def _head(path: str, need_x: bool = False) -> bytes:
    try:
        if need_x and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return b""
        with open(path, "rb") as handle:
            return handle.read(128)
    except OSError:
        return b""


@functools.lru_cache(maxsize=1)
def sh_path() -> str | None:
    """dash's real path when /bin/sh is dash, else None (elsewhere /bin/sh may be bash in POSIX
    mode or another shell this module knows nothing about: then never the fast path).  The
    real path is returned so the verdict stays about dash even if /bin/sh is relinked."""
    real = os.path.realpath("/bin/sh")
    return real if os.path.basename(real) == "dash" and os.access(real, os.X_OK) else None
