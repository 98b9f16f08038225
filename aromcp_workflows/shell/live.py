"""A running command seen from outside: its output as it comes, and stopping it.

Any process of the machine that knows a command's run directory (the step's claim names it)
can read the command's stdout and stderr while it runs — the server that runs it (progress
notifications carry the latest line), another server, the CLI's `debug` — and stop its whole
process group (a cancel, from whichever process it comes).

Offsets are absolute: byte N of what the command wrote to a stream, however often the file
was cut back to the cap meanwhile (`RunDir.trim` records in `<stream>.cut` how many bytes
the file has lost from its start).  A reader never holds more than the slice it asked for.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aromcp_workflows.shell.rundir import STREAMS, RunDir

SLICE_BYTES = 16 * 1024  # what one read returns at most, per stream
LINE_BYTES = 4096  # how far back from the end the latest line is looked for
LINE_CHARS = 200  # the latest line as a progress message shows it
STOP_GRACE_S = 1.0  # SIGTERM, then SIGKILL for what is left after this


@dataclass(frozen=True)
class Slice:
    """Part of a stream: `text` holds bytes `start`..`end` of what the command wrote;
    `cut`: bytes before `start` that were asked for are no longer kept."""

    text: str
    start: int
    end: int
    cut: bool


def read_slice(run_dir: RunDir, stream: str, since: int | None = None, limit: int = SLICE_BYTES) -> Slice:
    """From byte `since` on (at most `limit` bytes), or the last `limit` bytes (`since` None).
    Right after a cut the file holds little or nothing: what it held last before the cut
    (`RunDir.tail_before_cut`) comes first then.  A cut made while reading: read again."""
    for _ in range(3):
        base = run_dir.cut_before(stream)
        found = _read_at(run_dir, stream, base, since, limit)
        if run_dir.cut_before(stream) == base:
            break
    data, start = found
    wanted = 0 if since is None else since
    data, skipped = whole_characters(data, inside=start != wanted)
    start += skipped
    return Slice(data.decode("utf-8", errors="replace"), start, start + len(data), start > wanted)


def _read_at(run_dir: RunDir, stream: str, base: int, since: int | None, limit: int) -> tuple[bytes, int]:
    """The bytes of the slice and the absolute offset of the first, the file's start being
    byte `base` and the kept tail ending there."""
    try:
        fd = os.open(run_dir.file(stream), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b"", base if since is None else max(base, since)
    try:
        end = base + os.fstat(fd).st_size
        start = max(0, end - limit) if since is None else min(since, end)
        before = b""
        if start < base:  # the slice begins before the cut: from the tail kept, as far as it goes
            tail = run_dir.tail_before_cut(stream) if base else b""
            before = tail[len(tail) - min(len(tail), base - start):]
            start = base - len(before)
        data = os.pread(fd, min(limit - len(before), end - max(start, base)), max(start, base) - base)
    finally:
        os.close(fd)
    return before + data, start


def whole_characters(data: bytes, inside: bool) -> tuple[bytes, int]:
    """`data` without a UTF-8 character cut in two at its end (the next read starts with it
    whole), nor at its start when the slice may begin inside one (`inside`: not where an
    earlier read ended); with how many bytes were skipped at the start.  A page appends
    slices: a character split between two of them would show as two U+FFFD."""
    lead = 0
    while inside and lead < min(3, len(data)) and data[lead] & 0xC0 == 0x80:
        lead += 1
    last = len(data) - 1
    while last > lead and len(data) - last < 4 and data[last] & 0xC0 == 0x80:
        last -= 1
    if last >= lead and len(data) - last < _length(data[last]):
        return data[lead:last], lead
    return data[lead:], lead


def _length(first: int) -> int:
    """How many bytes the UTF-8 character starting with byte `first` has (1 for a byte that
    starts none: it is shown as it is, U+FFFD)."""
    return 2 if first >> 5 == 0b110 else 3 if first >> 4 == 0b1110 else 4 if first >> 3 == 0b11110 else 1


def latest_line(run_dir: RunDir) -> str | None:
    """The last non-blank line the command wrote (to whichever stream it wrote last), cut to
    `LINE_CHARS`; None before its first line.  A line redrawn with carriage returns (a
    progress bar) reads as its latest drawing."""
    newest: tuple[float, str] | None = None
    for stream in STREAMS:
        with contextlib.suppress(OSError):
            info = os.stat(run_dir.file(stream))
            if info.st_size and (newest is None or info.st_mtime_ns > newest[0]):
                newest = (info.st_mtime_ns, stream)
    if newest is None:
        return None
    text = read_slice(run_dir, newest[1], None, LINE_BYTES).text
    for line in reversed(text.replace("\r", "\n").split("\n")):
        if line.strip():
            line = line.strip()
            return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"
    return None


def group_of(run_dir: RunDir) -> int | None:
    """The process group of the command in `run_dir`, while any process of it still runs:
    the wrapper's pid while the wrapper runs, else while a process of that group (a
    background child) still holds the command's output.  Never a group the pid was given
    to since."""
    pid = run_dir.wrapper_pid()
    if pid is not None:
        return pid
    started = run_dir.started_pid()
    if started is None:
        return None
    targets = {os.fsencode(str(run_dir.file(stream))) for stream in STREAMS}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _in_group(int(entry), started) and _writes_to(int(entry), targets):
            return started
    return None


def stop(run_dir: RunDir, grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the command's whole process group: SIGTERM, then SIGKILL after `grace_s` for
    what is left.  False when nothing of it runs (any more)."""
    group = group_of(run_dir)
    if group is None:
        return False
    stop_groups([group], grace_s)
    return True


def stop_groups(groups: Sequence[int], grace_s: float) -> None:
    """SIGTERM to each whole process group, then SIGKILL after `grace_s` (sooner when all
    are gone) for what is left of them."""
    for group in groups:
        _signal(group, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(group) for group in groups):
        time.sleep(0.02)
    for group in groups:
        _signal(group, signal.SIGKILL)


def _signal(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def group_alive(group: int) -> bool:
    """Whether a process group still has a process (one of another user's counts)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_group(pid: int, group: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return len(fields) > 2 and fields[2] == b"%d" % group  # field 5: the process group


def _writes_to(pid: int, targets: set[bytes]) -> bool:
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            if os.fsencode(os.readlink(f"/proc/{pid}/fd/{fd}")) in targets:
                return True
    return False
