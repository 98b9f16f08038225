"""The state of an instance as it was after any step: its history replayed.

Every `state_changed` event keeps what its batch wrote (`UpdateResult.writes`) and the
`started` event the state the run began with, so the state after event `seq` is the
start replayed up to there (`state.replay_writes`, the update path rules themselves).  A
roll-back to a checkpoint puts the checkpoint's state back.  Events written before the
history kept the writes make the replay incomplete from there on: it says so instead of
showing a wrong state.

Secrets: a value that was secret at any point of the history (under a declared secret's
key, or a string under a secret's name) is masked wherever it appears, even when the
state of now no longer holds it (as `transform_traces` does for past computed values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.safety import Masker, secret_values
from aromcp_workflows.state import StateError, replay_writes

TIERS = ("raw", "state", "computed")
CheckpointState = Callable[[str], dict[str, Any] | None]  # checkpoint id -> its main {raw, state, computed}


@dataclass
class StateReplay:
    """The main state after some event, how it changed there, and whether it is whole."""

    seq: int
    tiers: dict[str, Any] = field(default_factory=lambda: {t: {} for t in TIERS})
    changed: list[str] = field(default_factory=list)
    complete: bool = False
    note: str | None = None
    secrets: set[str] = field(default_factory=set)


def is_point(event: Any) -> bool:
    """An event after which the main state may differ: the start, a change, a roll-back."""
    if event.kind == "state_changed":
        return "state" not in event.data  # an included workflow's own state is not the main one
    return event.kind in ("started", "rolled_back")


def state_points(events: Iterable[Any]) -> list[dict[str, Any]]:
    """Every point the state can be shown at: seq, time, step, task, what changed."""
    return [{"seq": e.seq, "timestamp": e.timestamp, "kind": e.kind, "step_id": e.step_id, "task_id": e.task_id,
             "changed": changed_paths(e), "by": e.data.get("by")} for e in events if is_point(e)]


def changed_paths(event: Any) -> list[str]:
    if event.kind != "state_changed":
        return []
    return list(event.data.get("paths") or []) + [f"computed.{n}" for n in event.data.get("computed_changed") or []]


def replay(events: Iterable[Any], seq: int | None, checkpoint_state: CheckpointState,
           masker: Masker | None = None) -> StateReplay:
    """The main state after event `seq` (None: after the last), with every secret the
    whole history held (`secrets`, by `masker`'s rules) so that past values are masked too."""
    out = StateReplay(0)
    masker = masker or Masker()
    for event in events:
        if not is_point(event):
            continue
        if seq is None or (event.seq or 0) <= seq:
            _apply(out, event, checkpoint_state)
            out.seq, out.changed = event.seq or 0, changed_paths(event)
        out.secrets |= _secrets_of(event, masker)
    return out


def _apply(out: StateReplay, event: Any, checkpoint_state: CheckpointState) -> None:
    if event.kind == "started":
        initial = event.data.get("state")
        out.tiers = {t: dict((initial or {}).get(t) or {}) for t in TIERS}
        out.complete, out.note = initial is not None, None if initial is not None else (
            "this instance was started by an older version, which did not keep its initial state")
    elif event.kind == "rolled_back":
        restored = checkpoint_state(str(event.data.get("checkpoint_id")))
        out.tiers = {t: dict((restored or {}).get(t) or {}) for t in TIERS}
        if restored is None:
            out.complete, out.note = False, f"checkpoint {event.data.get('checkpoint_id')} is gone"
    elif "writes" not in event.data:
        out.complete, out.note = False, "a change written by an older version did not keep its values"
    else:
        try:
            out.tiers = replay_writes(out.tiers, event.data["writes"])
        except StateError as exc:
            out.complete, out.note = False, f"event {event.seq} could not be replayed: {exc}"


def _secrets_of(event: Any, masker: Masker) -> set[str]:
    """The secrets an event's values hold: the strings under a key `masker` masks whole
    (a declared secret, a secret's name) in the state it started with, or written there."""
    writes: list[tuple[list[Any], Any]] = []
    if event.kind == "started":
        tiers = event.data.get("state") or {}
        writes = [([tier, key], value) for tier in TIERS for key, value in (tiers.get(tier) or {}).items()]
    elif event.kind == "state_changed":
        writes = [(write[1], write[2]) for write in event.data.get("writes") or [] if write[0] != "d"]
    found: set[str] = set()
    for path, value in writes:
        if any(isinstance(segment, str) and masker.masks_whole(segment) for segment in path[1:]):
            found |= secret_values({"secret": value})
    return found


def masked(state: StateReplay, masker: Masker) -> dict[str, Any]:
    """The replayed tiers as a reply shows them: masked by key and by every past secret."""
    return masker.with_secrets(state.secrets).mask(state.tiers)
