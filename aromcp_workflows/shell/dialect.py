"""When a `shell_command` may run under dash instead of bash with the same observable result.

Authors write commands for bash; dash starts in about 0.6 of bash's time, so a command that
both shells run identically is spawned with dash (argv[0] still "bash", so `$0` matches).
"Identically" is decided conservatively: the text must lie inside a small subset of the
shell language whose meaning, output and exit codes are the same in both shells (simple
commands, lists, pipes, plain quoting, `$NAME`, redirections that cannot fail), every
command word must be a builtin that behaves the same or a program both shells exec the same
way, and nothing in the environment may change bash's start-up.  Anything else, and
anything in doubt, runs under bash.  `tests/shell/test_dialect.py` runs both shells on
the accepted commands and compares stdout, stderr and exit codes.

What bash puts in a program's environment (`SHLVL`, `_`) is given to dash explicitly (see
`dash_text`).  Known residual differences (not decidable from the text): the order of the
variables in a program's environment (so `env` and `printenv` are rejected by name); a
program whose parent is the shell sees `dash` in /proc/PPID/comm; a program that
is not the last one and dies of a signal such as SIGSEGV is reported on stderr in other
words; a binary the kernel cannot start (missing loader, other architecture) gets another
message.  (Where bash execs the last program instead of forking, dash is told to `exec` it
too, see `dash_text`: its parent and its death by a signal then look the same.)
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import stat
import time
from collections.abc import Mapping

from aromcp_workflows.shell.grammar import SAME_BUILTINS, shape

# Environment keys that change how bash starts or behaves (a BASH_FUNC_* key is a function).
_STARTUP_ENV = ("BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS", "POSIXLY_CORRECT", "GLOBIGNORE",
                "EXECIGNORE", "BASH_COMPAT", "BASH_XTRACEFD", "PS4")
_STARTUP_ENV_BYTES = frozenset(os.fsencode(key) for key in _STARTUP_ENV)
_SHEBANG = re.compile(rb"[ \t]*(/[^ \t\r]*)([ \t][^\r]*)?")  # the interpreter as the kernel reads it, no CR
_LEVEL = re.compile(r"[0-9]{1,3}")
_LOOKUP_TTL_S = 1.0  # a PATH search result is trusted this long (a newly installed program is seen after it)
_lookups: dict[tuple[str, str], tuple[str | None, float]] = {}


def posix_words(command: str) -> tuple[str, ...] | None:
    """The command words (first word of each simple command) if `command` is inside the subset, else None."""
    found = shape(command)
    return None if found is None else found.words


def dash_text(command: str, env: Mapping[str, str], cwd: str | os.PathLike[str],
              exec_last: bool = True) -> str | None:
    """The text to give dash when it runs `command` with exactly bash's result, else None.

    It is the command with what bash adds for each program it runs made explicit: `SHLVL`
    and `_` in the program's environment (bash raises SHLVL by one, and lowers it again
    for a program it execs; `_` is the path it ran), as assignments before the program's
    word, and `exec ` before the last program where bash would exec it rather than fork
    (see `grammar._Parser._exec_at`).  `exec_last=False` leaves that `exec ` out (the
    program keeps bash's SHLVL for it): for a shell that must outlive the command."""
    if not runs_same_under_sh(command, env, cwd):
        return None
    found = shape(command)
    assert found is not None
    level, path = int(env.get("SHLVL") or 0), env.get("PATH", "")
    parts, done = [], 0
    for start, word in found.programs:
        target = word if "/" in word else _lookup(word, path)
        if target is None:  # gone from PATH since the check a moment ago: let bash say so
            return None
        execs = start == found.exec_at
        parts += [command[done:start], f"SHLVL={level if execs else level + 1} _={shlex.quote(target)} ",
                  "exec " if execs and exec_last else ""]
        done = start
    return "".join(parts) + command[done:]


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
    return all(word in SAME_BUILTINS or _program_ok(word, path, os.fspath(cwd)) for word in found.words)


def _env_ok(env: Mapping[str, str]) -> bool:
    """No key that changes bash's start-up, no exported bash function (BASH_FUNC_*), and the
    two variables bash rewrites for its programs in a form `dash_text` reproduces.  For
    os.environ its bytes keys are read directly: iterating os.environ decodes every key (~10 µs)."""
    if env is os.environ:
        data = os.environ._data  # type: ignore[attr-defined]
        startup = data.keys().isdisjoint(_STARTUP_ENV_BYTES) and b"\0BASH_FUNC_" not in b"\0" + b"\0".join(data)
    else:
        startup = env.keys().isdisjoint(_STARTUP_ENV) and "\0BASH_FUNC_" not in "\0" + "\0".join(env)
    return bool(startup) and _levels_ok(env.get("SHLVL")) and _oldpwd_ok(env.get("OLDPWD"))


def _levels_ok(level: str | None) -> bool:
    """SHLVL unset or a plain number below 999: bash then gives its programs that number plus
    one (the number itself to one it execs); other forms have rules of their own (a warning
    at 1000), left to bash."""
    return level is None or (_LEVEL.fullmatch(level) is not None and int(level) < 999)


def _oldpwd_ok(oldpwd: str | None) -> bool:
    """bash drops an OLDPWD that is not a directory from its programs' environment; dash keeps it."""
    return oldpwd is None or os.path.isdir(oldpwd)


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
    line = _SHEBANG.fullmatch(head[2:head.index(b"\n")])  # a CR makes "bad interpreter" (bash) vs "not found" (dash)
    return line is not None and _head(os.fsdecode(line.group(1)), need_x=True).startswith(b"\x7fELF")


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
