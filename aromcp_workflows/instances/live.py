"""The live copies of instances: loaded once, kept in memory, locked one call at a time,
and kept current with what other server processes commit.

`LiveCopies.current` hands a caller the live copy of an instance, locked and up to
date: caught up by the deltas committed since (`instances.catch_up`) when it can be, else
loaded whole.  A copy a failed change may have touched is dropped and never handed out
again.  Committing changes to these copies is `InstanceRegistry`'s
(`instances/registry.py`), which has one `LiveCopies`.

The copies serve the instances of one project (`scope`, its directory as the store
records it): every road that loads an instance by id passes `load`, which answers an
instance of another project exactly as it answers an unknown id.  `scope=None` serves
every project (`serve --all-projects`, the local CLI).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

from aromcp_workflows.definition import WorkflowBundle
from aromcp_workflows.instances.catch_up import apply_to_run
from aromcp_workflows.instances.commits import Baseline, baseline_of, threads_for_run
from aromcp_workflows.instances.errors import refusals
from aromcp_workflows.instances.resources import Resources
from aromcp_workflows.interpreter import WorkflowRun
from aromcp_workflows.store import CommitsSince, InstanceRecord, NotFoundError, SentSave, Store, note_caught_up

T = TypeVar("T")
TRUST_AFTER = 8  # found current this many times in a row: a change relies on its compare-and-set


@dataclass
class LiveInstance:
    run: WorkflowRun
    record: InstanceRecord
    baseline: Baseline
    lock: threading.RLock = field(default_factory=threading.RLock)
    dropped: bool = False  # forgotten: a failed change may have left uncommitted work in `run`
    streak: int = 0  # times in a row the store said this copy was current
    checked: bool = True  # whether this turn's holder got a copy checked against the store
    unconfirmed: tuple[SentSave, InstanceRecord] | None = None  # a save sent, not yet confirmed


def without_body(record: InstanceRecord) -> InstanceRecord:
    """The record a live instance keeps: its metadata only.  The run holds the state and
    threads, and the baseline what a commit compares with; a decoded copy of the body
    next to them was most of a waiting instance's memory."""
    return replace(record, state={}, threads={})


def kept(run: WorkflowRun, record: InstanceRecord) -> tuple[InstanceRecord, Baseline]:
    """What a live instance keeps of the record it was started or loaded from."""
    return without_body(record), baseline_of(run, record)


class LiveCopies:
    """The live copies of one server process's instances, each current and locked in turn.
    The registry (`instances.registry`) has one, and commits to the copies it hands out."""

    def __init__(self, resources: Resources, scope: str | None):
        self.resources = resources
        self.scope = scope
        self._live: dict[str, LiveInstance] = {}
        self._in_project: set[str] = set()  # ids found to be of `scope`
        self._guard = threading.Lock()

    @property
    def store(self) -> Store:
        return self.resources.store

    def add(self, live: LiveInstance, project_dir: str) -> None:
        """Keep a copy just committed as a new instance (a start, a fork)."""
        with self._guard:
            self._live[live.run.workflow_id] = live
            if project_dir == self.scope:
                self._in_project.add(live.run.workflow_id)  # `in_scope` need not load it to know

    # -- the live copy, current and locked ----------------------------------------------------
    @contextmanager
    def current(self, workflow_id: str, verify: bool = True) -> Iterator[LiveInstance]:
        """The live instance, up to date and locked for the caller.

        Brought up to date when another server process committed since: by its deltas
        when it can be, else reloaded whole.  A live copy dropped by a failed change of
        another call (its run holds what was never committed) is never handed out: the
        lock is taken and the copy checked in one go, with no gap between.

        `verify=False` (a change, which `transact` checks itself) skips asking the store
        for the version when this copy was found current the last `TRUST_AFTER` times:
        one round trip less per step where one process serves the instance.  `checked`
        on the live copy says which it was."""
        while True:
            with self._guard:
                live = self._live.get(workflow_id)
            fresh = live is None
            if live is None:
                live = self._reload(workflow_id)
            with live.lock:
                if live.dropped or not self._confirmed(live):
                    continue
                live.checked = fresh or verify or live.streak < TRUST_AFTER
                if fresh or not live.checked or self._brought_up_to_date(live):
                    yield live
                    return
            # behind, and not brought up to date by deltas: `_catch_up` dropped it; load it

    def _confirmed(self, live: LiveInstance) -> bool:
        """Wait for the save the last change sent without waiting (`confirm`), under the
        instance's lock; False (and the copy dropped) when it was not committed: the copy
        holds a change the store does not."""
        if live.unconfirmed is None:
            return True
        pending, record = live.unconfirmed
        live.unconfirmed = None
        try:
            pending.result()
        except Exception:  # a conflict or a store failure: whoever made the call is told by its confirmation
            self.drop(live)
            return False
        live.record = without_body(record)
        return True

    def _brought_up_to_date(self, live: LiveInstance) -> bool:
        """The live copy is current, or was just caught up by deltas; False (and the copy
        dropped) when it must be reloaded.  A store whose `deltas_since` costs what its
        `version` costs answers both questions in one trip."""
        if not self.store.check_with_deltas:
            return self.is_current(live) or self._catch_up(live)
        since = self._commits_since(live)
        current = since is not None and since.version == live.record.version
        live.streak = live.streak + 1 if current else 0
        return current or self._apply(live, since)

    def is_current(self, live: LiveInstance) -> bool:
        """Ask the store whether the live copy is the latest version (and keep count)."""
        current = translate(lambda: self.store.version(live.run.workflow_id)) == live.record.version
        live.streak = live.streak + 1 if current else 0
        return current

    def _commits_since(self, live: LiveInstance) -> CommitsSince | None:
        workflow_id, version = live.run.workflow_id, live.record.version
        return translate(lambda: self.store.deltas_since(workflow_id, version))

    def _catch_up(self, live: LiveInstance) -> bool:
        """Apply the deltas committed since the live copy's version; False (and the live
        copy dropped) when they cannot tell the change, so the caller reloads."""
        return self._apply(live, self._commits_since(live))

    def _apply(self, live: LiveInstance, since: CommitsSince | None) -> bool:
        """Bring the live copy to `since`; False (and the copy dropped) when that cannot be done."""
        if since is None:  # a full snapshot since: this copy can only be replaced
            self.drop(live)
            return False
        try:
            apply_to_run(live.run, live.baseline.items, since.deltas)
        except Exception:  # anything unexpected in a delta: the whole load is the safe road
            self.drop(live)
            return False
        note_caught_up(live.record, since)
        live.baseline = baseline_of(live.run, live.record)
        return True

    def load(self, workflow_id: str) -> InstanceRecord:
        """The stored record, if the instance is this registry's project's: an instance of
        another project is not found, in the very words an unknown id gets, so a client of
        one project can neither use nor detect another project's instances."""
        record = self.store.load(workflow_id)
        if self.scope is not None and record.project_dir != self.scope:
            raise NotFoundError(workflow_id, self.store.path)
        self._in_project.add(workflow_id)
        return record

    def in_scope(self, workflow_id: str) -> None:
        """Refuse an instance of another project before reading anything of it from the
        store.  An id once found in scope stays so (an instance never changes project)."""
        if self.scope is not None and workflow_id not in self._in_project:
            translate(lambda: self.load(workflow_id))

    def _reload(self, workflow_id: str) -> LiveInstance:
        record = translate(lambda: self.load(workflow_id))
        bundle = WorkflowBundle.from_snapshot(record.definition)
        record.definition = bundle.snapshot()  # the shared dict; the copy just decoded is dropped
        run = WorkflowRun.from_json({**record.state, "threads": threads_for_run(record), "status": record.status,
                                     "error": record.error}, bundle, self.resources.engine, self.resources.prompt)
        live = LiveInstance(run, *kept(run, record))
        with self._guard:
            self._live[workflow_id] = live
        return live

    def forget(self, workflow_id: str) -> None:
        """Forget the live copy: the next call loads the instance from the store."""
        with self._guard:
            self._live.pop(workflow_id, None)

    def drop(self, live: LiveInstance) -> None:
        """Never hand out this copy again (its run may hold what was never committed); only
        this copy: another call's good copy of the same instance stays live."""
        live.dropped = True
        with self._guard:
            if self._live.get(live.run.workflow_id) is live:
                del self._live[live.run.workflow_id]



def translate(action: Callable[[], T]) -> T:
    """`action`'s value, its expected failures turned into `ServiceError`s (`refusals`)."""
    with refusals():
        return action()
