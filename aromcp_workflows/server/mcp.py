"""The MCP server: tools, prompts and resources as thin adapters over `WorkflowService`.

No workflow logic lives here.  Each tool calls one service method and returns its dict
as a typed result (structured content); a `ServiceError` becomes a tool error whose text
says what was wrong and what to do.  The service (and with it V8 and the store) is built
on the first tool call, so a client sees `tools/list` as fast as from a bare server.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import ToolAnnotations
from mcp_types import InputRequiredResult

from aromcp_workflows import __version__
from aromcp_workflows.server.elicit import Reply, UserInputGate
from aromcp_workflows.server.guard import GuardedServer, install_log_masking
from aromcp_workflows.server.models import (
    CheckpointResult,
    CompleteResult,
    DebugInfoResult,
    DefinitionResult,
    DependenciesResult,
    ExplainPlanResult,
    NextStepResult,
    ResumeResult,
    StartResult,
    StateReadResult,
    StateUpdateResult,
    StatusResult,
    StepCompleteResult,
    TestTransformationResult,
    TracesResult,
    ValidateResult,
    WorkflowInfoResult,
    WorkflowListResult,
)

log = logging.getLogger("aromcp_workflows")
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
RUNS = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=True)

INSTRUCTIONS = (
    "Runs YAML workflows one atomic step at a time. Loop: workflow_start, then perform each "
    "step and report it with workflow_step_complete (its answer carries next_step and messages; "
    "show every message to the user) until next_step is null. Sub-agents pass their task_id. "
    "If this client shows forms, the server asks user_input questions itself; `user_answers` in a "
    "result lists what the user answered there."
)


class ServiceHolder:
    """Builds the service on first use (heavy imports stay off the start-up path)."""

    def __init__(self, factory: Callable[[], Any], allowed_files: tuple[str, ...] = ()):
        self._factory = factory
        self._allowed_files = allowed_files
        self._service: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        if self._service is None:
            with self._lock:
                if self._service is None:
                    service = self._factory()
                    service.loader.names_only = True  # clients name workflows; paths are for the CLI
                    service.loader.allowed_files = frozenset(Path(f).resolve() for f in self._allowed_files)
                    self._service = service
        return self._service

    def masker(self, workflow_id: str | None) -> Any:
        """The masker of an instance, or None (before the service exists nothing is secret yet)."""
        if self._service is None or workflow_id is None:
            return None
        return self._service.masker(workflow_id, latest=False)  # the copy the reply was made from


def default_service_factory(project_dir: str | None = None, store: str | None = None) -> Callable[[], Any]:
    def build() -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=project_dir, store_path=store)

    return build


def build_server(service_factory: Callable[[], Any] | None = None, log_level: str = "WARNING",
                 allowed_files: tuple[str, ...] = ()) -> MCPServer:
    """The MCP server.  Clients name workflows; `allowed_files` are the only paths it runs
    (`aromcp-workflows run FILE` starts its own server allowing that one file)."""
    holder = ServiceHolder(service_factory or default_service_factory(), allowed_files)
    mcp = GuardedServer("aromcp-workflows", version=__version__, instructions=INSTRUCTIONS,
                        log_level=log_level.upper(),  # also uvicorn's, in HTTP mode
                        masker_for=holder.masker)

    def call(method: str, *args: Any, **kwargs: Any) -> Any:
        from aromcp_workflows.app.errors import ServiceError
        from aromcp_workflows.shell.runner import ShellInterrupted

        try:
            return getattr(holder.get(), method)(*args, **kwargs)
        except ServiceError as exc:
            raise ToolError(str(exc)) from None
        except ShellInterrupted as exc:
            raise ToolError(f"{exc}. Resume the instance (workflow_resume, then workflow_get_next_step) "
                            "once a server is running again.") from None
        except Exception as exc:
            log.exception("internal error in %s", method)
            raise ToolError(f"internal error in {method}: {type(exc).__name__}: {exc}. The instance was "
                            "saved as it was before this call; report this as a bug.") from None

    @mcp.tool(annotations=READ)
    def workflow_list(include_global: bool = True) -> WorkflowListResult:
        """List workflows runnable here (project, then ~/.aromcp, then built-in)."""
        return WorkflowListResult(**call("list_workflows", include_global))

    @mcp.tool(annotations=READ)
    def workflow_get_info(workflow: str) -> WorkflowInfoResult:
        """A workflow's description, version and declared inputs."""
        return WorkflowInfoResult(**call("get_info", workflow))

    @mcp.tool(annotations=READ)
    def workflow_validate(workflow: str | None = None, yaml: str | None = None) -> ValidateResult:
        """Validate a workflow by name/path, or YAML text; errors carry file, line, column."""
        return ValidateResult(**call("validate", workflow, yaml))

    @mcp.tool(annotations=RUNS)
    def workflow_start(workflow: str, inputs: dict[str, Any] | None = None) -> StartResult:
        """Start a workflow instance; returns workflow_id and the initial state."""
        return StartResult(**call("start", workflow, inputs or {}))

    @mcp.tool(annotations=RUNS)
    def workflow_get_next_step(workflow_id: str, task_id: str | None = None,
                               sub_agent_context: dict[str, Any] | None = None,
                               ctx: Context | None = None) -> NextStepResult | InputRequiredResult:
        """The next atomic step (null when done) and messages to show the user."""
        task = task_id or (sub_agent_context or {}).get("task_id")
        gate = UserInputGate.for_call(ctx, call, workflow_id, task, _progress(ctx))
        if gate is None:
            return NextStepResult(**call("next_step", workflow_id, task_id, sub_agent_context, _progress(ctx)))
        settled = gate.settle(gate.resume() if gate.resuming else gate.next_step())
        if isinstance(settled, InputRequiredResult):
            return settled
        return NextStepResult(workflow_id=workflow_id, status=settled.status, step=settled.step,
                              messages=settled.messages, **_extras(settled.error, gate))

    @mcp.tool(annotations=RUNS)
    def workflow_step_complete(workflow_id: str, step_id: str, status: Literal["success", "failed"] = "success",
                               result: Any = None, error: str | None = None, task_id: str | None = None,
                               ctx: Context | None = None) -> StepCompleteResult | InputRequiredResult:
        """Report a step's result; the answer carries next_step and messages."""
        gate = UserInputGate.for_call(ctx, call, workflow_id, task_id, _progress(ctx))
        if gate is None:
            return StepCompleteResult(**call("step_complete", workflow_id, step_id, status, result, error, task_id,
                                             _progress(ctx)))
        if gate.resuming:  # a later round: the agent's own result was recorded in the first one
            reply = gate.resume()
        else:
            data = call("step_complete", workflow_id, step_id, status, result, error, task_id, _progress(ctx))
            gate.state.head = {"success": data["success"], "error": data.get("error")}
            reply = Reply(data["status"], data["next_step"], list(data["messages"]), data.get("error"))
        settled = gate.settle(reply)
        if isinstance(settled, InputRequiredResult):
            return settled
        head = gate.state.head
        problem = settled.error if head.get("success", True) else head.get("error")
        return StepCompleteResult(success=bool(head.get("success", True)), status=settled.status,
                                  messages=settled.messages, next_step=settled.step, **_extras(problem, gate))

    @mcp.tool(annotations=READ)
    def workflow_state_read(workflow_id: str, paths: list[str] | None = None,
                            task_id: str | None = None) -> StateReadResult:
        """The flattened state (with inputs), or {path: value} for the given paths."""
        return StateReadResult(**call("state_read", workflow_id, paths, task_id))

    @mcp.tool(annotations=WRITE)
    def workflow_state_update(workflow_id: str, updates: list[dict[str, Any]],
                              task_id: str | None = None) -> StateUpdateResult:
        """Apply [{path: raw.x|state.x, value, operation?: set|append|increment|merge|delete}] atomically."""
        return StateUpdateResult(**call("state_update", workflow_id, updates, task_id))

    @mcp.tool(annotations=READ)
    def workflow_state_dependencies(workflow_id: str, field: str) -> DependenciesResult:
        """What a computed field reads and what reads it (tier-qualified paths)."""
        return DependenciesResult(**call("state_dependencies", workflow_id, field))

    @mcp.tool(annotations=WRITE)
    def workflow_checkpoint(workflow_id: str, reason: str = "", step_id: str | None = None) -> CheckpointResult:
        """Save a named snapshot that workflow_resume can roll back to."""
        return CheckpointResult(**call("checkpoint", workflow_id, reason, step_id))

    @mcp.tool(annotations=WRITE)
    def workflow_resume(workflow_id: str, checkpoint_id: str | None = None) -> ResumeResult:
        """Reload an instance (e.g. after a restart); with checkpoint_id, roll back to it."""
        data = call("resume", workflow_id, checkpoint_id)
        if data["status"] == "interrupted":  # its run was stopped (Ctrl-C): it goes on now
            data["status"] = call("reopen", workflow_id)["status"]
        return ResumeResult(**data)

    @mcp.tool(annotations=WRITE)
    def workflow_complete(workflow_id: str,
                          status: Literal["success", "failed", "cancelled"] = "success") -> CompleteResult:
        """Finish an instance (cancels unfinished steps); returns the final state."""
        return CompleteResult(**call("complete", workflow_id, status))

    @mcp.tool(annotations=READ)
    def workflow_status(workflow_id: str | None = None) -> StatusResult:
        """One instance's status and progress, or all of this project's instances."""
        return StatusResult(**call("status", workflow_id))

    @mcp.tool(annotations=READ)
    def workflow_load_definition(workflow: str) -> DefinitionResult:
        """The resolved definition (imports included) and the file it came from."""
        return DefinitionResult(**call("load_definition", workflow))

    @mcp.tool(annotations=READ)
    def workflow_trace_transformations(workflow_id: str, field: str | None = None,
                                       include_timing: bool = False) -> TracesResult:
        """Recorded computed-field recomputes: trigger, input, output, error."""
        return TracesResult(**call("trace_transformations", workflow_id, field, include_timing))

    @mcp.tool(annotations=READ)
    def workflow_debug_info(workflow_id: str) -> DebugInfoResult:
        """Current steps, step history, state size and transform performance."""
        return DebugInfoResult(**call("debug_info", workflow_id))

    @mcp.tool(annotations=READ)
    def workflow_test_transformation(transform: str, input: Any = None,
                                     context: dict[str, Any] | None = None) -> TestTransformationResult:
        """Run a JS transform on `input` in the real engine, without side effects."""
        return TestTransformationResult(**call("test_transformation", transform, input, context))

    @mcp.tool(annotations=READ)
    def workflow_explain_plan(workflow: str, inputs: dict[str, Any] | None = None) -> ExplainPlanResult:
        """Steps, loops, sub-agent estimate, MCP tools used and the compiled program."""
        return ExplainPlanResult(**call("explain_plan", workflow, inputs or {}))

    _register_prompts(mcp, holder)
    _compact_schemas(mcp)
    return mcp


def _compact_schemas(mcp: MCPServer) -> None:
    """Drop pydantic's generated titles from tool schemas: they repeat the property names
    and would push `tools/list` past its 12 KB budget without telling a client anything."""
    for tool in mcp._tool_manager.list_tools():
        tool.parameters = _strip_titles(tool.parameters)
        if tool.output_schema is not None:
            tool.output_schema = _strip_titles(tool.output_schema)


def _strip_titles(node: Any) -> Any:
    if isinstance(node, dict):
        options = node.get("anyOf")
        if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
            other = next(o for o in options if o != {"type": "null"})
            if set(other) <= {"type", "additionalProperties"} and isinstance(other.get("type"), str):
                node = {**{k: v for k, v in node.items() if k != "anyOf"}, "type": [other["type"], "null"]}
        return {k: _strip_titles(v) for k, v in node.items()
                if not (k == "title" and isinstance(v, str)) and not (k == "default" and v is None)
                and not (k == "additionalProperties" and v is True)}
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def _extras(error: str | None, gate: UserInputGate) -> dict[str, Any]:
    """`error` when there is one, and `user_answers`: what the user answered in forms this call."""
    extras: dict[str, Any] = {} if error is None else {"error": error}
    if gate.answers():
        extras["user_answers"] = gate.answers()
    return extras


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


def _register_prompts(mcp: MCPServer, holder: ServiceHolder) -> None:
    @mcp.prompt(name="workflow", description="Orchestrate a workflow: action = list|info|start|resume|status, "
                                             "target = workflow name or id")
    def workflow_prompt(action: str = "", target: str = "") -> list[UserMessage]:
        from aromcp_workflows.integrations.prompts import orchestrator_prompt

        return [UserMessage(orchestrator_prompt(action or None, target or None))]

    @mcp.prompt(name="sub_agent", description="Run one parallel task of a workflow until it ends")
    def sub_agent_prompt(workflow_id: str, task_id: str) -> list[UserMessage]:
        from aromcp_workflows.integrations.prompts import sub_agent_prompt as text

        return [UserMessage(text(workflow_id=workflow_id, task_id=task_id))]

    @mcp.resource("workflow://{name}", name="workflow", description="A workflow definition (YAML source)",
                  mime_type="application/yaml")
    def workflow_resource(name: str) -> str:
        from aromcp_workflows.app.errors import ServiceError

        try:
            info = holder.get().get_info(name)
        except ServiceError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        with open(info["found_at"], encoding="utf-8") as handle:
            return handle.read()


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          project_dir: str | None = None, store: str | None = None, allowed_files: tuple[str, ...] = ()) -> None:
    """Run the server; logs go to stderr so stdout stays the protocol channel."""
    level = os.environ.get("AROMCP_LOG_LEVEL", "WARNING").upper()
    install_log_masking()  # every record masked and capped, whichever library logs it
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = build_server(default_service_factory(project_dir, store), log_level=level, allowed_files=allowed_files)
    _stop_commands_on_signals()
    if transport == "stdio":
        server.run()
    else:
        print(f"aromcp-workflows: serving MCP (streamable HTTP) at http://{host}:{port}/mcp", file=sys.stderr,
              flush=True)
        server.run("streamable-http", host=host, port=port)


def _stop_commands_on_signals() -> None:
    """SIGTERM (a client closing us, `run` being stopped) or SIGINT: stop the shell commands
    this server started (each runs in its own process group, out of reach of a signal to
    ours) and leave at once.  No half-run command's result is stored; the instance keeps
    its step as started, and resuming runs it again."""
    import signal

    def stop(signum: int, _frame: Any) -> None:
        from aromcp_workflows.shell.runner import stop_all_commands

        stopped = stop_all_commands()
        log.warning("signal %d: stopped %d running command(s); exiting", signum, stopped)
        logging.shutdown()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
