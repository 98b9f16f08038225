"""The live copies of instances: loaded once, kept in memory, locked one call at a time,
and kept current with what other server processes commit.

`LiveInstances._current` hands a caller the live copy of an instance, locked and up to
date: caught up by the deltas committed since (`app.catch_up`) when it can be, else
loaded whole.  A copy a failed change may have touched is dropped and never handed out
again.  Committing changes to these copies is `InstanceRegistry`'s (app/instances.py),
which is built on this class.

The copies serve the instances of one project (`scope`, its directory as the store
records it): every road that loads an instance by id passes `_load`, which answers an
instance of another project exactly as it answers an unknown id.  `scope=None` serves
every project (`serve --all-projects`, the local CLI).

The first use opens the store and the V8 engine, not the import: server start-up stays as
fast as a bare MCP server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from aromcp_workflows.app.catch_up import apply_to_run
from aromcp_workflows.app.commits import Baseline, baseline_of, threads_for_run
from aromcp_workflows.app.errors import refusals
from aromcp_workflows.definition.loader import WorkflowBundle
from aromcp_workflows.interpreter import WorkflowRun
from aromcp_workflows.store import (
    CommitsSince,
    InstanceRecord,
    NotFoundError,
    SavesLater,
    SentSave,
    Store,
    note_caught_up,
)

T = TypeVar("T")
EngineFactory = Callable[[], Any]
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


def _sub_agent_prompt() -> str | None:
    try:
        from aromcp_workflows.integrations.prompts import sub_agent_prompt

        return sub_agent_prompt()
    except Exception:  # a missing prompt file must not stop a workflow: the built-in text serves
        return None


class LiveInstances:
    """The live copies of one server process's instances (the base of `InstanceRegistry`)."""

    def __init__(self, store_factory: Callable[[], Store], engine_factory: EngineFactory, scope: str | None):
        self._store_factory = store_factory
        self.scope = scope
        self._engine_factory = engine_factory
        self._store: Store | None = None
        self._saves_later: SavesLater | None = None  # the store, when it is one
        self._engine: Any = None
        self._prompt: str | None = None
        self._live: dict[str, LiveInstance] = {}
        self._in_project: set[str] = set()  # ids found to be of `scope`
        self._guard = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._guard:
                if self._store is None:
                    store = self._store_factory()
                    self._saves_later = store if isinstance(store, SavesLater) else None
                    self._store = store
        return self._store

    @property
    def saves_later(self) -> SavesLater | None:
        """The store, if its saves can be sent now and answered later (`SavesLater`; asked
        once: an isinstance against a protocol costs microseconds, a step's budget is ~1 ms)."""
        self.store  # noqa: B018 - opens it
        return self._saves_later

    @property
    def opened(self) -> bool:
        """Whether the store was opened (asking `store` opens it)."""
        return self._store is not None

    @property
    def engine(self) -> Any:
        if self._engine is None:
            with self._guard:
                if self._engine is None:
                    self._engine = self._engine_factory()
        return self._engine

    @property
    def prompt(self) -> str | None:
        """The sub-agent prompt text runs hand out (read once; the interpreter reads no files)."""
        if self._prompt is None:
            self._prompt = _sub_agent_prompt()
        return self._prompt

    # -- the live copy, current and locked ----------------------------------------------------
    @contextmanager
    def _current(self, workflow_id: str, verify: bool = True) -> Iterator[LiveInstance]:
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
            self._drop(live)
            return False
        live.record = without_body(record)
        return True

    def _brought_up_to_date(self, live: LiveInstance) -> bool:
        """The live copy is current, or was just caught up by deltas; False (and the copy
        dropped) when it must be reloaded.  A store whose `deltas_since` costs what its
        `version` costs answers both questions in one trip."""
        if not self.store.check_with_deltas:
            return self._is_current(live) or self._catch_up(live)
        since = self._commits_since(live)
        current = since is not None and since.version == live.record.version
        live.streak = live.streak + 1 if current else 0
        return current or self._apply(live, since)

    def _is_current(self, live: LiveInstance) -> bool:
        """Ask the store whether the live copy is the latest version (and keep count)."""
        current = self._translate(lambda: self.store.version(live.run.workflow_id)) == live.record.version
        live.streak = live.streak + 1 if current else 0
        return current

    def _commits_since(self, live: LiveInstance) -> CommitsSince | None:
        workflow_id, version = live.run.workflow_id, live.record.version
        return self._translate(lambda: self.store.deltas_since(workflow_id, version))

    def _catch_up(self, live: LiveInstance) -> bool:
        """Apply the deltas committed since the live copy's version; False (and the live
        copy dropped) when they cannot tell the change, so the caller reloads."""
        return self._apply(live, self._commits_since(live))

    def _apply(self, live: LiveInstance, since: CommitsSince | None) -> bool:
        """Bring the live copy to `since`; False (and the copy dropped) when that cannot be done."""
        if since is None:  # a full snapshot since: this copy can only be replaced
            self._drop(live)
            return False
        try:
            apply_to_run(live.run, live.baseline.items, since.deltas)
        except Exception:  # anything unexpected in a delta: the whole load is the safe road
            self._drop(live)
            return False
        note_caught_up(live.record, since)
        live.baseline = baseline_of(live.run, live.record)
        return True

    def _load(self, workflow_id: str) -> InstanceRecord:
        """The stored record, if the instance is this registry's project's: an instance of
        another project is not found, in the very words an unknown id gets, so a client of
        one project can neither use nor detect another project's instances."""
        record = self.store.load(workflow_id)
        if self.scope is not None and record.project_dir != self.scope:
            raise NotFoundError(workflow_id, self.store.path)
        self._in_project.add(workflow_id)
        return record

    def _in_scope(self, workflow_id: str) -> None:
        """Refuse an instance of another project before reading anything of it from the
        store.  An id once found in scope stays so (an instance never changes project)."""
        if self.scope is not None and workflow_id not in self._in_project:
            self._translate(lambda: self._load(workflow_id))

    def _reload(self, workflow_id: str) -> LiveInstance:
        record = self._translate(lambda: self._load(workflow_id))
        bundle = WorkflowBundle.from_snapshot(record.definition)
        record.definition = bundle.snapshot()  # the shared dict; the copy just decoded is dropped
        run = WorkflowRun.from_json({**record.state, "threads": threads_for_run(record), "status": record.status,
                                     "error": record.error}, bundle, self.engine, self.prompt)
        live = LiveInstance(run, *kept(run, record))
        with self._guard:
            self._live[workflow_id] = live
        return live

    def forget(self, workflow_id: str) -> None:
        """Forget the live copy: the next call loads the instance from the store."""
        with self._guard:
            self._live.pop(workflow_id, None)

    def _drop(self, live: LiveInstance) -> None:
        """Never hand out this copy again (its run may hold what was never committed); only
        this copy: another call's good copy of the same instance stays live."""
        live.dropped = True
        with self._guard:
            if self._live.get(live.run.workflow_id) is live:
                del self._live[live.run.workflow_id]

    @staticmethod
    def _translate(action: Callable[[], T]) -> T:
        with refusals():
            return action()
