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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import ToolAnnotations
from mcp_types import InputRequiredResult
from pydantic import ConfigDict

from aromcp_workflows import __version__
from aromcp_workflows.app.results import (
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
from aromcp_workflows.observe import Observer
from aromcp_workflows.observe import start as start_tracing
from aromcp_workflows.safety.masking import Masker
from aromcp_workflows.server.elicit import UserInputGate
from aromcp_workflows.server.guard import GuardedServer, install_log_masking
from aromcp_workflows.server.schemas import compact_tool_schemas

if TYPE_CHECKING:
    from aromcp_workflows.app.service import WorkflowService

log = logging.getLogger("aromcp_workflows")
SHUTDOWN_FLUSH_S = 2.0  # how long a signalled server waits for its last spans to be exported
# Only the hints that differ from the protocol's defaults (not read-only, destructive, not
# idempotent, open world) are sent; destructive and idempotent mean nothing for a read-only
# tool.  A tool that runs workflow steps (commands, other tools) has all the defaults.
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(destructive_hint=False, open_world_hint=False)
RUNS = None

INSTRUCTIONS = (
    "Runs YAML workflows one atomic step at a time. Loop: workflow_start, then perform each "
    "step and report it with workflow_step_complete (its answer carries next_step and messages; "
    "show every message to the user) until next_step is null. Sub-agents pass their task_id. "
    "If this client shows forms, the server asks user_input questions itself; `user_answers` in a "
    "result lists what the user answered there."
)


class ServiceHolder:
    """Builds the service on first use (heavy imports stay off the start-up path)."""

    def __init__(self, factory: Callable[[], WorkflowService], allowed_files: tuple[str, ...] = ()):
        self._factory = factory
        self._allowed_files = allowed_files
        self._service: WorkflowService | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkflowService:
        if self._service is None:
            with self._lock:
                if self._service is None:
                    service = self._factory()
                    service.loader.names_only = True  # clients name workflows; paths are for the CLI
                    service.loader.allowed_files = frozenset(Path(f).resolve() for f in self._allowed_files)
                    self._service = service
        return self._service

    def masker(self, workflow_id: str | None) -> Masker | None:
        """The masker of an instance, or None (before the service exists nothing is secret yet)."""
        if self._service is None or workflow_id is None:
            return None
        return self._service.masker(workflow_id, latest=False)  # the copy the reply was made from


def default_service_factory(project_dir: str | None = None, store: str | None = None,
                            observer: Observer | None = None) -> Callable[[], WorkflowService]:
    def build() -> WorkflowService:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=project_dir, store_path=store, observer=observer)

    return build


@contextmanager
def tool_errors(tool: str) -> Iterator[None]:
    """What a tool's failure looks like to the client: the service's refusal as it is, a
    shutdown said plainly, anything unexpected as an internal error (logged in full)."""
    from aromcp_workflows.app.errors import ServiceError
    from aromcp_workflows.shell.runner import ShellInterrupted

    try:
        yield
    except ServiceError as exc:
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

    def __init__(self, holder: ServiceHolder):
        self.holder = holder

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

    def workflow_start(self, workflow: str, inputs: dict[str, Any] | None = None) -> Started:
        """Start a workflow; returns its workflow_id. Then call workflow_get_next_step."""
        with tool_errors("workflow_start"):
            return self.service.start(workflow, inputs or {})

    def workflow_get_next_step(self, workflow_id: str, task_id: str | None = None,
                               sub_agent_context: dict[str, Any] | None = None,
                               ctx: Context | None = None) -> NextStep | InputRequiredResult:
        """The step to perform now (null: finished) and messages to show; sub-agents pass task_id."""
        task = task_of(task_id, sub_agent_context)
        with tool_errors("workflow_get_next_step"):
            gate = UserInputGate.for_call(ctx, self.service, workflow_id, task, _progress(ctx))
            if gate is None:
                return self.service.next_step(workflow_id, task, _progress(ctx))
            settled = gate.settle(gate.resume() if gate.resuming else gate.next_step())
        if isinstance(settled, InputRequiredResult):
            return settled
        return settled.model_copy(update={"user_answers": gate.answers()})

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
            settled = gate.settle(first)
        if isinstance(settled, InputRequiredResult):
            return settled
        head = gate.state
        return StepCompleted(success=head.head_success, status=settled.status, messages=settled.messages,
                             next_step=settled.step,
                             error=settled.error if head.head_success else head.head_error,
                             user_answers=gate.answers())

    def workflow_state_read(self, workflow_id: str, paths: list[str] | None = None,
                            task_id: str | None = None) -> StateView:
        """Read an instance's state (or some paths) when a step needs a value you were not given."""
        with tool_errors("workflow_state_read"):
            return self.service.state_read(workflow_id, paths, task_id)

    def workflow_state_update(self, workflow_id: str, updates: list[dict[str, Any]],
                              task_id: str | None = None) -> StateUpdated:
        """Write raw./state. values atomically: [{path, value, operation?}]; only when told to."""
        with tool_errors("workflow_state_update"):
            return self.service.state_update(workflow_id, updates, task_id)

    def workflow_state_dependencies(self, workflow_id: str, field: str) -> Dependencies:
        """What a computed field reads and what reads it; to debug state."""
        with tool_errors("workflow_state_dependencies"):
            return self.service.state_dependencies(workflow_id, field)

    def workflow_checkpoint(self, workflow_id: str, reason: str = "", step_id: str | None = None) -> CheckpointTaken:
        """Save a snapshot workflow_resume can roll back to, e.g. before a risky stretch."""
        with tool_errors("workflow_checkpoint"):
            return self.service.checkpoint(workflow_id, reason, step_id)

    def workflow_resume(self, workflow_id: str, checkpoint_id: str | None = None) -> Resumed:
        """Continue an instance in a new session (optionally from a checkpoint), then get its next step."""
        with tool_errors("workflow_resume"):
            return self.service.resume(workflow_id, checkpoint_id)

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
                      checkpoint_id: str | None = None, edits: dict[str, Any] | None = None) -> Forked:
        """New instance from a step (at), version or checkpoint of another, with edits {raw.x: value}."""
        with tool_errors("workflow_fork"):
            return self.service.fork(workflow_id, at, version, checkpoint_id, edits)

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


def build_server(service_factory: Callable[[], WorkflowService] | None = None, log_level: str = "WARNING",
                 allowed_files: tuple[str, ...] = (), observer: Observer | None = None) -> MCPServer:
    """The MCP server.  Clients name workflows; `allowed_files` are the only paths it runs
    (`aromcp-workflows run FILE` starts its own server allowing that one file).  `observer`:
    tracing, when on (the service it builds must have it too)."""
    holder = ServiceHolder(service_factory or default_service_factory(), allowed_files)
    mcp = GuardedServer("aromcp-workflows", version=__version__, instructions=INSTRUCTIONS,
                        log_level=log_level.upper(),  # also uvicorn's, in HTTP mode
                        masker_for=holder.masker, service=holder.get, observer=observer)
    WorkflowTools(holder).register(mcp)
    _register_prompts(mcp, holder)
    compact_tool_schemas(mcp)
    return mcp


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
        with open(info.found_at, encoding="utf-8") as handle:
            return handle.read()


def serve(transport: str = "stdio", host: str = "127.0.0.1", port: int = 8765,
          project_dir: str | None = None, store: str | None = None, allowed_files: tuple[str, ...] = (),
          ui: bool = False, ui_actions: bool = False) -> None:
    """Run the server; logs go to stderr so stdout stays the protocol channel.  `ui`: the web
    view at /ui of the HTTP server, over the same service (`ui_actions`: with its actions)."""
    level = os.environ.get("AROMCP_LOG_LEVEL", "WARNING").upper()
    install_log_masking()  # every record masked and capped, whichever library logs it
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    observer = start_tracing()  # None unless OTEL_* variables ask for traces (docs/observability.md)
    server = build_server(default_service_factory(project_dir, store, observer), log_level=level,
                          allowed_files=allowed_files, observer=observer)
    _stop_commands_on_signals(observer)
    try:
        if transport == "stdio":
            server.run()
        elif ui:
            _serve_with_ui(server, host, port, ui_actions, level)
        else:
            print(f"aromcp-workflows: serving MCP (streamable HTTP) at http://{host}:{port}/mcp", file=sys.stderr,
                  flush=True)
            server.run("streamable-http", host=host, port=port)
    finally:
        if observer is not None:
            observer.shutdown()


def _serve_with_ui(server: MCPServer, host: str, port: int, actions: bool, level: str) -> None:
    """The MCP app with the web view mounted at /ui (its own token for actions), on one port."""
    from aromcp_workflows.web.run import UI_PATH, listen, mount_ui, serve_app, url_of

    app = server.streamable_http_app(host=host)
    service = getattr(server, "service", None)
    assert service is not None, "build_server gives the server its service"
    view = mount_ui(app, service, host, actions)
    sock = listen(host, port)
    bound = sock.getsockname()[1]
    print(f"aromcp-workflows: serving MCP (streamable HTTP) at http://{host}:{bound}/mcp", file=sys.stderr,
          flush=True)
    print(f"aromcp-workflows: web view at {url_of(host, bound, UI_PATH + '/', view)}", file=sys.stderr, flush=True)
    serve_app(app, sock, level)


def _stop_commands_on_signals(observer: Observer | None = None) -> None:
    """SIGTERM (a client closing us, `run` being stopped) or SIGINT: stop the shell commands
    this server started (each runs in its own process group, out of reach of a signal to
    ours) and leave at once.  No half-run command's result is stored; the instance keeps
    its step as started, and resuming runs it again.  Spans not yet exported get
    `SHUTDOWN_FLUSH_S` to leave."""
    import signal

    def stop(signum: int, _frame: Any) -> None:
        from aromcp_workflows.shell.runner import stop_all_commands

        stopped = stop_all_commands()
        log.warning("signal %d: stopped %d running command(s); exiting", signum, stopped)
        if observer is not None:
            flush = threading.Thread(target=observer.shutdown, daemon=True)
            flush.start()
            flush.join(SHUTDOWN_FLUSH_S)
        logging.shutdown()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
