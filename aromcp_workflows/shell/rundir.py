"""Where a running command keeps its output and exit status: files that outlive its server.

A server-side command runs in a session of its own, so it outlives a server that is killed
(SIGKILL, a crash) and finishes.  Its output used to go to pipes that died with the server,
and its exit status to the server's `waitpid`: the next server could only run it again,
sometimes while the first run still went on.  So each command gets a run directory, named
in the pending step's claim (and, where the claim is committed while the command runs,
named after the run itself: `RunDir.for_command`):

- `out`, `err`: the command's stdout and stderr (append mode).  The server takes an
  exclusive `flock` on each before the spawn; the command inherits those descriptors, so
  the locks are held for as long as any process of the command holds its output open,
  whoever its parent is by then.  A free lock means nobody writes there any more.
- `status`: the exit status, written by the shell that wraps the command (`WRAPPER`) when
  the command ends, whether or not a server still waits for it.
- `meta`: written by the server with the output files, before the spawn: the instance,
  thread and step, and the server that is about to start it (so the next server of the
  machine finds the command whenever its server died: `orphans`);
- `pid`: the wrapper's pid, written right after the spawn: the command was started;
- `claimed`: written once the command's claim is committed, where that comes after the
  spawn: a directory without it, and without a claim in the store, is a command whose
  server died before committing the claim (`app.launch`).

The next server on the same machine adopts the command instead of running it again
(`RunDir.state` tells: finished, still running, never started, or killed without a
status).  The directory lives on a tmpfs where there is one (`$XDG_RUNTIME_DIR`,
`/dev/shm`): a file created on a disk costs milliseconds, and a reboot — the end of every
command of the machine — empties it.  Output beyond `OUTPUT_CAP` is cut out of the files
while a server waits (`trim`: every 0.25 s, every 20 ms while the command writes fast; how
many bytes a file lost from its start is kept in `<stream>.cut`, so readers of the live
output count absolute offsets, and a server that adopts the command says how much of its
output was not kept; its last bytes before the cut are kept in `<stream>.tail`, so a
reader of a command that prints faster than it looks still sees its latest output), so
a chatty command cannot fill that memory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from aromcp_workflows.safety import names_with_prefix
from aromcp_workflows.shell.roots import commands_root

if TYPE_CHECKING:
    from aromcp_workflows.interpreter import ShellClaim

OUTPUT_CAP = 256 * 1024  # bytes kept per stream: both streams, JSON-escaped, fit a reply under 1 MB
STREAMS = ("out", "err")
FILES = (*STREAMS, "status", "meta", "pid", "claimed", "out.head", "err.head", "out.cut", "err.cut", "out.tail",
         "err.tail")
TAIL_BYTES = 16 * 1024  # what a cut keeps of a stream's end for its live readers (a page's slice)
RunState = Literal["finished", "running", "never_started", "killed"]
Output = tuple[tuple[str, bool], tuple[str, bool]]  # (text, cut) of stdout and of stderr

# The command text travels as $1 and runs through `eval`, which parses it line by line as
# `bash -c` does (a `shopt` on one line governs the next).  $0 stays "bash" and no positional
# parameter or variable of the wrapper reaches the command.  The exit status is written by an
# EXIT trap of the shell that runs the command (`TRAP_WRAPPER`): it fires however the command
# ends — its last word, `exit`, `set -e`, a signal its program died of (128 + n) — and costs
# no process.  A command whose text could replace that shell or that trap (`exec`, `trap`, or
# code this text cannot see: `source`, `.`, `eval`, an exported function) runs in a subshell
# instead (`SUBSHELL_WRAPPER`), the wrapper waiting to record its status: one fork more.
SUBSHELL_WRAPPER = ('__aromcp_cmd=$1; shift; (eval "unset __aromcp_cmd; $__aromcp_cmd"); __aromcp_status=$?; '
                    'echo "$__aromcp_status" >{status}; exit "$__aromcp_status"')
TRAP_WRAPPER = '__aromcp_cmd=$1; shift; trap {trap} EXIT; eval "unset __aromcp_cmd; $__aromcp_cmd"'
_REPLACES_SHELL = re.compile(r"(?<![\w./-])(exec|trap|source|eval)(?![\w.-])|(?<![\w./-])\.(?=[ \t])")


def needs_subshell(command: str, declared: Mapping[str, str]) -> bool:
    """Whether `command` could replace the shell that runs it or its EXIT trap (judged on the
    text, conservatively: a false alarm costs one fork), so its status needs a subshell.  An
    exported function comes from this process's environment or the step's own (`declared`)."""
    return (_REPLACES_SHELL.search(command) is not None or bool(names_with_prefix("BASH_FUNC_"))
            or any(name.startswith("BASH_FUNC_") for name in declared))


@dataclass(frozen=True)
class RunDir:
    """One command's run directory (see the module's docstring)."""

    path: Path

    @classmethod
    def new(cls) -> RunDir:
        """A fresh name under `commands_root`; nothing is created until `open_streams`."""
        return cls(commands_root() / secrets.token_hex(8))

    @classmethod
    def for_command(cls, identity: str) -> RunDir:
        """The run directory of one run of one command, named after it (`identity`: the
        store, instance, thread, step, command, directory and environment: `app.launch`): a
        server that reaches the same run again, before its claim was committed, finds the
        command by its name instead of starting it a second time."""
        return cls(commands_root() / ("c" + hashlib.sha256(identity.encode()).hexdigest()[:31]))

    def mark_claimed(self) -> None:
        """Note that the command's claim is committed: from now on the store names this
        directory, and a directory of this name found with no claim in the store is left over
        from a run whose result was committed (`claimed`)."""
        with contextlib.suppress(OSError):
            _write(self._at("claimed"), b"")

    def claimed(self) -> bool:
        return self.file("claimed").exists()

    def made_at(self) -> float:
        """When the command was started (its `pid` file written; else its directory made),
        wall-clock seconds: its timeout runs from then, whichever server waits for it."""
        for name in ("pid", "meta"):
            with contextlib.suppress(OSError):
                return os.stat(self.file(name)).st_mtime
        return time.time()

    def file(self, name: str) -> Path:
        return self.path / name

    @cached_property
    def _prefix(self) -> str:
        return os.path.join(self.path, "")

    def _at(self, name: str) -> str:
        """A file's path as a string: what the calls between a command's exit and the next
        spawn use, a `Path` join costing several times a string's."""
        return self._prefix + name

    def wrapper(self, subshell: bool = False) -> str:
        """The shell text that runs the command given as $1 and records its status here."""
        status = shlex.quote(self._at("status"))
        if subshell:
            return SUBSHELL_WRAPPER.format(status=status)
        return TRAP_WRAPPER.format(trap=shlex.quote(f'echo "$?" >{status}'))

    def open_streams(self, meta: dict[str, Any]) -> tuple[int, int]:
        """Create the directory, its `meta` and the two output files, each locked (see the
        module's docstring); the descriptors are for the command, and the caller closes its own."""
        try:
            os.mkdir(self.path, 0o700)
        except FileNotFoundError:  # the commands root was removed since it was made
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.mkdir(self.path, 0o700)
        _write(self._at("meta"), json.dumps(meta).encode())
        fds = []
        try:
            for name in STREAMS:
                fd = os.open(self._at(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                             0o600)
                fds.append(fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds[0], fds[1]

    def note_started(self, pid: int) -> None:
        """Record that the command was started (read by `state`), and its wrapper's pid."""
        with contextlib.suppress(OSError):
            _write(self._at("pid"), b"%d" % pid)

    def meta(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.file("meta").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def started_pid(self) -> int | None:
        """The wrapper's pid as recorded when it started (it may have ended since)."""
        try:
            return int(self.file("pid").read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None

    def cut_before(self, name: str) -> int:
        """How many bytes the stream's file has lost from its start (`trim`): byte 0 of the
        file is byte `cut_before` of what the command wrote."""
        try:
            return int(self.file(f"{name}.cut").read_text(encoding="ascii"))
        except (OSError, ValueError):
            return 0

    def wrapper_pid(self) -> int | None:
        """The pid of the command's wrapper shell while it still runs, checked by what it
        runs (its arguments name this directory), never a pid the system gave to another
        process since."""
        try:
            pid = int(self.file("pid").read_text(encoding="ascii"))
        except (OSError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        return pid if os.fsencode(str(self.file("status"))) in cmdline else None

    def status(self) -> int | None:
        """The exit status the wrapper recorded, or None (not ended, or killed before it could)."""
        try:
            text = self.file("status").read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def held(self) -> bool:
        """Whether some process still holds the command's output open (the command, or a
        background process it left behind)."""
        fds = self._locked_streams()
        if fds is None:
            return True
        _close_all(fds.values())
        return False

    def released_output(self, dropped: dict[str, int], every_cut: bool = False) -> Output | None:
        """Both streams' text and whether each was cut (see `output`) once no process holds
        them any more, else None: the look and the read share one open of each file, on
        the path from a command's exit to the next command's spawn.  `every_cut`: `dropped`
        counts every cut made since the command started (its waiter started it), so a
        stream it does not name was never cut and has no head to look for."""
        fds = self._locked_streams()
        if fds is None:
            return None
        try:
            out, err = (self._read(name, fds.get(name), dropped, every_cut) for name in STREAMS)
            return out, err
        finally:
            _close_all(fds.values())

    def _locked_streams(self) -> dict[str, int] | None:
        """Each output file opened anew and locked without waiting (a missing one left out),
        or None, nothing left open, when a process holds one of them."""
        fds: dict[str, int] = {}
        try:
            for name in STREAMS:
                try:
                    fds[name] = fd = os.open(self._at(name), os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    _close_all(fds.values())
                    return None
        except BaseException:
            _close_all(fds.values())
            raise
        return fds

    def state(self) -> RunState:
        """Where the command stands, for a server that did not start it."""
        if self.held():
            return "running"
        if self.status() is not None:
            return "finished"
        return "killed" if self.file("pid").exists() else "never_started"

    def trim(self, dropped: dict[str, int]) -> bool:
        """Keep a stream's first `OUTPUT_CAP` bytes (in `<stream>.head`) and empty the file
        when it grew past twice that, counting what was cut in `dropped` (and, for readers
        of the live output, in `<stream>.cut`): the command writes on at the end of an
        emptied file (append mode), and memory stays bounded.  True when it cut."""
        cut = False
        for name in STREAMS:
            path = self.file(name)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if size <= 2 * OUTPUT_CAP:
                continue
            self._cut(name, path, size, dropped)
            cut = True
        return cut

    def _cut(self, name: str, path: Path, size: int, dropped: dict[str, int]) -> None:
        """Empty one stream's file of its first `size` bytes: its start is kept once (the
        head, what the result keeps), its last `TAIL_BYTES` before the cut until the next
        cut (`<stream>.tail`, so a live reader is never left with an empty file)."""
        head = self.file(f"{name}.head")
        with path.open("rb") as source:
            if not head.exists():
                head.write_bytes(source.read(OUTPUT_CAP))
                dropped[name] = dropped.get(name, 0) - OUTPUT_CAP
            source.seek(size - min(size, TAIL_BYTES))
            _write(self._at(f"{name}.tail"), source.read(min(size, TAIL_BYTES)))
        _write(self.file(f"{name}.cut"), b"%d" % (self.cut_before(name) + size))
        os.truncate(path, 0)
        dropped[name] = dropped.get(name, 0) + size

    def tail_before_cut(self, name: str) -> bytes:
        """The last bytes a stream's file held before its latest cut (empty: never cut)."""
        try:
            with open(self._at(f"{name}.tail"), "rb") as kept:
                return kept.read()
        except OSError:
            return b""

    def output(self, name: str, dropped: dict[str, int] | None = None) -> tuple[str, bool]:
        """A stream's text (at most `OUTPUT_CAP` bytes kept, with a note of the rest) and
        whether it was cut."""
        try:
            fd = os.open(self._at(name), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return "", False
        try:
            return self._read(name, fd, dropped)
        finally:
            os.close(fd)

    def _read(self, name: str, fd: int | None, dropped: dict[str, int] | None,
              every_cut: bool = False) -> tuple[str, bool]:
        """`output` from a descriptor of the stream's file (None: there is no such file)."""
        if fd is None:
            return "", False
        more = (dropped or {}).get(name, 0)
        size = os.fstat(fd).st_size
        head = self._at(f"{name}.head")
        if more or (not every_cut and os.path.exists(head)):  # cut while it ran: the head is kept apart
            kept = Path(head).read_bytes()  # what was cut: as counted here, or by every server that waited
            more = max(more, self.cut_before(name) - len(kept)) + size
        else:
            kept = os.read(fd, OUTPUT_CAP) if size else b""
            more = max(0, size - len(kept))
        text = kept.decode("utf-8", errors="replace")
        if more > 0:
            text += f"\n[output truncated: {more} more bytes not kept (cap {OUTPUT_CAP} bytes)]"
        return text, more > 0

    def remove(self) -> None:
        """Delete the directory (its known files one by one: cheaper than a tree walk)."""
        try:
            for name in os.listdir(self.path):
                if name in FILES:
                    os.unlink(self._at(name))
            os.rmdir(self.path)
        except FileNotFoundError:
            pass
        except OSError:  # something else was put there: take it all
            shutil.rmtree(self.path, ignore_errors=True)


def _close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


def _write(path: str | Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def local_run_dir(claim: ShellClaim) -> RunDir | None:
    """The claim's run directory when its command runs on this machine (same kernel boot and
    pid namespace as this process), else None: another machine's is out of reach."""
    from aromcp_workflows.shell import owner as owners

    owner = owners.Owner.from_data(claim.owner)
    if claim.run_dir is None or owner is None or not owners.current().shares_pids_with(owner):
        return None
    return RunDir(Path(claim.run_dir))


def orphans(root: Path | None = None, store: str | None = None) -> list[RunDir]:
    """The run directories under the commands root whose command was started by a server of
    this machine that is gone: results (or running commands) nobody will take otherwise.
    With `store`, only those of that store (the only ones its server can adopt).

    A finished orphan whose store was a file that no longer exists is removed on the way:
    no server can ever take its result, and left there it would make every server that
    starts on this machine build its service to look at it."""
    from aromcp_workflows.shell import owner as owners

    base, me = root or commands_root(), owners.current()
    try:
        names = os.listdir(base)
    except OSError:
        return []
    found = []
    for name in names:
        candidate = RunDir(base / name)
        meta = candidate.meta() or {}
        server = owners.Owner.from_data(meta.get("server"))
        if server is None or not me.shares_pids_with(server) or owners.runs(server):
            continue
        if _store_file_gone(meta.get("store")) and candidate.state() != "running":
            candidate.remove()
        elif store is None or meta.get("store") == store:
            found.append(candidate)
    return found


def _store_file_gone(store: Any) -> bool:
    """Whether `store` names a store file (not a database URL) that does not exist."""
    return isinstance(store, str) and bool(store) and "://" not in store and not os.path.exists(store)
