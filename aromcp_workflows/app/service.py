"""The application API: every operation the MCP tools, the CLI and the runner offer, typed.

`WorkflowService` knows workflows (definition/), runs (interpreter/), state (state/) and
persistence (instances.py over store/), and nothing about MCP.  Each method returns a
result of `app.results` (the tools' output as the README's MCP interface shapes it) or
raises `ServiceError`, whose text tells the caller what was wrong and what to do.  Every
change is committed before the method returns.

This module holds the calls on instances: start (with its idempotency keys, checked in
`app/start_keys.py`), steps, state, checkpoints, resume, repair, status and debugging.
The calls that need no instance are `WorkflowsApi`'s (`app/workflows.py`); authors' tools
are `AuthoringApi`'s (`app/authoring.py`), and the web view's reads `WatchingApi`'s
(`app/watching.py`): all three are base classes of `WorkflowService`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aromcp_workflows.app import repair
from aromcp_workflows.app.authoring import AuthoringApi
from aromcp_workflows.app.definitions import changed_since_start
from aromcp_workflows.app.driver import Driver, ShellRunner, default_shell_runner
from aromcp_workflows.app.errors import Hint, ServiceError, refusals
from aromcp_workflows.app.instances import InstanceRegistry
from aromcp_workflows.app.results import (
    CheckpointInfo,
    CheckpointTaken,
    Completed,
    DebugInfo,
    Dependencies,
    Forked,
    ForkOrigin,
    InstanceList,
    InstanceRow,
    InstanceStatus,
    NextStep,
    Resumed,
    Retried,
    Started,
    StateUpdated,
    StateView,
    StatusChanged,
    StepCompleted,
    TaskCounts,
    Traces,
)
from aromcp_workflows.app.start_keys import start_key, started_before
from aromcp_workflows.app.watching import WatchingApi
from aromcp_workflows.app.workflows import WorkflowsApi
from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver
from aromcp_workflows.interpreter import Busy, WorkflowRun
from aromcp_workflows.observe import Observer
from aromcp_workflows.observe.context import SpanIds, instance_trace
from aromcp_workflows.safety.masking import Masker
from aromcp_workflows.shell.rundir import RunDir
from aromcp_workflows.shell.runner import ProgressCallback
from aromcp_workflows.state import Update
from aromcp_workflows.store import InstanceRecord, KeyTakenError, named_store, open_store

__all__ = ["WorkflowService"]
log = logging.getLogger("aromcp_workflows")
STEP_STATUSES = ("success", "failed")
END_STATUSES = {"success": "completed", "completed": "completed", "failed": "failed", "cancelled": "cancelled"}


def _default_engine() -> Any:
    from aromcp_workflows.expressions import ExpressionEngine

    return ExpressionEngine()


class WorkflowService(WorkflowsApi, AuthoringApi, WatchingApi):
    """The application API of one project.  Calls that name an instance by id serve that
    project's instances only (another project's answer as an unknown id would), unless
    `all_projects` (a server for several projects, or the local user's own CLI)."""

    def __init__(self, project_dir: str | Path | None = None, store_path: str | Path | None = None,
                 home: str | Path | None = None, engine_factory: Callable[[], Any] = _default_engine,
                 observer: Observer | None = None, shell_runner: ShellRunner = default_shell_runner,
                 work_dir: str | Path | None = None, loader: WorkflowLoader | None = None,
                 all_projects: bool = False):
        """`shell_runner` runs server-side commands and `work_dir` is where an instance's
        commands run (default: the project): `aromcp-workflows test` gives a case's stubs
        and a throwaway folder, while workflows still resolve as in the project.  `loader`
        (with its resolver and file cache) may be shared by services of one project: a test
        session reads each workflow file once for all its cases.  The instances served by id
        are those started in that folder (`all_projects`: every instance of the store)."""
        self.work_dir = Path(work_dir) if work_dir is not None else None
        self.resolver = loader.resolver if loader is not None else WorkflowResolver(project_dir=project_dir, home=home)
        # compiles JS in the V8 children
        self.loader = loader if loader is not None else WorkflowLoader(self.resolver, syntax_engine=self._engine)
        scope = None if all_projects else str(self.work_dir or self.project_dir)  # as `start` records it
        self.instances = InstanceRegistry(lambda: open_store(store_path), engine_factory, observer, scope)
        self.store_named = named_store(store_path)  # said by listings: not the default store
        self.driver = Driver(transact=self.instances.transact, shell_runner=shell_runner,
                             store_path=lambda: self.instances.store.path)

    @property
    def project_dir(self) -> Path:
        return self.resolver.project_dir

    # -- instances ------------------------------------------------------------------
    def start(self, workflow: str, inputs: dict[str, Any] | None = None,
              idempotency_key: str | None = None) -> Started:
        """A new instance; with `idempotency_key`, the instance that key started in this
        project if there is one (a resend of a start whose answer was lost), and a refusal
        when that key came with another request."""
        inputs = inputs or {}
        key = None if idempotency_key is None else start_key(idempotency_key, workflow, inputs)
        if key is not None:
            with refusals():
                found = self.instances.started_by(str(self.work_dir or self.project_dir), key.key)
            if found is not None:
                return started_before(self.instances, key, *found)
        bundle = self.bundle(workflow)
        workflow_id = f"wf_{uuid.uuid4().hex[:12]}"
        with refusals():
            try:
                run = self.instances.start(workflow_id, bundle, self.work_dir or self.project_dir, inputs, key)
            except KeyTakenError as exc:  # the same start, sent twice at once: one instance, one answer
                assert key is not None
                return started_before(self.instances, key, exc.workflow_id, exc.request)
        return Started(workflow_id=workflow_id, status=run.status, state=run.states["main"].flattened())

    def next_step(self, workflow_id: str, task_id: str | None = None,
                  progress: ProgressCallback | None = None) -> NextStep:
        """The thread's next atomic step (the same one again while it is not completed)."""
        with refusals():
            answer = self.driver.next_step(workflow_id, task_id, progress)
        error = None if answer.error is None else self.masker(workflow_id, latest=False).mask_text(answer.error)
        return NextStep(workflow_id=workflow_id, status=answer.status, step=answer.step, messages=answer.messages,
                        error=error)

    def step_complete(self, workflow_id: str, step_id: str, status: str = "success", result: Any = None,
                      error: str | None = None, task_id: str | None = None,
                      progress: ProgressCallback | None = None, may_answer_user: bool = True) -> StepCompleted:
        """Report a step's result.  `may_answer_user=False` when the caller is an agent whose
        client the server asks `user_input` questions directly: its result for one is refused
        (only the user's answer, which comes back through the client's form, completes it)."""
        if status not in STEP_STATUSES:
            raise ServiceError(f"status must be 'success' or 'failed', not {status!r}")
        with refusals():
            done = self.driver.complete(workflow_id, task_id, step_id, status, result, error, progress,
                                        may_answer_user)
        answer = done.answer
        return StepCompleted(success=done.success, status=answer.status, messages=answer.messages,
                             next_step=answer.step, error=answer.error)

    def state_read(self, workflow_id: str, paths: list[str] | None = None, task_id: str | None = None) -> StateView:
        def look(run: WorkflowRun, _record: InstanceRecord) -> StateView:
            tiers = run.state_for(task_id)
            return StateView(state=tiers.read(paths) if paths else tiers.flattened())

        with refusals():
            return self.instances.read(workflow_id, look)

    def state_update(self, workflow_id: str, updates: list[dict[str, Any]],
                     task_id: str | None = None) -> StateUpdated:
        batch = _updates(updates)
        with refusals():
            result = self.instances.transact(workflow_id, lambda run: run.agent_update(task_id, batch), _anyway)
        return StateUpdated(success=True, updated=result.changed_paths, computed_changed=result.computed_changed)

    def state_dependencies(self, workflow_id: str, field: str) -> Dependencies:
        with refusals():
            deps = self.instances.read(workflow_id, lambda run, _: run.states["main"].dependencies(field))
        return Dependencies(**deps)

    def checkpoint(self, workflow_id: str, reason: str = "", step_id: str | None = None) -> CheckpointTaken:
        with refusals():
            point, where = self.instances.add_checkpoint(workflow_id, step_id, reason)
        return CheckpointTaken(checkpoint_id=point.checkpoint_id, state_path=where)

    def resume(self, workflow_id: str, checkpoint_id: str | None = None) -> Resumed:
        """Reload an instance (rolled back to a checkpoint if one is named); a failed one goes
        back to the step that failed when its workflow says so; an interrupted one runs again."""
        with refusals():
            self.instances.exists(workflow_id)
            if checkpoint_id is not None:
                self.instances.roll_back(workflow_id, checkpoint_id)
            self.instances.forget(workflow_id)
            self.instances.transact(workflow_id, _resumed)
            last = self.instances.last_checkpoint(workflow_id)
            status, state = self.instances.read(workflow_id,
                                                lambda run, _: (run.status, run.states["main"].flattened()))
        return Resumed(workflow_id=workflow_id, status=status, state=state,
                       last_checkpoint=None if last is None else CheckpointInfo(
                           checkpoint_id=last.checkpoint_id, step_id=last.step_id, reason=last.reason,
                           timestamp=last.created_at))

    def check_resume(self, workflow_id: str, checkpoint_id: str | None = None) -> None:
        """What `resume` would refuse before it changes anything — an unknown instance, an
        unknown checkpoint — for `aromcp-workflows run --resume` to say before it starts a server."""
        with refusals():
            self.instances.exists(workflow_id)
            if checkpoint_id is not None and self.instances.last_checkpoint(workflow_id, checkpoint_id) is None:
                raise ServiceError(f"no checkpoint {checkpoint_id!r} for workflow {workflow_id}",
                                   Hint.RESUME_AS_IT_STANDS, workflow_id)

    def complete(self, workflow_id: str, status: str = "success") -> Completed:
        if status not in END_STATUSES:
            raise ServiceError(f"status must be one of success, failed, cancelled (got {status!r})")

        def finish(run: WorkflowRun) -> Completed:
            if not run.finished:
                run.cancel(END_STATUSES[status])
            return Completed(success=True, final_state=run.states["main"].flattened())

        with refusals():
            return self.instances.transact(workflow_id, finish)

    def interrupt(self, workflow_id: str, reason: str = "") -> StatusChanged:
        """Mark a running instance `interrupted`: the process running it was stopped (Ctrl-C
        during `run`).  Nothing else changes; `resume` goes on."""
        def mark(run: WorkflowRun) -> StatusChanged:
            if run.status in ("running", "waiting"):
                run.set_status("interrupted", reason or "the run was interrupted")
            return StatusChanged(workflow_id=workflow_id, status=run.status)

        with refusals():
            return self.instances.transact(workflow_id, mark)

    # -- repairing ----------------------------------------------------------------------
    def retry(self, workflow_id: str) -> Retried:
        """A failed instance goes on from the step that failed, with the state as it was
        before that step (app/repair.py); then drive it like any other (`run --resume`)."""
        with refusals():
            return repair.retry(self.instances, workflow_id)

    def fork(self, workflow_id: str, at: str | None = None, version: int | None = None,
             checkpoint_id: str | None = None, edits: dict[str, Any] | None = None) -> Forked:
        """A new instance from a point of `workflow_id` — the step `at` (as `debug` lists it),
        a `version`, or a checkpoint; none: as it stands — with `edits` ({raw.x|state.x: value})
        applied.  The original is not written to."""
        point = repair.ForkPoint(step_id=at, version=version, checkpoint_id=checkpoint_id)
        with refusals():
            return repair.fork(self.instances, workflow_id, point, edits or {})

    def trace_root(self, workflow_id: str) -> SpanIds:
        """The root span of the instance's one trace, as kept in the store (tracing puts
        each tool call about the instance under it: `server/trace_calls.py`)."""
        def look(run: WorkflowRun, record: InstanceRecord) -> SpanIds:
            return instance_trace(workflow_id, record.workflow, run.trace_context, record.created_at,
                                  run.status).root

        with refusals():
            return self.instances.read(workflow_id, look)

    def status(self, workflow_id: str) -> InstanceStatus:
        with refusals():
            status, bundle = self.instances.read(workflow_id, lambda run, record: (_instance_status(run, record),
                                                                                 run.bundle))
        status.definition_changed = changed_since_start(self.loader, bundle) or None
        return status

    def list_instances(self) -> InstanceList:
        """This project's instances, most recently updated first."""
        now = datetime.now(UTC)
        with refusals():
            summaries = self.instances.list_instances(str(self.project_dir))
        return InstanceList(instances=[
            InstanceRow(workflow_id=item.workflow_id, workflow=item.workflow, status=item.status,
                        current_steps=item.current_steps,
                        age_seconds=round((now - datetime.fromisoformat(item.created_at)).total_seconds(), 1),
                        updated_at=item.updated_at, error=item.error)
            for item in summaries], store=self.store_named)

    # -- seeing inside ----------------------------------------------------------------
    def trace_transformations(self, workflow_id: str, field: str | None = None,
                              include_timing: bool = False) -> Traces:
        from aromcp_workflows.explain.inspect import transform_traces

        masker = self.masker(workflow_id)
        with refusals():
            events = self.instances.history(workflow_id, kinds=["transform_trace"])
        return Traces(traces=transform_traces(events, field, include_timing, masker))

    def debug_info(self, workflow_id: str) -> DebugInfo:
        from aromcp_workflows.explain.inspect import debug_info

        masker = self.masker(workflow_id)
        with refusals():
            events = self.instances.history(workflow_id)
            info, bundle = self.instances.read(workflow_id, lambda run, _: (debug_info(run, events, masker),
                                                                            run.bundle))
        moves = [masker({"timestamp": e.timestamp, "file": e.data.get("file"), "plan": e.data.get("plan"),
                         "old_definition": e.data.get("old_definition")}) for e in events if e.kind == "migrated"]
        return DebugInfo(**info, definition_changed=changed_since_start(self.loader, bundle) or None,
                         migrations=moves or None)

    # -- commands left behind by a server that died -------------------------------------
    def take_over_orphans(self, run_dirs: list[RunDir] | None = None) -> int:
        """Adopt the commands of this store that servers of this machine started and left
        behind when they died (`shell.rundir.orphans`; `run_dirs` when the caller has just
        looked them up).  Each is claimed here and now (its lease renewed: a server on
        another machine must not see it run out and run the command again while this one
        starts), then waited for in a thread of its own and its result committed, as the
        next call on its thread would do.  Returns how many were found."""
        import threading

        from aromcp_workflows.shell.rundir import orphans

        if run_dirs is None:
            run_dirs = orphans(store=self.instances.store.path)
        found = [(d, meta) for d in run_dirs if (meta := d.meta()) is not None]
        for run_dir, meta in found:
            thread = meta.get("thread_id")
            workflow_id, thread_id = str(meta.get("workflow_id")), None if thread in (None, "main") else str(thread)
            try:
                rest = self.driver.take_back(workflow_id, thread_id)
            except Exception as exc:  # a broken instance must not stop the server: its next call reports it
                log.warning("could not take over the command left in %s: %s", run_dir.path, exc)
                continue
            threading.Thread(target=self._adopt_orphan, args=(run_dir, workflow_id, thread_id, rest),
                             name="aromcp-adopt", daemon=True).start()
        return len(found)

    def _adopt_orphan(self, run_dir: RunDir, workflow_id: str, thread_id: str | None,
                      rest: Callable[[], object] | None) -> None:
        """Take the claimed command's result (`rest`) and go on as the thread's next step would;
        then drop a run directory no claim names any more (its result was committed before its
        server could remove it)."""
        try:
            (rest or (lambda: self.driver.next_step(workflow_id, thread_id)))()
            named = self.instances.read(workflow_id, lambda run, _: _names(run.busy_shell(thread_id), run_dir))
        except Exception as exc:  # a broken instance must not stop the server: its next call reports it
            log.warning("could not take over the command left in %s: %s", run_dir.path, exc)
            return
        if not named:
            run_dir.remove()

    def close(self) -> None:
        """Release the store's connections (a later call opens them again)."""
        if self.instances.opened:
            self.instances.store.close()

    def masker(self, workflow_id: str, latest: bool = True) -> Masker:
        """The instance's masker (see `InstanceRegistry.masker`)."""
        with refusals():
            return self.instances.masker(workflow_id, latest)


def _anyway(_: Any) -> bool:
    """A change whose save may always be confirmed after it (`app.confirm`)."""
    return True


def _updates(updates: list[dict[str, Any]]) -> list[Update]:
    """The agent's `[{path, value, operation?}]` as state updates, or why not."""
    if not updates:
        raise ServiceError("updates is empty: give at least one {path, value, operation?}")
    batch = []
    for index, item in enumerate(updates):
        if not isinstance(item, dict) or "path" not in item:
            raise ServiceError(f"updates[{index}] has no `path` (e.g. raw.files)")
        batch.append(Update(path=item["path"], operation=item.get("operation") or "set", value=item.get("value")))
    return batch


def _resumed(run: WorkflowRun) -> None:
    """What resuming changes: the workflow's `on_resume.retry_failed_steps` (the seed's
    default: on) puts a failed instance back at the step that failed; an instance whose
    run was stopped (Ctrl-C) is running again."""
    if run.bundle.main.definition.on_resume.retry_failed_steps:
        run.retry_failed()
    if run.status == "interrupted":
        run.set_status("running")


def _instance_status(run: WorkflowRun, record: InstanceRecord) -> InstanceStatus:
    tasks = [t for tid, t in run.threads.items() if tid != "main"]
    counts = TaskCounts(tasks_total=len(tasks), tasks_completed=sum(t.status == "completed" for t in tasks),
                        tasks_failed=sum(t.status == "failed" for t in tasks),
                        tasks_running=sum(t.status == "running" for t in tasks))
    return InstanceStatus(workflow_id=run.workflow_id, workflow=record.workflow, status=run.status,
                          current_steps=list(record.current_steps), progress=counts,
                          error=run.masker().mask_text(run.error) if run.error else None, version=record.version,
                          forked_from=None if run.forked_from is None else ForkOrigin(**run.forked_from))


def _names(busy: Busy | None, run_dir: RunDir) -> bool:
    """Whether a thread's command in flight is the one of `run_dir` (its claim names it)."""
    return busy is not None and busy.claim.get("run_dir") == str(run_dir.path)
