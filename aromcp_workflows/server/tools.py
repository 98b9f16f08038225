"""The MCP tools: each one a method of `WorkflowTools` that calls one typed method of
`WorkflowService` and returns its result model as it is (the structured content).

No workflow logic lives here.  A `ServiceError` becomes a tool error whose text says what
was wrong and what to do; a shutdown is said plainly; anything unexpected is an internal
error, logged in full.  `register` adds every tool to the server with what it may do to
the world; `server/mcp.py` builds the server around them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from mcp_types import InputRequiredResult
from pydantic import ConfigDict

from aromcp_workflows.app import (
    CheckpointTaken,
    Completed,
    DebugInfo,
    DefinitionView,
    Dependencies,
    Forked,
    NextStep,
    Plan,
    Result,
    Resumed,
    Retried,
    Started,
    StateUpdated,
    StateView,
    StepCompleted,
    Traces,
    TransformTest,
    Validation,
    WorkflowInfo,
    WorkflowList,
)
from aromcp_workflows.errors import KindedError
from aromcp_workflows.server.consent import with_consent
from aromcp_workflows.server.elicit import UserInputGate

if TYPE_CHECKING:
    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.interpreter import Writer
    from aromcp_workflows.server.holder import ServiceHolder

log = logging.getLogger("aromcp_workflows")

# Only the hints that differ from the protocol's defaults (not read-only, destructive, not
# idempotent, open world) are sent; destructive and idempotent mean nothing for a read-only
# tool.  A tool that runs workflow steps (commands, other tools) has all the defaults.
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(destructive_hint=False, open_world_hint=False)
RUNS = None


@contextmanager
def tool_errors(tool: str) -> Iterator[None]:
    """What a tool's failure looks like to the client: the service's refusal as it is, a
    shutdown said plainly, anything unexpected as an internal error (logged in full)."""
    from aromcp_workflows.expressions import EngineUnavailable
    from aromcp_workflows.shell import ShellInterrupted

    try:
        yield
    except EngineUnavailable as exc:
        log.warning("%s: %s", tool, exc)
        raise ToolError(f"The server {exc}; nothing was changed by this call. Retry it in a moment; if it "
                        "keeps failing, look at the server's resources (processes, memory, open files).") from None
    except KindedError as exc:  # every kind is a tool error whose text says what to do (docs/mcp.md)
        raise ToolError(str(exc)) from None
    except ShellInterrupted as exc:
        raise ToolError(f"{exc}. Resume the instance (workflow_resume, then workflow_get_next_step) "
                        "once a server is running again.") from None
    except Exception as exc:
        log.exception("internal error in %s", tool)
        raise ToolError(f"internal error in {tool}: {type(exc).__name__}: {exc}. The instance was "
                        "saved as it was before this call; report this as a bug.") from None


class StatusReply(Result):
    """`workflow_status` answers one instance or the list: both shapes, one output schema."""

    model_config = ConfigDict(extra="allow")


def task_of(task_id: str | None, sub_agent_context: dict[str, Any] | None) -> str | None:
    """The task a sub-agent names: `task_id`, or the seed's `sub_agent_context.task_id`."""
    return task_id or (sub_agent_context or {}).get("task_id")


class WorkflowTools:
    """The MCP tools: each method is one tool (its docstring the description) and calls one
    typed method of `WorkflowService`; `build_server` registers them one by one."""

    def __init__(self, holder: ServiceHolder, client: Writer = "agent"):
        self.holder = holder
        self.client = client  # whose authority the calls carry: the agent's (the person's for `run`'s server)

    @property
    def service(self) -> WorkflowService:
        return self.holder.get()

    def workflow_list(self, include_global: bool = True) -> WorkflowList:
        """Which workflows can run here; call when the user asks what is available."""
        with tool_errors("workflow_list"):
            return self.service.list_workflows(include_global)

    def workflow_get_info(self, workflow: str) -> WorkflowInfo:
        """A workflow's description and inputs; call before workflow_start to learn its inputs."""
        with tool_errors("workflow_get_info"):
            return self.service.get_info(workflow)

    def workflow_validate(self, workflow: str | None = None, yaml: str | None = None) -> Validation:
        """Check a workflow (name, path or YAML text) without running it; errors have file:line:column."""
        with tool_errors("workflow_validate"):
            return self.service.validate(workflow, yaml)

    def workflow_start(self, workflow: str, inputs: dict[str, Any] | None = None,
                       idempotency_key: str | None = None) -> Started:
        """Start a workflow (idempotency_key: safe to resend); returns workflow_id. Then call workflow_get_next_step."""
        with tool_errors("workflow_start"):
            return self.service.start(workflow, inputs or {}, idempotency_key)

    def workflow_get_next_step(self, workflow_id: str, task_id: str | None = None,
                               sub_agent_context: dict[str, Any] | None = None,
                               ctx: Context | None = None) -> NextStep | InputRequiredResult:
        """The step to perform now (null: finished) and messages to show; sub-agents pass task_id."""
        task = task_of(task_id, sub_agent_context)
        with tool_errors("workflow_get_next_step"):
            gate = UserInputGate.for_call(ctx, self.service, workflow_id, task, _progress(ctx))
            if gate is None:
                return self.service.next_step(workflow_id, task, _progress(ctx))
            answered = gate.ask_user(gate.resume() if gate.resuming else gate.next_step())
        if isinstance(answered, InputRequiredResult):
            return answered
        return answered.model_copy(update={"user_answers": gate.answers()})

    def workflow_step_complete(self, workflow_id: str, step_id: str,
                               status: Literal["success", "failed"] = "success", result: Any = None,
                               error: str | None = None, task_id: str | None = None,
                               ctx: Context | None = None) -> StepCompleted | InputRequiredResult:
        """Report the result of the step you performed; the reply has the next step and messages."""
        with tool_errors("workflow_step_complete"):
            gate = UserInputGate.for_call(ctx, self.service, workflow_id, task_id, _progress(ctx))
            if gate is None:
                return self.service.step_complete(workflow_id, step_id, status, result, error, task_id,
                                                  _progress(ctx))
            # a later round (the question is out): the agent's own result was recorded in the first
            first = gate.resume() if gate.resuming else gate.completed(step_id, status, result, error)
            answered = gate.ask_user(first)
        if isinstance(answered, InputRequiredResult):
            return answered
        head = gate.state
        return StepCompleted(success=head.head_success, status=answered.status, messages=answered.messages,
                             next_step=answered.step,
                             error=answered.error if head.head_success else head.head_error,
                             user_answers=gate.answers(), waiting_for=answered.waiting_for)

    def workflow_state_read(self, workflow_id: str, paths: list[str] | None = None,
                            task_id: str | None = None) -> StateView:
        """Read an instance's state (or some paths) when a step needs a value you were not given."""
        with tool_errors("workflow_state_read"):
            return self.service.state_read(workflow_id, paths, task_id)

    def workflow_state_update(self, workflow_id: str, updates: list[dict[str, Any]],
                              task_id: str | None = None) -> StateUpdated:
        """Write raw./state. values atomically: [{path, value, operation?}]; only when told to."""
        with tool_errors("workflow_state_update"):
            return self.service.state_update(workflow_id, updates, task_id, by=self.client)

    def workflow_state_dependencies(self, workflow_id: str, field: str) -> Dependencies:
        """What a computed field reads and what reads it; to debug state."""
        with tool_errors("workflow_state_dependencies"):
            return self.service.state_dependencies(workflow_id, field)

    def workflow_checkpoint(self, workflow_id: str, reason: str = "", step_id: str | None = None) -> CheckpointTaken:
        """Save a snapshot workflow_resume can roll back to, e.g. before a risky stretch."""
        with tool_errors("workflow_checkpoint"):
            return self.service.checkpoint(workflow_id, reason, step_id)

    def workflow_resume(self, workflow_id: str, checkpoint_id: str | None = None,
                        ctx: Context | None = None) -> Resumed | InputRequiredResult:
        """Continue an instance in a new session (optionally from a checkpoint), then get its next step."""
        arguments = {"workflow_id": workflow_id, "checkpoint_id": checkpoint_id}
        with tool_errors("workflow_resume"):
            return with_consent(ctx, arguments, lambda consented: self.service.resume(
                workflow_id, checkpoint_id, by=self.client, consented=consented))

    def workflow_complete(self, workflow_id: str,
                          status: Literal["success", "failed", "cancelled"] = "success") -> Completed:
        """End an instance early: success, failed or cancelled."""
        with tool_errors("workflow_complete"):
            return self.service.complete(workflow_id, status)

    def workflow_retry(self, workflow_id: str) -> Retried:
        """A failed instance goes on from its failed step, state as before it; then get its next step."""
        with tool_errors("workflow_retry"):
            return self.service.retry(workflow_id)

    def workflow_fork(self, workflow_id: str, at: str | None = None, version: int | None = None,
                      checkpoint_id: str | None = None, edits: dict[str, Any] | None = None,
                      ctx: Context | None = None) -> Forked | InputRequiredResult:
        """New instance from a step (at), version or checkpoint of another, with edits {raw.x: value}."""
        arguments = {"workflow_id": workflow_id, "at": at, "version": version, "checkpoint_id": checkpoint_id,
                     "edits": edits}
        with tool_errors("workflow_fork"):
            return with_consent(ctx, arguments, lambda consented: self.service.fork(
                workflow_id, at, version, checkpoint_id, edits, by=self.client, consented=consented))

    def workflow_status(self, workflow_id: str | None = None) -> StatusReply:
        """An instance's status and progress, or every instance of this project."""
        with tool_errors("workflow_status"):
            found = self.service.list_instances() if workflow_id is None else self.service.status(workflow_id)
        return StatusReply(**found.model_dump(mode="json"))

    def workflow_load_definition(self, workflow: str) -> DefinitionView:
        """A workflow's resolved definition, to read its steps."""
        with tool_errors("workflow_load_definition"):
            return self.service.load_definition(workflow)

    def workflow_trace_transformations(self, workflow_id: str, field: str | None = None,
                                       include_timing: bool = False) -> Traces:
        """Recomputes of computed fields (input, output, error); to debug a wrong value."""
        with tool_errors("workflow_trace_transformations"):
            return self.service.trace_transformations(workflow_id, field, include_timing)

    def workflow_debug_info(self, workflow_id: str) -> DebugInfo:
        """Step history, current steps and timings; to debug a stuck or failed instance."""
        with tool_errors("workflow_debug_info"):
            return self.service.debug_info(workflow_id)

    def workflow_test_transformation(self, transform: str, input: Any = None,
                                     context: dict[str, Any] | None = None) -> TransformTest:
        """Try a JS transform on sample input in the real engine, without side effects."""
        with tool_errors("workflow_test_transformation"):
            return self.service.test_transformation(transform, input, context)

    def workflow_explain_plan(self, workflow: str, inputs: dict[str, Any] | None = None) -> Plan:
        """What a workflow will do (steps, loops, sub-agents, MCP tools), without running it."""
        with tool_errors("workflow_explain_plan"):
            return self.service.explain_plan(workflow, inputs or {})

    def register(self, mcp: MCPServer) -> None:
        """Every tool, with what it may do to the world (read, write, or run commands)."""
        for tool, hints in (
                (self.workflow_list, READ), (self.workflow_get_info, READ), (self.workflow_validate, READ),
                (self.workflow_start, RUNS), (self.workflow_get_next_step, RUNS),
                (self.workflow_step_complete, RUNS), (self.workflow_state_read, READ),
                (self.workflow_state_update, WRITE), (self.workflow_state_dependencies, READ),
                (self.workflow_checkpoint, WRITE), (self.workflow_resume, WRITE), (self.workflow_complete, WRITE),
                (self.workflow_retry, WRITE), (self.workflow_fork, WRITE),
                (self.workflow_status, READ), (self.workflow_load_definition, READ),
                (self.workflow_trace_transformations, READ), (self.workflow_debug_info, READ),
                (self.workflow_test_transformation, READ), (self.workflow_explain_plan, READ)):
            mcp.add_tool(tool, annotations=hints)


def _progress(ctx: Context | None) -> Callable[[float, str], None] | None:
    """Progress notifications for long shell commands, sent from the tool's worker thread."""
    if ctx is None:
        return None

    def report(elapsed: float, message: str) -> None:
        import anyio.from_thread

        try:
            anyio.from_thread.run(ctx.report_progress, elapsed, None, message)
        except Exception:
            log.debug("progress notification failed", exc_info=True)

    return report
