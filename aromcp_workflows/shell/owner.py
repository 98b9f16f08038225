"""Who runs a server-side command, and whether anybody still does: owner identity and lease.

A pending shell step records its owner — host name, boot id, pid namespace, pid and the
process's start time — and a lease (`lease_until`, wall-clock seconds) that the owner
renews while a long command runs.  Another call (in this process, another process, or a
replica on another host) that finds the step busy decides with `abandoned`:

- on the same machine and pid namespace, the owner is looked at directly: a pid that no
  longer exists, or exists with another start time (the pid was recycled), is gone, and
  the step is released at once;
- anywhere else a pid means nothing, so the lease decides: expired means the owner is
  dead or cut off, and the step is released (its command runs again: at least once).

Comparing boot ids (not only host names) keeps two hosts that share a name apart, and a
reboot ends every process of the previous boot; the pid namespace keeps containers that
share a kernel (and perhaps a host name, with host networking) from reading each other's
pids.  Instances stored before owners existed carry only `owner_pid`, judged as before.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a claim is only read here: the interpreter package is not imported at start
    from aromcp_workflows.interpreter import ShellClaim

LEASE_ENV = "AROMCP_SHELL_LEASE_S"  # seconds a claim on a running command lasts unless renewed
DEFAULT_LEASE_S = 30.0
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def lease_seconds() -> float:
    """The lease of a running command; renewed every third of it (10 s by default)."""
    try:
        return max(0.3, float(os.environ.get(LEASE_ENV, DEFAULT_LEASE_S)))
    except ValueError:
        return DEFAULT_LEASE_S


@dataclass(frozen=True)
class Owner:
    """A server process, named so that any replica on any host can tell it apart."""

    host: str
    boot: str | None  # /proc/sys/kernel/random/boot_id: None where there is none (not Linux)
    pidns: str | None  # the pid namespace ("pid:[4026531836]"), or None
    pid: int
    started: int | None  # start time in clock ticks since boot (/proc/PID/stat, field 22), or None

    def data(self) -> dict[str, Any]:
        return {"host": self.host, "boot": self.boot, "pidns": self.pidns, "pid": self.pid, "started": self.started}

    @classmethod
    def from_data(cls, data: Any) -> Owner | None:
        """The owner a stored claim names, or None when it names none that can be read."""
        if not isinstance(data, Mapping) or not isinstance(data.get("pid"), int):
            return None
        return cls(str(data.get("host", "")), data.get("boot"), data.get("pidns"), data["pid"], data.get("started"))

    def shares_pids_with(self, other: Owner) -> bool:
        """Whether `other`'s pid can be looked up from here (same kernel boot and pid namespace)."""
        if self.boot is None or other.boot is None:
            return self.boot is None and other.boot is None and self.host == other.host
        if self.boot != other.boot:
            return False
        if self.pidns is None or other.pidns is None:
            return self.host == other.host
        return self.pidns == other.pidns

    def describe(self) -> str:
        return f"process {self.pid} on {self.host or 'an unnamed host'}"


_current: Owner | None = None


def current() -> Owner:
    """This process's identity (looked up again after a fork)."""
    global _current
    if _current is None or _current.pid != os.getpid():
        pid = os.getpid()
        _current = Owner(socket.gethostname(), _read(BOOT_ID), _pid_namespace(), pid, start_time(pid))
    return _current


def start_time(pid: int) -> int | None:
    """When a process started, in clock ticks since boot; None when it does not exist or
    the system does not say."""
    stat = _read(Path(f"/proc/{pid}/stat"))
    if stat is None:
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])  # fields after "(comm)" start at field 3
    except (IndexError, ValueError):
        return None


def runs(owner: Owner) -> bool:
    """Whether the owner process still runs; only meaningful where it `shares_pids_with` us."""
    if not pid_exists(owner.pid):
        return False
    if owner.started is None:
        return True
    now = start_time(owner.pid)
    return now is None or now == owner.started  # another start time: the pid was recycled


def pid_exists(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def abandoned(claim: ShellClaim, me: Owner, now: float) -> str | None:
    """Why a busy command runs nowhere (so it must be adopted, or released and run again),
    or None while its owner may still be running it.  A claim stored by an older version
    has only `owner_pid`.  The caller has already found that this process is not running it."""
    if started_here(claim, me):
        return "this server process started it and no longer runs it"
    owner = Owner.from_data(claim.owner)
    if owner is None:
        return _abandoned_legacy(claim.owner_pid, me)
    local = me.shares_pids_with(owner)
    lease_until = claim.lease_until
    expired = lease_until is None or lease_until < now
    if local and not runs(owner):
        return f"the server {owner.describe()} that ran it is gone"
    if expired:
        late = f" {now - lease_until:.1f} s ago" if lease_until is not None else ""
        return f"the lease of the server {owner.describe()} that ran it expired{late}"
    return None


def started_here(claim: ShellClaim, me: Owner) -> bool:
    """Whether this very process started the claim's command (even if the host was renamed
    since; a claim of an older version names only a pid)."""
    owner = Owner.from_data(claim.owner)
    if owner is None:
        return claim.owner_pid == me.pid
    return me.shares_pids_with(owner) and (owner.pid, owner.started) == (me.pid, me.started)


def _abandoned_legacy(pid: Any, me: Owner) -> str | None:
    """A claim stored before owners and leases: a pid on this host, as it was judged then."""
    if not isinstance(pid, int):
        return "no server process is recorded as running it"
    if pid_exists(pid):
        return None
    return f"the server process {pid} that ran it is gone"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
