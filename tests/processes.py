"""The processes of this machine as the tests that stop commands look at them: live ones
only (a zombie waiting for its reaper has stopped; on a machine whose init does not reap
promptly, zombies linger)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def live_processes() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command line with spaces, the fields of /proc/PID/stat after the name) of each
    running process; `fields[0]` is the state, `fields[2]` the process group."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        if fields and fields[0] != "Z":
            yield int(entry.name), cmdline, fields


def running(command: str) -> list[int]:
    """Live processes whose command line is `command`."""
    return [pid for pid, cmdline, _ in live_processes() if cmdline == command]


def group_members(group: int) -> list[int]:
    """Live processes of a process group."""
    return [pid for pid, _, fields in live_processes() if len(fields) > 2 and fields[2] == str(group)]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie runs no more)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
