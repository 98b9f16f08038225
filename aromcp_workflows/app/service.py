"""The application API: every operation the MCP tools and the CLI offer, as plain Python.

`WorkflowService` knows workflows (definition/), runs (interpreter/), state (state/) and
persistence (instances.py over store/), and nothing about MCP.  Each method returns a
JSON-safe dict shaped as the README's MCP interface says, or raises `ServiceError` whose
text tells the caller what was wrong and what to do.  Every change is saved before the method returns.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aromcp_workflows.app.driver import Driver
from aromcp_workflows.app.errors import ServiceError
from aromcp_workflows.app.instances import InstanceRegistry
from aromcp_workflows.definition import (
    DefinitionError,
    WorkflowLoader,
    WorkflowResolver,
    check,
    load_valid_bundle,
)
from aromcp_workflows.interpreter import InputError, RunError, WorkflowRun
from aromcp_workflows.shell.runner import ProgressCallback
from aromcp_workflows.state import StateError, Update
from aromcp_workflows.store import NotFoundError, StoreError, open_store

__all__ = ["WorkflowService"]


def _default_engine() -> Any:
    from aromcp_workflows.expressions import ExpressionEngine

    return ExpressionEngine()


class WorkflowService:
    def __init__(self, project_dir: str | Path | None = None, store_path: str | Path | None = None,
                 home: str | Path | None = None, engine_factory: Callable[[], Any] = _default_engine):
        self.resolver = WorkflowResolver(project_dir=project_dir, home=home)
        self.loader = WorkflowLoader(self.resolver, syntax_engine=self._engine)  # compiles JS in the V8 children
        self._maskers: dict[str, tuple[Any, Any]] = {}  # workflow id -> ((run, version), masker)
        self.instances = InstanceRegistry(lambda: open_store(store_path), engine_factory)
        self.instances.settled = self._remember_masker

    @property
    def project_dir(self) -> Path:
        return self.resolver.project_dir

    def _engine(self) -> Any:
        return self.instances.engine

    # -- workflows ------------------------------------------------------------------
    def list_workflows(self, include_global: bool = True) -> dict[str, Any]:
        rows = []
        for location in self.resolver.list(include_global=include_global):
            row = {"name": location.name, "description": "", "version": "", "source": location.source,
                   "path": str(location.path)}
            try:
                definition = self.loader.load_one_file(location.path, location.source).definition
                row.update(description=definition.description, version=definition.version)
            except DefinitionError as exc:
                row["description"] = f"(invalid: {exc.problems[0] if exc.problems else exc})"
            rows.append(row)
        return {"workflows": rows}

    def get_info(self, workflow: str) -> dict[str, Any]:
        loaded = self._guard(lambda: self.loader.load(workflow))
        definition = loaded.definition
        return {"name": definition.name, "description": definition.description, "version": definition.version,
                "inputs": {n: s.model_dump(exclude_none=True) for n, s in definition.inputs.items()},
                "found_at": loaded.file, "source": loaded.source}

    def validate(self, workflow: str | None = None, yaml: str | None = None) -> dict[str, Any]:
        if (workflow is None) == (yaml is None):
            raise ServiceError("workflow_validate needs exactly one of `workflow` (a name or file path) "
                               "or `yaml` (the text of a workflow)")
        if yaml is not None:
            return self._validate_text(yaml)
        report = check(workflow or "", self.loader)
        return {"valid": report.valid, "errors": [p.to_dict() for p in report.errors],
                "warnings": [p.to_dict() for p in report.warnings]}

    def _validate_text(self, text: str) -> dict[str, Any]:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "workflow.yaml"
            path.write_text(text, encoding="utf-8")
            report = check(str(path), WorkflowLoader(self.resolver, syntax_engine=self._engine))
        def clean(problem: Any) -> dict[str, Any]:
            data = problem.to_dict()
            if data["file"] == str(path):
                data["file"] = "<yaml>"
            return data
        return {"valid": report.valid, "errors": [clean(p) for p in report.errors],
                "warnings": [clean(p) for p in report.warnings]}

    def load_definition(self, workflow: str) -> dict[str, Any]:
        bundle = self._guard(lambda: load_valid_bundle(workflow, self.loader))
        definition = bundle.main.definition.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"name": definition["name"], "steps": definition["steps"],
                "state_schema": definition.get("state_schema", {}),
                "sub_agent_tasks": definition.get("sub_agent_tasks", {}),
                "loaded_from": bundle.main.file,
                "imports": {name: w.file for name, w in bundle.workflows.items() if name != bundle.main.name}}

    # -- instances ------------------------------------------------------------------
    def start(self, workflow: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        bundle = self._guard(lambda: load_valid_bundle(workflow, self.loader))
        workflow_id = f"wf_{uuid.uuid4().hex[:12]}"
        run = self._guard(lambda: self.instances.start(workflow_id, bundle, self.project_dir, inputs or {}))
        return {"workflow_id": workflow_id, "status": run.status, "state": run.states["main"].flattened()}

    def next_step(self, workflow_id: str, task_id: str | None = None,
                  sub_agent_context: dict[str, Any] | None = None,
                  progress: ProgressCallback | None = None) -> dict[str, Any]:
        task_id = task_id or (sub_agent_context or {}).get("task_id")
        answer = self._guard(lambda: self._driver(workflow_id).next_step(task_id, progress))
        result = {"workflow_id": workflow_id, "status": answer.status, "step": answer.step,
                  "messages": answer.messages}
        if answer.error:
            result["error"] = self.masker(workflow_id, latest=False).mask_text(answer.error)
        return result

    def step_complete(self, workflow_id: str, step_id: str, status: str = "success", result: Any = None,
                      error: str | None = None, task_id: str | None = None,
                      progress: ProgressCallback | None = None) -> dict[str, Any]:
        if status not in ("success", "failed"):
            raise ServiceError(f"status must be 'success' or 'failed', not {status!r}")
        driver = self._driver(workflow_id)
        answer = self._guard(lambda: driver.complete(task_id, step_id, status, result, error, progress))
        reply = {"success": answer.success, "status": answer.status, "messages": answer.messages,
                 "next_step": answer.next_step}
        if answer.error:
            reply["error"] = answer.error
        return reply

    def state_read(self, workflow_id: str, paths: list[str] | None = None,
                   task_id: str | None = None) -> dict[str, Any]:
        def look(run: WorkflowRun, _record: Any) -> dict[str, Any]:
            store = run.state_for(task_id)
            return {"state": store.read(paths) if paths else store.flattened()}

        return self._guard(lambda: self.instances.read(workflow_id, look))

    def state_update(self, workflow_id: str, updates: list[dict[str, Any]],
                     task_id: str | None = None) -> dict[str, Any]:
        if not updates:
            raise ServiceError("updates is empty: give at least one {path, value, operation?}")
        batch = []
        for index, item in enumerate(updates):
            if not isinstance(item, dict) or "path" not in item:
                raise ServiceError(f"updates[{index}] has no `path` (e.g. raw.files)")
            batch.append(Update(path=item["path"], operation=item.get("operation") or "set", value=item.get("value")))
        result = self._guard(lambda: self.instances.transact(workflow_id, lambda run: run.agent_update(task_id, batch)))
        return {"success": True, "updated": result.changed_paths, "computed_changed": result.computed_changed}

    def state_dependencies(self, workflow_id: str, field: str) -> dict[str, Any]:
        return self._guard(lambda: self.instances.read(workflow_id,
                                                       lambda run, _: run.states["main"].dependencies(field)))

    def checkpoint(self, workflow_id: str, reason: str = "", step_id: str | None = None) -> dict[str, Any]:
        point, where = self._guard(lambda: self.instances.add_checkpoint(workflow_id, step_id, reason))
        return {"checkpoint_id": point.checkpoint_id, "state_path": where}

    def resume(self, workflow_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
        self._guard(lambda: self.instances.exists(workflow_id))
        if checkpoint_id is not None:
            self._guard(lambda: self.instances.roll_back(workflow_id, checkpoint_id))
        self.instances.forget(workflow_id)
        self._guard(lambda: self.instances.transact(workflow_id, _retry_if_asked))
        last = self._guard(lambda: self.instances.last_checkpoint(workflow_id))
        status, state = self._guard(lambda: self.instances.read(
            workflow_id, lambda run, _: (run.status, run.states["main"].flattened())))
        return {"workflow_id": workflow_id, "status": status, "state": state,
                "last_checkpoint": None if last is None else {
                    "checkpoint_id": last.checkpoint_id, "step_id": last.step_id, "reason": last.reason,
                    "timestamp": last.created_at}}

    def complete(self, workflow_id: str, status: str = "success") -> dict[str, Any]:
        mapping = {"success": "completed", "completed": "completed", "failed": "failed", "cancelled": "cancelled"}
        if status not in mapping:
            raise ServiceError(f"status must be one of success, failed, cancelled (got {status!r})")

        def finish(run: WorkflowRun) -> dict[str, Any]:
            if not run.finished:
                run.cancel(mapping[status])
            return {"success": True, "final_state": run.states["main"].flattened()}

        return self._guard(lambda: self.instances.transact(workflow_id, finish))

    def interrupt(self, workflow_id: str, reason: str = "") -> dict[str, Any]:
        """Mark a running instance `interrupted`: the process running it was stopped (Ctrl-C
        during `run`).  Nothing else changes; `reopen` (via workflow_resume) goes on."""
        def mark(run: WorkflowRun) -> dict[str, Any]:
            if run.status in ("running", "waiting"):
                run.set_status("interrupted", reason or "the run was interrupted")
            return {"workflow_id": workflow_id, "status": run.status}

        return self._guard(lambda: self.instances.transact(workflow_id, mark))

    def reopen(self, workflow_id: str) -> dict[str, Any]:
        """An interrupted instance is running again (workflow_resume, `run --resume`)."""
        def unmark(run: WorkflowRun) -> dict[str, Any]:
            if run.status == "interrupted":
                run.set_status("running")
            return {"workflow_id": workflow_id, "status": run.status}

        return self._guard(lambda: self.instances.transact(workflow_id, unmark))

    def status(self, workflow_id: str | None = None) -> dict[str, Any]:
        if workflow_id is None:
            now = datetime.now(UTC)
            rows = []
            for item in self._guard(lambda: self.instances.list_instances(str(self.project_dir))):
                age = (now - datetime.fromisoformat(item.created_at)).total_seconds()
                rows.append({"workflow_id": item.workflow_id, "workflow": item.workflow, "status": item.status,
                             "current_steps": item.current_steps, "age_seconds": round(age, 1),
                             "updated_at": item.updated_at, "error": item.error})
            return {"instances": rows}
        return self._guard(lambda: self.instances.read(workflow_id, _instance_status))

    # -- seeing inside ----------------------------------------------------------------
    def trace_transformations(self, workflow_id: str, field: str | None = None,
                              include_timing: bool = False) -> dict[str, Any]:
        from aromcp_workflows.explain.inspect import transform_traces

        masker = self.masker(workflow_id)
        events = self._guard(lambda: self.instances.history(workflow_id, kinds=["transform_trace"]))
        return {"traces": transform_traces(events, field, include_timing, masker)}

    def debug_info(self, workflow_id: str) -> dict[str, Any]:
        from aromcp_workflows.explain.inspect import debug_info

        masker = self.masker(workflow_id)
        events = self._guard(lambda: self.instances.history(workflow_id))
        return self._guard(lambda: self.instances.read(workflow_id, lambda run, _: debug_info(run, events, masker)))

    def test_transformation(self, transform: str, input: Any = None,
                            context: dict[str, Any] | None = None) -> dict[str, Any]:
        from aromcp_workflows.expressions import ExpressionError

        started = time.perf_counter()
        try:
            output = self.instances.engine.test_transform(transform, input, context or {})
        except ExpressionError as exc:
            return {"success": False, "error": str(exc),
                    "execution_time_ms": round((time.perf_counter() - started) * 1000, 3)}
        return {"success": True, "output": output,
                "execution_time_ms": round((time.perf_counter() - started) * 1000, 3)}

    def explain_plan(self, workflow: str, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
        from aromcp_workflows.explain.plan import explain_plan

        bundle = self._guard(lambda: load_valid_bundle(workflow, self.loader))
        return self._guard(lambda: explain_plan(bundle, inputs or {}, self.instances.engine))

    def masker(self, workflow_id: str, latest: bool = True) -> Any:
        """The instance's masker, for replies, errors and logs: built once per saved version
        (under the instance lock; `run.masker()` re-walks only what changed).  `latest=False`
        is for the reply guard, which runs on the event loop right after the call that
        loaded or committed the instance: it takes the masker that call left behind
        (`_remember_masker`), with no lock and no query, and reads only when there is none."""
        if not latest:
            hit = self._maskers.get(workflow_id)
            if hit is not None:
                return hit[1]
        return self._guard(lambda: self.instances.read(workflow_id, self._remember_masker))

    def _remember_masker(self, run: WorkflowRun, record: Any) -> Any:
        """The run's masker, cached per version; the instance layer calls this under the
        instance lock at the end of every call."""
        key = (id(run), record.version)
        hit = self._maskers.get(run.workflow_id)
        if hit is None or hit[0] != key:
            hit = self._maskers[run.workflow_id] = (key, run.masker())
        return hit[1]

    # -- helpers --------------------------------------------------------------------
    def _driver(self, workflow_id: str) -> Driver:
        """A driver whose every locked stretch is one transaction of the instance layer."""
        def transact(change: Callable[[WorkflowRun], Any]) -> Any:
            return self.instances.transact(workflow_id, change)

        return Driver(transact=transact)

    def _guard(self, action: Callable[[], Any]) -> Any:
        """Turn every expected failure into a `ServiceError` with an actionable message."""
        try:
            return action()
        except ServiceError:
            raise
        except DefinitionError as exc:
            raise ServiceError(str(exc)) from None
        except InputError as exc:
            raise ServiceError(f"{exc}. workflow_get_info shows the declared inputs.") from None
        except (RunError, StateError, NotFoundError) as exc:
            raise ServiceError(str(exc)) from None
        except StoreError as exc:
            raise ServiceError(f"workflow store error: {exc}") from None


def _retry_if_asked(run: WorkflowRun) -> bool:
    """The workflow's `on_resume.retry_failed_steps` (the seed's default: on) puts a failed
    instance back at the step that failed."""
    return run.bundle.main.definition.on_resume.retry_failed_steps and run.retry_failed()


def _instance_status(run: WorkflowRun, record: Any) -> dict[str, Any]:
    tasks = [t for tid, t in run.threads.items() if tid != "main"]
    progress = {"tasks_total": len(tasks),
                "tasks_completed": sum(t.status == "completed" for t in tasks),
                "tasks_failed": sum(t.status == "failed" for t in tasks),
                "tasks_running": sum(t.status == "running" for t in tasks)}
    result = {"workflow_id": run.workflow_id, "workflow": record.workflow, "status": run.status,
              "current_steps": list(record.current_steps), "progress": progress}
    if run.error:
        result["error"] = run.masker().mask_text(run.error)
    return result
