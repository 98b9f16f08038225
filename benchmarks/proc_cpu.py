"""CPU seconds used by groups of processes, read from /proc (Linux), for benchmarks that
must say where the CPU of a multi-process run went: server replicas (with their V8
children), a database server with its backends, the benchmark's own client, the rest of
the machine.

A group is a root pid plus every descendant alive at the time of reading; children that
exited and were reaped count through the parent's cutime/cstime.  Reading before and
after a run and subtracting gives each group's share of that run.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.extend(int(c) for c in (task / "children").read_text().split())
    except OSError:
        pass
    return found


def tree_cpu_s(root: int, *, root_too: bool = True) -> float:
    """utime + stime of `root` and its live descendants, plus their reaped children's
    (without `root_too`: of the descendants only, e.g. a server's V8 child)."""
    total, todo = 0, [root] if root_too else _children(root)
    while todo:
        pid = todo.pop()
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue  # exited between listing and reading
        # fields[11:15] = utime stime cutime cstime (fields 14-17 of proc(5), minus pid and comm)
        total += sum(int(f) for f in fields[11:15])
        todo.extend(_children(pid))
    return total / TICK


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle (all cores), from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    busy = sum(fields[:8]) - idle  # user nice system idle iowait irq softirq steal
    return busy / TICK


@dataclass
class Usage:
    """CPU seconds per group over an interval (or at an instant, before subtracting)."""

    groups: dict[str, float]
    machine: float

    def __sub__(self, other: Usage) -> Usage:
        return Usage({k: v - other.groups.get(k, 0.0) for k, v in self.groups.items()},
                     self.machine - other.machine)

    @property
    def ours(self) -> float:
        return sum(self.groups.values())

    @property
    def other(self) -> float:
        """What the rest of the machine (other users, other benchmarks) used meanwhile."""
        return max(0.0, self.machine - self.ours)


class CpuMeter:
    """Reads named process trees, this process ("client") and the machine together."""

    def __init__(self, roots: dict[str, list[int]], split: tuple[str, ...] = ()) -> None:
        """`split` names groups whose root process and children are told apart: the
        root's own CPU under the name, its children's under "NAME children"."""
        self.roots, self.split = roots, split

    def read(self) -> Usage:
        groups: dict[str, float] = {}
        for name, pids in self.roots.items():
            if name in self.split:
                groups[name] = sum(tree_cpu_s(pid) - tree_cpu_s(pid, root_too=False) for pid in pids)
                groups[f"{name} children"] = sum(tree_cpu_s(pid, root_too=False) for pid in pids)
            else:
                groups[name] = sum(tree_cpu_s(pid) for pid in pids)
        groups["client"] = self_cpu_s()
        return Usage(groups, machine_busy_s())
