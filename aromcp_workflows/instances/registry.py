"""The instance layer's commits: new instances, one transaction per change, the only place that commits.

`InstanceRegistry.transact(workflow_id, change)` takes the instance's lock, applies
`change` to the live run, performs the effects the run journalled (history events,
checkpoints) and saves — all in one store write, compare-and-set on the version the run
was loaded at.  Either all of it is stored or nothing is: when the save fails, the live
copy is dropped, so memory never holds what disk does not.  A conflict (another server
process wrote the instance first) is not the caller's problem: the instance is reloaded
and `change` applied again, a bounded number of times with jitter.

The live copies themselves — loaded, cached, locked, kept current, and of one project
only — are the registry's `LiveCopies` (`instances/live.py`); this module creates
instances and commits every change to them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aromcp_workflows.definition import WorkflowBundle
from aromcp_workflows.explain import step_type
from aromcp_workflows.instances import confirm
from aromcp_workflows.instances.commits import plan, record_of, threads_for_run
from aromcp_workflows.instances.errors import Hint, ServiceError
from aromcp_workflows.instances.live import LiveCopies, LiveInstance, kept, translate, without_body
from aromcp_workflows.instances.rebuild import OPENING_KINDS
from aromcp_workflows.instances.resources import EngineFactory, Resources
from aromcp_workflows.interpreter import Journal, WorkflowRun
from aromcp_workflows.observe import Observer, ended, instance_trace, root_ends
from aromcp_workflows.safety import Masker
from aromcp_workflows.store import (
    Body,
    Checkpoint,
    ConflictError,
    HistoryEvent,
    InstanceFilter,
    InstanceGroup,
    InstancePage,
    InstanceRecord,
    InstanceSummary,
    KeyTakenError,
    OutcomeUnknownError,
    StartKey,
    Store,
    StoreError,
    utc_now,
)

if TYPE_CHECKING:
    from aromcp_workflows.expressions import ExpressionEngine

T = TypeVar("T")
log = logging.getLogger("aromcp_workflows")
CONFLICT_PATIENCE_S = 10.0  # how long a call keeps re-applying itself after losing races
CONFLICT_BACKOFF_S = (0.002, 0.025)  # jittered backoff between rounds: first, and at most


def history_events(journal: Journal, version: int) -> list[HistoryEvent]:
    """The journalled events as the store keeps them; a step handed out or started carries
    the version of the commit that did it (the state just before the step: `app.rebuild`)."""
    return [HistoryEvent(kind=e.kind, step_id=e.step_id, task_id=e.task_id, timestamp=e.timestamp,
                         data={**e.data, "version": version} if e.kind in OPENING_KINDS else e.data)
            for e in journal.events]


class InstanceRegistry:
    """Loads, caches, locks and commits instances for one server process: it has the
    store and engine (`Resources`) and the live copies (`LiveCopies`), and commits."""

    def __init__(self, store_factory: Callable[[], Store], engine_factory: EngineFactory,
                 observer: Observer | None = None, scope: str | None = None):
        self.resources = Resources(store_factory, engine_factory)
        self.copies = LiveCopies(self.resources, scope)
        self.observer = observer  # tracing (observe/): told each commit's events; None when off
        self._maskers: dict[str, tuple[tuple[int, int], Masker]] = {}  # workflow id -> ((run, version), masker)

    # -- what it opened, and its copies ---------------------------------------------------------
    @property
    def store(self) -> Store:
        return self.resources.store

    @property
    def engine(self) -> ExpressionEngine:
        return self.resources.engine

    @property
    def opened(self) -> bool:
        return self.resources.opened

    @property
    def scope(self) -> str | None:
        return self.copies.scope

    def forget(self, workflow_id: str) -> None:
        """Forget the live copy: the next call loads the instance from the store."""
        self.copies.forget(workflow_id)

    # -- creating -----------------------------------------------------------------------------
    def start(self, workflow_id: str, bundle: WorkflowBundle, project_dir: str | Path, inputs: dict[str, Any],
              start_key: StartKey | None = None) -> WorkflowRun:
        """A new instance, committed before anyone can see it (with its start key, if any:
        `KeyTakenError` when that key started another instance first)."""
        bundle = WorkflowBundle.from_snapshot(bundle.snapshot())  # one bundle per content, shared by instances
        run = WorkflowRun.start(workflow_id, bundle, self.engine, Path(project_dir), inputs, self.resources.prompt)
        self.create(run, bundle.main.name, bundle.snapshot(), start_key)
        return run

    def create(self, run: WorkflowRun, workflow: str, definition: dict[str, Any],
               start_key: StartKey | None = None) -> None:
        """Commit `run` as a new instance (a start, or a fork) and keep it live."""
        journal = run.take_journal()
        self._new_trace(run, journal)
        base = InstanceRecord(workflow_id=run.workflow_id, workflow=workflow, project_dir=str(run.machine.project_dir),
                              definition=definition, created_at=utc_now(), updated_at=utc_now())
        record = record_of(run, base)
        self._perform(record, journal, lambda events: self.store.create(record, events, start_key=start_key), run,
                      self._root_ends(run))
        self.copies.add(LiveInstance(run, *kept(run, record)), record.project_dir)

    # -- transactions --------------------------------------------------------------------------
    def transact(self, workflow_id: str, change: Callable[[WorkflowRun], T],
                 defer: Callable[[T], bool] | None = None) -> T:
        """Apply `change` and commit it, or change nothing; conflicts are retried inside.
        `defer`: whether the save of this result may be confirmed later (`app.confirm`:
        only in a tool call, whose reply then waits for it); `change` must have done
        nothing another process could act on before the commit is confirmed."""
        deadline = time.monotonic() + CONFLICT_PATIENCE_S
        attempt = 0
        while True:
            with self.copies.current(workflow_id, verify=False) as live:
                try:
                    value = change(live.run)
                    deferred = defer is not None and confirm.may_defer() and defer(value)
                    if self._commit(live, deferred) or live.checked or self.copies.is_current(live):
                        self._remember_masker(live)
                        return value  # saved by compare-and-set, or made from a copy found current
                    continue  # nothing to save, and the copy was behind: again, on a current copy
                except ConflictError:
                    self.copies.drop(live)
                except Exception:
                    self.copies.drop(live)  # whatever `change` did in memory is dropped with it
                    if live.checked or self.copies.is_current(live):
                        raise
                    continue  # refused by a copy that was behind: ask the current one
                except BaseException:
                    self.copies.drop(live)
                    raise
            attempt += 1
            if time.monotonic() > deadline:
                raise ServiceError(f"workflow {workflow_id} is being changed by other server processes so often "
                                   f"that this call could not be applied in {attempt} attempts over "
                                   f"{CONFLICT_PATIENCE_S:.0f} s; nothing was changed — retry the call", "busy")
            first, most = CONFLICT_BACKOFF_S
            time.sleep(random.uniform(0, min(most, first * 2 ** min(attempt, 8))))

    def read(self, workflow_id: str, look: Callable[[WorkflowRun, InstanceRecord], T]) -> T:
        """Look at an instance under its lock; nothing is written."""
        with self.copies.current(workflow_id) as live:
            value = look(live.run, live.record)
            self._remember_masker(live)
            return value

    def _remember_masker(self, live: LiveInstance) -> Masker:
        """Remember the masker of the copy a reply is made from, while the lock is still held
        (built once per saved version; `run.masker()` re-walks only what changed): the reply
        guard then needs neither the lock nor the store, and never blocks the event loop."""
        key = (id(live.run), live.record.version + (live.unconfirmed is not None))  # the version it is, or will be
        hit = self._maskers.get(live.run.workflow_id)
        if hit is None or hit[0] != key:
            hit = self._maskers[live.run.workflow_id] = (key, live.run.masker())
        return hit[1]

    def masker(self, workflow_id: str, latest: bool = True) -> Masker:
        """The instance's masker, for replies, errors and logs.  `latest=False` is for the
        reply guard, which runs on the event loop right after the call that loaded or
        committed the instance: it takes the masker that call left behind, with no lock and
        no query, and reads the instance only when there is none."""
        if not latest:
            hit = self._maskers.get(workflow_id)
            if hit is not None:
                return hit[1]
        with self.copies.current(workflow_id) as live:
            return self._remember_masker(live)

    def _commit(self, live: LiveInstance, deferred: bool = False) -> bool:
        """Save what the change did — a delta of it, or now and then a full snapshot — with
        the journalled events and checkpoints, at the version the run was loaded at.
        True when something was saved (or, `deferred`, sent: see `app.confirm`).

        Nothing is written when nothing changed (a step merely delivered again), so a
        reader in another server process never turns into a writer's conflict."""
        journal = live.run.take_journal()
        ends = self._root_ends(live.run)
        commit = plan(live.run, live.record, live.baseline, bool(journal))
        if not commit.changed:
            return False
        record, expected = commit.record, live.record.version
        definition = record.definition if commit.definition_changed else None
        sender = self.resources.saves_later
        if deferred and sender is not None and not journal.checkpoints and self.observer is None:
            pending = sender.begin_save(record, expected, history_events(journal, record.version + 1),
                                        encoded=commit.encoded, delta=commit.delta,
                                        snapshot=commit.encoded is not None, definition=definition)
            confirm.add(pending)
            live.unconfirmed, live.baseline = (pending, record), commit.baseline
            return True
        self._perform(record, journal, lambda events: self.store.save(
            record, expected, events, encoded=commit.encoded, delta=commit.delta,
            snapshot=commit.encoded is not None, definition=definition), live.run, ends)
        live.record, live.baseline = without_body(record), commit.baseline
        return True

    def _perform(self, record: InstanceRecord, journal: Journal, write: Callable[[list[HistoryEvent]], int],
                 run: WorkflowRun, root_ends: bool = False) -> None:
        """The one place effects reach the store: the record with its events, then checkpoints;
        then tracing, when on, hears of the events."""
        try:
            events = history_events(journal, record.version + 1)
            record.version = write(events)
            for point in journal.checkpoints:
                self.store.add_checkpoint(record.workflow_id, None, point.reason, record.snapshot())
        except (ConflictError, KeyTakenError):
            raise
        except OutcomeUnknownError as exc:
            raise ServiceError(f"workflow {record.workflow_id}: {exc}", exc.kind, hint=Hint.SHOW_INSTANCE,
                               subject=record.workflow_id) from None
        except StoreError as exc:
            raise ServiceError(confirm.not_saved(record.workflow_id, exc), "not_saved") from None
        if self.observer is not None:
            self._observe(record, events, run, root_ends)

    # -- tracing (observe/), when on -------------------------------------------------------------
    def _new_trace(self, run: WorkflowRun, journal: Journal) -> None:
        """A new instance's trace context: a trace of its own (a fork's root links to its
        origin's), whose root starts no later than the creation's first event; none when
        tracing is off (one is derived from its id if ever needed)."""
        if self.observer is None:
            run.machine.trace_context = None
            return
        origin = None
        forked, machine = run.machine.forked_from, run.machine
        if forked is not None:  # the run still holds its origin's context
            origin = instance_trace(str(forked.get("workflow_id")), "", machine.trace_context, "", "").root
        first = min((event.timestamp for event in journal.events), default=None)
        run.machine.trace_context = self.observer.new_trace(origin, first)

    def _root_ends(self, run: WorkflowRun) -> bool:
        """Whether the commit about to be made ends the instance's root span — it stops for
        the first time — marked in its kept context in that same commit, so no other commit,
        in this process or another, ends it again."""
        if self.observer is None or not root_ends(run.machine.trace_context, run.status):
            return False
        run.machine.trace_context = ended(run.machine.trace_context, run.workflow_id)
        return True

    def _observe(self, record: InstanceRecord, events: list[HistoryEvent], run: WorkflowRun,
                 root_ends: bool) -> None:
        """Tell tracing what was committed; a failure of tracing never fails the change."""
        assert self.observer is not None
        bundle = run.bundle
        try:
            instance = instance_trace(record.workflow_id, record.workflow, run.machine.trace_context, record.created_at,
                                      run.status, root_ends)
            self.observer.committed(instance, events, lambda step_id: step_type(bundle, step_id))
        except Exception:
            log.exception("tracing failed on a commit of workflow %s (the commit stands)", record.workflow_id)

    # -- the store, for the service ------------------------------------------------------------
    def history(self, workflow_id: str, kinds: list[str] | None = None) -> list[HistoryEvent]:
        self.copies.in_scope(workflow_id)
        return translate(lambda: self.store.history(workflow_id, kinds=kinds))

    def add_checkpoint(self, workflow_id: str, step_id: str | None, reason: str) -> tuple[Checkpoint, str]:
        """Keep the instance as committed now; returns the checkpoint and where it lives."""
        with self.copies.current(workflow_id) as live:
            point = translate(lambda: self.store.add_checkpoint(workflow_id, step_id, reason,
                                                                      record_of(live.run, live.record).snapshot()))
        return point, f"{self.store.path}#{workflow_id}/{point.checkpoint_id}"

    def last_checkpoint(self, workflow_id: str, checkpoint_id: str | None = None) -> Checkpoint | None:
        self.copies.in_scope(workflow_id)
        return translate(lambda: self.store.get_checkpoint(workflow_id, checkpoint_id))

    def roll_back(self, workflow_id: str, checkpoint_id: str) -> None:
        """Put the instance back as it was at a checkpoint (a commit like any other)."""
        point = self.last_checkpoint(workflow_id, checkpoint_id)
        if point is None:
            raise ServiceError(f"no checkpoint {checkpoint_id!r} for workflow {workflow_id}", "not_found",
                               hint=Hint.RESUME_AS_IT_STANDS, subject=workflow_id)
        with self.copies.current(workflow_id) as live:
            snap = point.snapshot
            state = snap["state"]
            if live.run.machine.trace_context is not None:  # the trace goes on (its root may have ended since)
                state = {**state, "trace_context": live.run.machine.trace_context}
            record = InstanceRecord(**{**vars(live.record), "state": state, "threads": snap["threads"],
                                       "status": snap["status"], "current_steps": snap.get("current_steps", []),
                                       "error": snap.get("error")})
            event = HistoryEvent(kind="rolled_back", data={"checkpoint_id": checkpoint_id})
            translate(lambda: self.store.save(record, live.record.version, [event]))
            self.forget(workflow_id)  # the next call loads the rolled-back instance

    def started_by(self, project_dir: str, key: str) -> tuple[str, str] | None:
        return translate(lambda: self.store.started_by(project_dir, key))

    def version(self, workflow_id: str) -> int:
        """The committed version of an instance, from the store (whichever process wrote it)."""
        self.copies.in_scope(workflow_id)
        return translate(lambda: self.store.version(workflow_id))

    def page(self, where: InstanceFilter, limit: int, offset: int) -> tuple[InstancePage, list[InstanceGroup]]:
        """One page of instances and the counts by workflow, project and status: of the
        registry's project only when it has one (another project's listing is empty)."""
        if self.scope is not None:
            if where.project_dir not in (None, self.scope):
                return InstancePage(rows=[], total=0), []
            where = replace(where, project_dir=self.scope)
        found, groups = translate(lambda: (self.store.page_instances(where, limit, offset),
                                                 self.store.instance_groups()))
        return found, [g for g in groups if self.scope is None or g.project_dir == self.scope]

    # -- repairing: a run rebuilt from a stored body, and committed whole ------------------------
    def load(self, workflow_id: str) -> InstanceRecord:
        """The instance as stored now (definition and bookkeeping included)."""
        return translate(lambda: self.copies.load(workflow_id))

    def run_from(self, record: InstanceRecord, body: Body) -> WorkflowRun:
        """A new run object (not the live one) for `record` with the state and threads of `body`."""
        bundle = WorkflowBundle.from_snapshot(record.definition)
        stored = replace(record, state=body.state, threads=body.threads)
        return WorkflowRun.from_json({**body.state, "threads": threads_for_run(stored)}, bundle, self.engine,
                                     self.resources.prompt)

    def replace(self, workflow_id: str, run: WorkflowRun, expected_version: int) -> int:
        """Commit `run` (built by `run_from`) as the next version of the instance, if it is still
        at `expected_version`: a commit like any other (a delta against what is stored, now
        and then a full snapshot), so older versions stay as rebuildable as they were.  The
        new version."""
        with self.copies.current(workflow_id) as live:
            if live.record.version != expected_version:
                raise ServiceError(f"workflow {workflow_id} changed while this call worked on it (version "
                                   f"{expected_version}, now {live.record.version}); nothing was written — "
                                   "look at it again and retry", "conflict")
            try:
                commit = plan(run, live.record, live.baseline, True)
                self._perform(commit.record, run.take_journal(), lambda events: self.store.save(
                    commit.record, expected_version, events, encoded=commit.encoded, delta=commit.delta,
                    snapshot=commit.encoded is not None), run)
            finally:
                self.copies.drop(live)  # the next call loads what was written
        return commit.record.version

    def exists(self, workflow_id: str) -> None:
        translate(lambda: self.copies.load(workflow_id))

    def list_instances(self, project_dir: str) -> list[InstanceSummary]:
        return translate(lambda: self.store.list_instances(project_dir=project_dir))
