"""What a commit writes: the changes since the last save, or now and then a full snapshot.

A step usually changes a few state values, one thread and the status; the instance may
hold a 100,000-item list it never touches.  Writing the whole instance per commit made a
step's cost grow with everything the instance holds.  So a commit compares the run with
its `Baseline` (what the store holds) and writes a *delta*: the top-level state values
the state store marked as written (for a list that was only appended to, the new items),
the threads and small sections whose JSON changed.
The store keeps the deltas beside the last full snapshot and applies them on load.

A full snapshot is written as well when the deltas since the last one are many or add up
to more bytes than the snapshot itself.  "Many" is `MAX_DELTAS`, or one per KB of
snapshot for a big instance: applying that many small deltas costs a load about what
decoding the snapshot does, and rewriting a large snapshot that rarely keeps its
amortised cost per step small.  Between those, a commit's cost is what it changed, not
what the instance holds.  A snapshot keeps the deltas since the previous one and stores
its own delta beside it, so a server process whose copy is a few commits behind catches
up by deltas across it (the store holds at most about three times the instance: the
snapshot and the deltas since each of the last two).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.expressions import MISSING
from aromcp_workflows.interpreter import Thread, WorkflowRun
from aromcp_workflows.state import StateTiers
from aromcp_workflows.store import STATUSES, InstanceRecord, StatusValue

MAX_DELTAS = 100  # deltas between two full snapshots of a small instance
DELTAS_PER_SNAPSHOT_BYTE = 1 / 1024  # ... and of a big one: one per KB of snapshot
MIN_DELTA_BYTES = 256 * 1024  # deltas may always add up to this much before a snapshot
FIXED_SECTIONS = ("workflow_id", "project_dir", "inputs", "forked_from")  # set at start, never changed by a run
LOOP_ITEMS = "loop_items"  # the section holding every running foreach's items, out of its thread
RIDE_ALONG = ("last_calls",)  # sections written with a commit that writes anyway, never on their own


def encode(value: Any) -> str:
    """The JSON text the store keeps (compact, exact, no NaN)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass
class ThreadEntry:
    """One thread as stored: its JSON (loop items moved out), that JSON's text, the items."""

    data: dict[str, Any]
    text: str
    items: dict[str, Any]


@dataclass
class Baseline:
    """What the store holds of a live instance, in the form a commit compares against."""

    states: dict[str, StateTiers] = field(default_factory=dict)  # the state objects saved (by identity)
    sections: dict[str, str] = field(default_factory=dict)  # JSON of the small top-level sections
    threads: dict[str, ThreadEntry] = field(default_factory=dict)
    items: dict[str, Any] = field(default_factory=dict)  # each running foreach's items list (by identity)
    meta: tuple[Any, ...] = ()  # status, error, current steps


@dataclass
class Commit:
    """One planned write: the record, its delta, and now and then the full body's JSON."""

    record: InstanceRecord
    baseline: Baseline
    changed: bool
    delta: str | None = None
    encoded: dict[str, str] | None = None  # set: write a full snapshot too
    definition_changed: bool = False  # the run moved onto another definition (a migration): write it


def record_of(run: WorkflowRun, base: InstanceRecord,
              entries: dict[str, ThreadEntry] | None = None) -> InstanceRecord:
    """The store record for a run (bookkeeping kept from `base`; the definition snapshot is
    the run's, the same shared dict as `base`'s unless the run was migrated); `entries` may
    carry the threads already in stored form."""
    entries = entries if entries is not None else {tid: entry_of(tid, t) for tid, t in run.threads.quiet_items()}
    data = run.to_json(threads=False)
    threads = {tid: entry.data for tid, entry in entries.items()}
    data[LOOP_ITEMS] = {key: value for entry in entries.values() for key, value in entry.items.items()}
    current = [t["pending"]["step_id"] for t in threads.values() if t.get("pending")]
    status: StatusValue = run.status if run.status in STATUSES else "running"  # type: ignore[assignment]
    return InstanceRecord(
        workflow_id=run.workflow_id, workflow=base.workflow, project_dir=base.project_dir,
        status=status,
        definition=run.bundle.snapshot(), inputs=run.machine.inputs, state=data, threads=threads,
        current_steps=current, error=run.error, version=base.version, created_at=base.created_at,
        updated_at=base.updated_at, snapshot_version=base.snapshot_version, deltas=base.deltas,
        delta_bytes=base.delta_bytes, body_bytes=base.body_bytes,
    )


def baseline_of(run: WorkflowRun, record: InstanceRecord) -> Baseline:
    """The baseline of a run that matches the store exactly (just loaded, fully saved, or
    caught up); built from the run itself, with the status columns of `record`.  Any dirty
    marks the state stores and the thread table carry are already in the store: cleared."""
    for store in run.states.values():
        store.take_dirty()
    run.threads.take_reached()
    entries = {tid: entry_of(tid, t) for tid, t in run.threads.quiet_items()}
    return Baseline(states=dict(run.states),
                    sections={k: encode(v) for k, v in run.to_json(threads=False).items()
                              if _tracked(k) or k in RIDE_ALONG},
                    threads=entries,
                    items={key: value for entry in entries.values() for key, value in entry.items.items()},
                    meta=(record.status, record.error, record.current_steps))


def plan(run: WorkflowRun, live_record: InstanceRecord, baseline: Baseline, journalled: bool) -> Commit:
    """The write that brings the store from `baseline` to `run`."""
    ops: list[Any] = []  # operations, or the JSON text of one already encoded
    entries = _thread_ops(run, baseline, ops)
    record = record_of(run, live_record, entries)
    _state_ops(run, record, baseline, ops)
    sections = _section_ops(record, baseline, ops)
    items = _items_ops(record, baseline, ops)
    meta = (record.status, record.error, record.current_steps)
    after = Baseline(states=dict(run.states), sections=sections, threads=entries, items=items, meta=meta)
    moved = record.definition is not live_record.definition  # snapshots are shared per content
    commit = Commit(record, after, changed=bool(ops) or journalled or meta != baseline.meta or moved,
                    definition_changed=moved)
    if commit.changed:
        _ride_along_ops(record, baseline, ops, sections)
    if moved:  # the deltas before it read the old definition: the body is written whole
        commit.encoded = {"state": encode(record.state), "threads": encode(record.threads)}
        return commit
    if not commit.changed:
        return commit
    delta = "[" + ",".join(op if isinstance(op, str) else encode(op) for op in ops) + "]"
    budget = max(MIN_DELTA_BYTES, record.body_bytes)
    most = max(MAX_DELTAS, int(record.body_bytes * DELTAS_PER_SNAPSHOT_BYTE))
    commit.delta = delta
    if record.deltas >= most or record.delta_bytes + len(delta) > budget:
        commit.encoded = {"state": encode(record.state), "threads": encode(record.threads)}
        if len(delta) > budget:  # kept beside the snapshot it would double the write: copies behind reload
            commit.delta = None
    return commit


def _tracked(section: str) -> bool:
    return section not in FIXED_SECTIONS and section not in ("states", LOOP_ITEMS, *RIDE_ALONG)


def _ride_along_ops(record: InstanceRecord, baseline: Baseline, ops: list[Any], sections: dict[str, str]) -> None:
    """The sections that change on calls that otherwise change nothing (when an agent last
    called): written with this commit, which writes anyway, so a re-delivered step or a
    read never costs a store write for them."""
    for key in RIDE_ALONG:
        if key in record.state:
            sections[key] = text = encode(record.state[key])
            if baseline.sections.get(key) != text:
                ops.append(["s", "state", [key], record.state[key]])


def _state_ops(run: WorkflowRun, record: InstanceRecord, baseline: Baseline, ops: list[list[Any]]) -> None:
    """The top-level state values written since the last save (of a list only appended
    to, the items appended); a state store that is new (an include or a task started)
    is written whole."""
    snapshots = record.state["states"]
    for key, store in run.states.items():
        if baseline.states.get(key) is not store:
            store.take_dirty()
            ops.append(["s", "state", ["states", key], snapshots[key]])
            continue
        for tier, name, value, kept in store.take_dirty():
            path = ["states", key, tier, name]
            if value is MISSING:
                ops.append(["d", "state", path])
            elif kept is not None:  # appends only: the new items, not the whole list again
                ops.append(["a", "state", path, kept, value[kept:]])
            else:
                ops.append(["s", "state", path, value])
    ops.extend(["d", "state", ["states", key]] for key in baseline.states if key not in run.states)


def _section_ops(record: InstanceRecord, baseline: Baseline, ops: list[list[Any]]) -> dict[str, str]:
    """The small sections (groups, counters, retries, …) whose JSON changed."""
    sections: dict[str, str] = {}
    for key, value in record.state.items():
        if not _tracked(key):
            continue
        sections[key] = text = encode(value)
        if baseline.sections.get(key) != text:
            ops.append(["s", "state", [key], value])
    return sections


def _thread_ops(run: WorkflowRun, baseline: Baseline, ops: list[Any]) -> dict[str, ThreadEntry]:
    """Every thread in stored form; those the call reached are encoded again and written
    when their JSON changed, the others are taken from the baseline as they are."""
    reached = run.threads.take_reached()
    entries: dict[str, ThreadEntry] = {}
    for tid, thread in run.threads.quiet_items():
        before = baseline.threads.get(tid)
        if before is not None and reached is not None and tid not in reached:
            entries[tid] = before
            continue
        entries[tid] = entry = entry_of(tid, thread)
        if before is None or before.text != entry.text:  # its text is reused, not encoded again
            ops.append(f'["s","threads",{encode([tid])},{entry.text}]')
    ops.extend(["d", "threads", [tid]] for tid in baseline.threads if tid not in entries)
    return entries


def _items_ops(record: InstanceRecord, baseline: Baseline, ops: list[list[Any]]) -> dict[str, Any]:
    """The items of loops entered since the last save (a loop's list never changes while it
    runs, so identity says it all), and of loops that ended."""
    items: dict[str, Any] = record.state[LOOP_ITEMS]
    for key, value in items.items():
        if baseline.items.get(key) is not value:
            ops.append(["s", "state", [LOOP_ITEMS, key], value])
    ops.extend(["d", "state", [LOOP_ITEMS, key]] for key in baseline.items if key not in items)
    return dict(items)


# -- foreach items live beside the threads, not in them ------------------------------------
# A thread changes at every step (its pc, its loop index); a foreach's items do not.  Kept
# in the thread, a 5,000-item loop was re-encoded and re-written with every step.
def entry_of(tid: str, thread: Thread) -> ThreadEntry:
    """A thread in stored form: its loops' items moved out (the loop keeps `items_ref`, its
    key in the items section).  `Thread.to_json` makes fresh dicts down to the frames but
    shares the loop dicts with the live run, so those are copied, never changed."""
    data = thread.to_json()
    found: dict[str, Any] = {}
    for f, frame in enumerate(data["frames"]):
        loops = []
        for n, loop in enumerate(frame["loops"]):
            if loop.get("items") is not None:
                key = f"{tid}/{f}/{n}/{loop['loop_id']}"
                found[key] = loop["items"]
                loop = {**loop, "items": None, "items_ref": key}
            loops.append(loop)
        frame["loops"] = loops
    return ThreadEntry(data, encode(data), found)


def threads_for_run(record: InstanceRecord) -> dict[str, Any]:
    """The record's threads with each loop's items back in place, as `WorkflowRun.from_json`
    reads them (copies: the record keeps its stored form).  A record stored before items
    moved out has none to put back."""
    items = record.state.get(LOOP_ITEMS) or {}
    return {tid: thread_for_run(thread, items) for tid, thread in record.threads.items()}


def thread_for_run(thread: dict[str, Any], items: dict[str, Any]) -> dict[str, Any]:
    """One stored thread with its loops' items put back (KeyError: an unknown items key)."""
    frames = [{**frame, "loops": [_inlined(loop, items) for loop in frame.get("loops", [])]}
              for frame in thread["frames"]]
    return {**thread, "frames": frames}


def _inlined(loop: dict[str, Any], items: dict[str, Any]) -> dict[str, Any]:
    if "items_ref" not in loop:
        return loop
    loop = dict(loop)
    loop["items"] = items[loop.pop("items_ref")]
    return loop
