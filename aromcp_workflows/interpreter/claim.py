"""The claim on a running server-side command: who runs it, where its files are, until when.

A pending shell step carries its claim in the instance, so that any server (in this
process, another process, or a replica on another host) that finds the step busy can tell
whether its runner still lives (`shell.owner.abandoned`) and, on the same machine, adopt the
command from its run directory instead of running it again.  The interpreter stores the
claim and compares it; it never judges it.

Stored form: the keys of `FIELDS`, flat in the pending step's data, as every version wrote
them (`started_at` is new: older claims read without it).  Instances stored before owners
and leases carry only `owner_pid`, and a value of the wrong type reads as absent, so a claim
of any age reads back (`from_data`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

FIELDS = ("owner", "lease_until", "owner_pid", "run_dir", "deadline", "started_at")


@dataclass(frozen=True)
class ShellClaim:
    """A pending command's claim.  `owner` is the runner's identity as
    `shell.owner.Owner.data()` stores it; `owner_pid` is what servers of older versions
    judge a claim by; `lease_until`, `deadline` and `started_at` are wall-clock seconds
    (`time.time()`): the lease its runner renews, when its timeout kills it, and when it
    started (what a caller told to wait is told how long it has run)."""

    owner: Mapping[str, Any] | None = None
    lease_until: float | None = None
    owner_pid: int | None = None
    run_dir: str | None = None
    deadline: float | None = None
    started_at: float | None = None

    def to_data(self) -> dict[str, Any]:
        """The stored form (absent fields left out)."""
        data = {"owner": None if self.owner is None else dict(self.owner), "lease_until": self.lease_until,
                "owner_pid": self.owner_pid, "run_dir": self.run_dir, "deadline": self.deadline,
                "started_at": self.started_at}
        return {key: value for key, value in data.items() if value is not None}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ShellClaim:
        """The claim stored in `data` (a pending step's data, of any version)."""
        owner, pid, run_dir = data.get("owner"), data.get("owner_pid"), data.get("run_dir")
        return cls(owner=dict(owner) if isinstance(owner, Mapping) else None,
                   lease_until=_seconds(data.get("lease_until")),
                   owner_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                   run_dir=run_dir if isinstance(run_dir, str) else None,
                   deadline=_seconds(data.get("deadline")), started_at=_seconds(data.get("started_at")))

    @property
    def timeout_ms(self) -> int | None:
        """The step's timeout the claim was made with (its deadline less its start), for the
        message of a server that kills the command at that deadline; None when it does not say."""
        if self.deadline is None or self.started_at is None:
            return None
        return max(1, round((self.deadline - self.started_at) * 1000))

    def renewed(self, owner: Mapping[str, Any], owner_pid: int, lease_until: float) -> ShellClaim:
        """The same command (run directory, deadline) claimed by `owner` until `lease_until`."""
        return replace(self, owner=dict(owner), owner_pid=owner_pid, lease_until=lease_until)


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
