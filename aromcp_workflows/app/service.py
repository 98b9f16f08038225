"""The application API: every operation the MCP tools, the CLI and the runner offer, typed.

`WorkflowService` knows workflows (definition/), runs (interpreter/), state (state/) and
persistence (instances.py over store/), and nothing about MCP.  Each method returns a
result of `app.results` (the tools' output as the README's MCP interface shapes it) or
raises `ServiceError`, whose text tells the caller what was wrong and what to do.  Every
change is committed before the method returns.

This module holds the calls on instances: start (with its idempotency keys, checked in
`app/start_keys.py`), steps, state, checkpoints, resume, repair, status and debugging.
The calls that need no instance are those of its part `workflows` (`app/workflows.py`);
authors' tools are its part `authoring`'s (`app/authoring.py`), and the web view's reads
its part `watching`'s (`app/watching.py`).  The service has the three parts and hands
those calls to them, so every call of the API is a method here, one step from its code.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aromcp_workflows.app import lifecycle, orphans, repair
from aromcp_workflows.app.authoring import Authoring
from aromcp_workflows.app.definitions import changed_since_start
from aromcp_workflows.app.driver import Driver, ShellRunner, default_shell_runner
from aromcp_workflows.app.page_results import CommandOutput, InstancePageView, InstanceView, StateAt
from aromcp_workflows.app.results import (
    Answered,
    CheckpointTaken,
    Completed,
    Coverage,
    DebugInfo,
    DefinitionView,
    Dependencies,
    Forked,
    InstanceList,
    InstanceStatus,
    Migration,
    NextStep,
    Plan,
    Recording,
    Resumed,
    Retried,
    Started,
    StateUpdated,
    StateView,
    StatusChanged,
    StepCompleted,
    Traces,
    TransformTest,
    Validation,
    WorkflowInfo,
    WorkflowList,
)
from aromcp_workflows.app.start_keys import start_key, started_before
from aromcp_workflows.app.statuses import instance_status, rows_of, stalled_of_run
from aromcp_workflows.app.watching import Watching
from aromcp_workflows.app.workflows import Workflows
from aromcp_workflows.definition import WorkflowBundle, WorkflowLoader, WorkflowResolver
from aromcp_workflows.instances import Hint, InstanceRegistry, ServiceError, refusals
from aromcp_workflows.interpreter import WorkflowRun, Writer
from aromcp_workflows.observe import Observer, SpanIds, instance_trace
from aromcp_workflows.safety import Masker
from aromcp_workflows.shell import ProgressCallback, RunDir
from aromcp_workflows.state import Update
from aromcp_workflows.store import InstanceRecord, KeyTakenError, named_store, open_store

__all__ = ["WorkflowService"]
log = logging.getLogger("aromcp_workflows")
STEP_STATUSES = ("success", "failed")


def _default_engine() -> Any:
    from aromcp_workflows.expressions import ExpressionEngine

    return ExpressionEngine()


class WorkflowService:
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
        self.loader = loader if loader is not None else WorkflowLoader(self.resolver,
                                                                       syntax_engine=lambda: self.instances.engine)
        scope = None if all_projects else str(self.work_dir or self.project_dir)  # as `start` records it
        self.instances = InstanceRegistry(lambda: open_store(store_path), engine_factory, observer, scope)
        self.workflows = Workflows(self.resolver, self.loader, self.instances)
        self.authoring = Authoring(self.instances, self.loader)
        self.watching = Watching(self.instances, self.loader)
        self.store_named = named_store(store_path)  # said by listings: not the default store
        self.driver = Driver(transact=self.instances.transact, shell_runner=shell_runner,
                             store_path=lambda: self.instances.store.path,
                             one_host=lambda: self.instances.store.one_host)

    @property
    def project_dir(self) -> Path:
        return self.resolver.project_dir

    # -- workflows, before any instance (`app/workflows.py`) ------------------------------
    def list_workflows(self, include_global: bool = True) -> WorkflowList:
        return self.workflows.list_workflows(include_global)

    def get_info(self, workflow: str) -> WorkflowInfo:
        return self.workflows.get_info(workflow)

    def validate(self, workflow: str | None = None, yaml: str | None = None) -> Validation:
        return self.workflows.validate(workflow, yaml)

    def bundle(self, workflow: str) -> WorkflowBundle:
        return self.workflows.bundle(workflow)

    def check_start(self, workflow: str, inputs: dict[str, Any]) -> None:
        return self.workflows.check_start(workflow, inputs)

    def load_definition(self, workflow: str) -> DefinitionView:
        return self.workflows.load_definition(workflow)

    def explain_plan(self, workflow: str, inputs: dict[str, Any] | None = None) -> Plan:
        return self.workflows.explain_plan(workflow, inputs)

    def test_transformation(self, transform: str, input: Any = None,
                            context: dict[str, Any] | None = None) -> TransformTest:
        return self.workflows.test_transformation(transform, input, context)

    # -- for authors (`app/authoring.py`) and the web view (`app/watching.py`) ---------------
    def coverage(self, workflow_id: str) -> Coverage:
        return self.authoring.coverage(workflow_id)

    def recording(self, workflow_id: str) -> Recording:
        return self.authoring.recording(workflow_id)

    def migrate(self, workflow_id: str, dry_run: bool = False) -> Migration:
        return self.authoring.migrate(workflow_id, dry_run)

    def instance_page(self, statuses: list[str] | None = None, workflow: str | None = None,
                      project_dir: str | None = None, page: int = 1, per_page: int = 50) -> InstancePageView:
        return self.watching.instance_page(statuses, workflow, project_dir, page, per_page)

    def instance_version(self, workflow_id: str) -> int:
        return self.watching.instance_version(workflow_id)

    def command_output(self, workflow_id: str, step_id: str | None = None, task_id: str | None = None,
                       stdout_since: int | None = None, stderr_since: int | None = None,
                       limit: int = 16 * 1024) -> CommandOutput:
        return self.watching.command_output(workflow_id, step_id, task_id, stdout_since, stderr_since, limit)

    def instance_view(self, workflow_id: str) -> InstanceView:
        return self.watching.instance_view(workflow_id)

    def state_at(self, workflow_id: str, seq: int | None = None) -> StateAt:
        return self.watching.state_at(workflow_id, seq)

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
            answer = self.driver.next_step(workflow_id, task_id, self._masked(workflow_id, progress))
        error = None if answer.error is None else self.masker(workflow_id, latest=False).mask_text(answer.error)
        return NextStep(workflow_id=workflow_id, status=answer.status, step=answer.step, messages=answer.messages,
                        error=error, waiting_for=answer.waiting_for)

    def step_complete(self, workflow_id: str, step_id: str, status: str = "success", result: Any = None,
                      error: str | None = None, task_id: str | None = None,
                      progress: ProgressCallback | None = None, may_answer_user: bool = True,
                      by: Writer = "agent") -> StepCompleted:
        """Report a step's result.  `may_answer_user=False` when the caller is an agent whose
        client the server asks `user_input` questions directly: its result for one is refused
        (only the user's answer, which comes back through the client's form, completes it).
        `by`: who gives the result (the agent; `user` for an answer the client's form brought
        back; `person` at the CLI or the page): a question's answer is kept as theirs."""
        if status not in STEP_STATUSES:
            raise ServiceError(f"status must be 'success' or 'failed', not {status!r}")
        with refusals():
            done = self.driver.complete(workflow_id, task_id, step_id, status, result, error,
                                        self._masked(workflow_id, progress), may_answer_user, by)
        answer = done.answer
        return StepCompleted(success=done.success, status=answer.status, messages=answer.messages,
                             next_step=answer.step, error=answer.error, waiting_for=answer.waiting_for)

    def asking_user(self, workflow_id: str, step_id: str, task_id: str | None = None, asking: bool = True) -> None:
        """The question `step_id` goes to the user in a form now: no agent answers it any
        more, from this session or another (`WorkflowRun.asking_user`); `asking=False`: the
        form could not be shown after all."""
        with refusals():
            self.instances.transact(workflow_id, lambda run: run.asking_user(task_id, step_id, asking))

    def state_read(self, workflow_id: str, paths: list[str] | None = None, task_id: str | None = None) -> StateView:
        def look(run: WorkflowRun, _record: InstanceRecord) -> StateView:
            tiers = run.state_for(task_id)
            return StateView(state=tiers.read(paths) if paths else tiers.flattened())

        with refusals():
            return self.instances.read(workflow_id, look)

    def state_update(self, workflow_id: str, updates: list[dict[str, Any]],
                     task_id: str | None = None, by: Writer = "agent") -> StateUpdated:
        """Write state from outside the steps; the agent never a path the user decided."""
        batch = _updates(updates)
        with refusals():
            result = self.instances.transact(workflow_id, lambda run: run.agent_update(task_id, batch, by), _anyway)
        return StateUpdated(success=True, updated=result.changed_paths, computed_changed=result.computed_changed)

    def state_dependencies(self, workflow_id: str, field: str) -> Dependencies:
        with refusals():
            deps = self.instances.read(workflow_id, lambda run, _: run.states["main"].dependencies(field))
        return Dependencies(**deps)

    def checkpoint(self, workflow_id: str, reason: str = "", step_id: str | None = None) -> CheckpointTaken:
        with refusals():
            point, where = self.instances.add_checkpoint(workflow_id, step_id, reason)
        return CheckpointTaken(checkpoint_id=point.checkpoint_id, state_path=where)

    def resume(self, workflow_id: str, checkpoint_id: str | None = None, by: Writer = "agent",
               consented: bool = False) -> Resumed:
        """Reload an instance (rolled back to a checkpoint if one is named): `app/lifecycle.py`."""
        return lifecycle.resume(self.instances, workflow_id, checkpoint_id, by, consented)

    def check_resume(self, workflow_id: str, checkpoint_id: str | None = None) -> None:
        """What `resume` would refuse before it changes anything — an unknown instance, an
        unknown checkpoint — for `aromcp-workflows run --resume` to say before it starts a server."""
        with refusals():
            self.instances.exists(workflow_id)
            if checkpoint_id is not None and self.instances.last_checkpoint(workflow_id, checkpoint_id) is None:
                raise ServiceError(f"no checkpoint {checkpoint_id!r} for workflow {workflow_id}",
                                   "not_found", hint=Hint.RESUME_AS_IT_STANDS, subject=workflow_id)

    def complete(self, workflow_id: str, status: str = "success", refuse_ended: bool = False) -> Completed:
        """End an instance early; its commands in flight are stopped (`app/lifecycle.py`).
        `refuse_ended`: one that ended another way already is a `conflict`, not success."""
        return lifecycle.end(self.instances, workflow_id, status, refuse_ended)

    def interrupt(self, workflow_id: str, reason: str = "") -> StatusChanged:
        """Mark a running instance `interrupted` (Ctrl-C during `run`); `resume` goes on."""
        return lifecycle.interrupt(self.instances, workflow_id, reason)

    def answer(self, workflow_id: str, value: str, step_id: str | None = None) -> Answered:
        """The person's answer to a question the instance waits on (`aromcp-workflows answer`,
        the page): validated as a form's answer is, and refused whole when it is not valid.
        The instance does not go on here: the agent's next call goes on past the question."""
        return lifecycle.answer(self.instances, workflow_id, value, step_id)

    # -- repairing ----------------------------------------------------------------------
    def retry(self, workflow_id: str) -> Retried:
        """A failed instance goes on from the step that failed, with the state as it was
        before that step (app/repair.py); then drive it like any other (`run --resume`)."""
        with refusals():
            return repair.retry(self.instances, workflow_id)

    def fork(self, workflow_id: str, at: str | None = None, version: int | None = None,
             checkpoint_id: str | None = None, edits: dict[str, Any] | None = None,
             by: Writer = "agent", consented: bool = False) -> Forked:
        """A new instance from a point of `workflow_id` — the step `at` (as `debug` lists it),
        a `version`, or a checkpoint; none: as it stands — with `edits` ({raw.x|state.x: value})
        applied.  The original is not written to.  `by`: the agent (MCP) may not edit what
        the user decided, and needs the user's consent (`ConsentNeeded`) to reuse their
        answers; the person (CLI, page) may do both."""
        point = repair.ForkPoint(step_id=at, version=version, checkpoint_id=checkpoint_id)
        with refusals():
            return repair.fork(self.instances, workflow_id, point, edits or {}, by, consented)

    def trace_root(self, workflow_id: str) -> SpanIds:
        """The root span of the instance's one trace, as kept in the store (tracing puts
        each tool call about the instance under it: `server/trace_calls.py`)."""
        def look(run: WorkflowRun, record: InstanceRecord) -> SpanIds:
            return instance_trace(workflow_id, record.workflow, run.machine.trace_context, record.created_at,
                                  run.status).root

        with refusals():
            return self.instances.read(workflow_id, look)

    def status(self, workflow_id: str) -> InstanceStatus:
        with refusals():
            status, bundle = self.instances.read(workflow_id, lambda run, record: (instance_status(run, record),
                                                                                 run.bundle))
        status.definition_changed = changed_since_start(self.loader, bundle) or None
        return status

    def list_instances(self) -> InstanceList:
        """This project's instances, most recently updated first."""
        with refusals():
            summaries = self.instances.list_instances(str(self.project_dir))
            stalled = {item.workflow_id: self.instances.read(item.workflow_id, stalled_of_run)
                       for item in summaries if item.status in ("running", "waiting")}
        return InstanceList(instances=rows_of(summaries, stalled), store=self.store_named)

    # -- seeing inside ----------------------------------------------------------------
    def trace_transformations(self, workflow_id: str, field: str | None = None,
                              include_timing: bool = False) -> Traces:
        from aromcp_workflows.explain import transform_traces

        masker = self.masker(workflow_id)
        with refusals():
            events = self.instances.history(workflow_id, kinds=["transform_trace"])
        return Traces(traces=transform_traces(events, field, include_timing, masker))

    def debug_info(self, workflow_id: str) -> DebugInfo:
        from aromcp_workflows.explain import debug_info

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
    def adopt_orphans(self, run_dirs: list[RunDir] | None = None) -> int:
        """Adopt the commands of this store that servers of this machine left behind when
        they died (`app/orphans.py`); how many were found."""
        return orphans.adopt_all(self.driver, self.instances, run_dirs)

    def _masked(self, workflow_id: str, progress: ProgressCallback | None) -> ProgressCallback | None:
        """Progress reports masked like replies: they carry what a command prints."""
        if progress is None:
            return None

        def report(elapsed: float, message: str) -> None:
            progress(elapsed, self.masker(workflow_id, latest=False).mask_text(message))

        return report

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
