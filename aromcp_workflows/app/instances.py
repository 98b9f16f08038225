"""Live workflow instances: loaded once, locked one at a time, saved after every change.

`InstanceRegistry` keeps a `LiveInstance` per workflow id: the `WorkflowRun`, its lock
and the store version it was loaded at.  Every change made under the lock is saved with
that version (compare-and-set), so a second server process writing the same instance is
detected instead of overwritten.  The first use opens the store and the V8 engine, not
the import: server start-up stays as fast as a bare MCP server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aromcp_workflows.definition.loader import WorkflowBundle
from aromcp_workflows.interpreter import WorkflowRun
from aromcp_workflows.store import STATUSES, ConflictError, HistoryEvent, InstanceRecord, InstanceStatus, Store, utc_now

EngineFactory = Callable[[], Any]


class ServiceError(Exception):
    """A request the service refuses; the text says what was wrong and what to do."""


@dataclass
class LiveInstance:
    run: WorkflowRun
    record: InstanceRecord
    lock: threading.RLock = field(default_factory=threading.RLock)
    broken: bool = False
    fingerprint: str = ""  # JSON of what was last saved, to skip saves that change nothing



def record_of(run: WorkflowRun, base: InstanceRecord) -> InstanceRecord:
    """The store record for a run (definition snapshot kept from `base`)."""
    data = run.to_json()
    threads = data.pop("threads")
    current = [t["pending"]["step_id"] for t in threads.values() if t.get("pending")]
    return InstanceRecord(
        workflow_id=run.workflow_id, workflow=base.workflow, project_dir=base.project_dir,
        status=cast(InstanceStatus, run.status if run.status in STATUSES else "running"),
        definition=base.definition, inputs=run.inputs, state=data, threads=threads,
        current_steps=current, error=run.error, version=base.version, created_at=base.created_at,
        updated_at=base.updated_at,
    )


def events_of(run: WorkflowRun) -> list[HistoryEvent]:
    return [HistoryEvent(kind=e["kind"], step_id=e["step_id"], task_id=e["task_id"], data=e["data"],
                         timestamp=e["timestamp"]) for e in run.drain_events()]


def _encode(value: Any) -> str:
    """The JSON text the store keeps; encoded once per commit, also used to spot no-ops."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class InstanceRegistry:
    """Loads, caches, locks and saves instances for one server process."""

    def __init__(self, store_factory: Callable[[], Store], engine_factory: EngineFactory):
        self._store_factory = store_factory
        self._engine_factory = engine_factory
        self._store: Store | None = None
        self._engine: Any = None
        self._live: dict[str, LiveInstance] = {}
        self._guard = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._guard:
                if self._store is None:
                    self._store = self._store_factory()
        return self._store

    @property
    def engine(self) -> Any:
        if self._engine is None:
            with self._guard:
                if self._engine is None:
                    self._engine = self._engine_factory()
        return self._engine

    def create(self, run: WorkflowRun, bundle: WorkflowBundle) -> LiveInstance:
        base = InstanceRecord(workflow_id=run.workflow_id, workflow=bundle.main.name,
                              project_dir=str(run.project_dir), definition=bundle.snapshot(),
                              created_at=utc_now(), updated_at=utc_now())
        record = record_of(run, base)
        record.version = self.store.create(record, events_of(run))
        live = LiveInstance(run, record)
        with self._guard:
            self._live[run.workflow_id] = live
        return live

    def get(self, workflow_id: str) -> LiveInstance:
        """The live instance, reloaded when another server process saved a newer version."""
        with self._guard:
            live = self._live.get(workflow_id)
        if live is not None and not live.broken:
            with live.lock:
                if self.store.version(workflow_id) == live.record.version:
                    return live
        return self.reload(workflow_id)

    def reload(self, workflow_id: str) -> LiveInstance:
        """Read the instance from the store again (after a restart or a conflict)."""
        record = self.store.load(workflow_id)
        bundle = WorkflowBundle.from_snapshot(record.definition)
        run = WorkflowRun.from_json({**record.state, "threads": record.threads, "status": record.status,
                                     "error": record.error}, bundle, self.engine)
        live = LiveInstance(run, record)
        with self._guard:
            self._live[workflow_id] = live
        return live

    def commit(self, live: LiveInstance) -> None:
        """Save the run (and its new history events) at the version it was loaded at.

        Nothing is written when nothing changed (a step merely delivered again), so a
        reader in another server process never turns into a writer's conflict."""
        record = record_of(live.run, live.record)
        events = events_of(live.run)
        encoded = {"state": _encode(record.state), "threads": _encode(record.threads)}
        fingerprint = f"{record.status}\x00{record.error}\x00{encoded['state']}\x00{encoded['threads']}"
        if not events and fingerprint == live.fingerprint:
            return
        try:
            record.version = self.store.save(record, live.record.version, events, encoded=encoded)
        except ConflictError as exc:
            live.broken = True
            raise ServiceError(
                f"Another server process (or a rollback) changed workflow {live.run.workflow_id} while this "
                f"call was working on it (expected version {exc.expected_version}, found {exc.found_version}); "
                "this call's change was not saved. Call workflow_get_next_step (or workflow_state_read) to see "
                "where it stands now, then retry.") from None
        live.record = record
        live.fingerprint = fingerprint
        reason, live.run.checkpoint_requested = live.run.checkpoint_requested, None
        if reason:  # error_handling checkpoint_and_fail: keep the state as it was when it failed
            self.store.add_checkpoint(record.workflow_id, None, reason, record.snapshot())

    def forget(self, workflow_id: str) -> None:
        with self._guard:
            self._live.pop(workflow_id, None)

    def live_count(self) -> int:
        return len(self._live)
