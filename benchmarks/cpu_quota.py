"""Hold a process tree to a fraction of one CPU with a cgroup CPU quota (benchmarks only).

Why: on a 2-core machine the server replicas, PostgreSQL and the load client share the
same two cores, so "does a second replica add throughput?" is answered by the machine's
core count, not by the server.  Capping each replica at, say, half a core gives every
replica a CPU budget of its own (as replicas on their own hosts have) and leaves the rest
to PostgreSQL and the client: what two replicas then serve next to one shows what the
design scales to — conflicts, catching up, locks — rather than how many cores are left.

Needs root and a writable cgroup CPU controller: cgroup v2 (``cpu.max`` in the unified
hierarchy at /sys/fs/cgroup) or v1 (``cpu.cfs_quota_us`` under /sys/fs/cgroup/cpu).
`QuotaUnavailable` says which is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")


class QuotaUnavailable(RuntimeError):
    """This machine (or user) cannot set a CPU quota."""


def _root() -> tuple[Path, bool]:
    """The cgroup directory to create groups in, and whether it is cgroup v2."""
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return V2_ROOT, True
    if (V1_ROOT / "cpu.cfs_quota_us").exists():
        return V1_ROOT, False
    raise QuotaUnavailable("no cgroup CPU controller found (neither cgroup v2 cpu.max nor v1 cpu.cfs_quota_us)")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (read from /proc), parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


@contextmanager
def cpu_quota(pid: int, cores: float) -> Iterator[Path]:
    """Put `pid` and its descendants (and what they start later) in a new cgroup limited
    to `cores` CPUs; moved back to the root group and the group removed on exit."""
    root, v2 = _root()
    group = root / f"aromcp-bench-{pid}"
    try:
        group.mkdir()
        quota = max(1000, int(cores * PERIOD_US))
        if v2:
            (group / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
    except OSError as exc:
        hint = " (run as root)" if isinstance(exc, PermissionError) else ""
        raise QuotaUnavailable(f"cannot create a CPU-limited cgroup in {root}: {exc}{hint}") from exc
    try:
        for member in descendants(pid):
            try:
                (group / "cgroup.procs").write_text(str(member))
            except ProcessLookupError:
                pass
        yield group
    finally:
        for member in (group / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(member)
            except OSError:
                pass
        try:
            group.rmdir()
        except OSError:
            pass
