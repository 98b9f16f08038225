"""The MCP server: the tools (`server/tools.py`), prompts and resources around one
`WorkflowService`, served over stdio or streamable HTTP.

The service (and with it V8 and the store) is built on the first tool call, so a client
sees `tools/list` as fast as from a bare server.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.prompts.base import UserMessage

from aromcp_workflows import __version__
from aromcp_workflows.observe import Observer
from aromcp_workflows.observe import start as start_tracing
from aromcp_workflows.server.guard import GuardedServer, install_log_masking
from aromcp_workflows.server.holder import ServiceHolder, default_service_factory
from aromcp_workflows.server.schemas import compact_tool_schemas
from aromcp_workflows.server.tools import WorkflowTools

if TYPE_CHECKING:
    from pathlib import Path

    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.http import Admission
    from aromcp_workflows.interpreter import Writer
    from aromcp_workflows.server.http_auth import BearerAdmission, HttpAuth, HttpOptions

log = logging.getLogger("aromcp_workflows")
SHUTDOWN_FLUSH_S = 2.0  # how long a signalled server waits for its last spans to be exported
CLAIM_BEFORE_SERVING_S = 10  # at most, before a server answers, to claim the commands a dead one left
INSTRUCTIONS = (
    "Runs YAML workflows one atomic step at a time. Loop: workflow_start, then perform each "
    "step and report it with workflow_step_complete (its answer carries next_step and messages; "
    "show every message to the user) until next_step is null. Sub-agents pass their task_id. "
    "If this client shows forms, the server asks user_input questions itself; `user_answers` in a "
    "result lists what the user answered there."
)


def build_server(service_factory: Callable[[], WorkflowService] | None = None, log_level: str = "WARNING",
                 allowed_files: tuple[str, ...] = (), observer: Observer | None = None,
                 auth: HttpAuth | None = None, client: Writer = "agent") -> MCPServer:
    """The MCP server.  Clients name workflows; `allowed_files` are the only paths it runs
    (`aromcp-workflows run FILE` starts its own server allowing that one file).  `observer`:
    tracing, when on (the service it builds must have it too).  `auth` (HTTP only) is how
    its clients are checked: the SDK's bearer middleware.  `client`: whose authority its
    calls carry (the agent's; the person's for the headless runner's own server)."""
    holder = ServiceHolder(service_factory or default_service_factory(), allowed_files)
    mcp = GuardedServer("aromcp-workflows", version=__version__, instructions=INSTRUCTIONS,
                        log_level=log_level.upper(),  # also uvicorn's, in HTTP mode
                        masker_for=holder.masker, service=holder.get, observer=observer,
                        token_verifier=auth.verifier if auth else None, auth=auth.settings if auth else None)
    if observer is not None:  # every call about an instance in its trace, before the SDK's span is made
        from aromcp_workflows.server.trace_calls import InstanceTraces

        mcp._lowlevel_server.middleware.insert(0, InstanceTraces(observer, holder.get))
    WorkflowTools(holder, client).register(mcp)
    _register_prompts(mcp, holder)
    compact_tool_schemas(mcp)
    return mcp


def _register_prompts(mcp: MCPServer, holder: ServiceHolder) -> None:
    @mcp.prompt(name="workflow", description="Orchestrate a workflow: action = list|info|start|resume|status, "
                                             "target = workflow name or id")
    def workflow_prompt(action: str = "", target: str = "") -> list[UserMessage]:
        from aromcp_workflows.integrations import orchestrator_prompt

        return [UserMessage(orchestrator_prompt(action or None, target or None))]

    @mcp.prompt(name="sub_agent", description="Run one parallel task of a workflow until it ends")
    def sub_agent_prompt(workflow_id: str, task_id: str) -> list[UserMessage]:
        from aromcp_workflows.integrations import sub_agent_prompt as text

        return [UserMessage(text(workflow_id=workflow_id, task_id=task_id))]

    @mcp.resource("workflow://{name}", name="workflow", description="A workflow definition (YAML source)",
                  mime_type="application/yaml")
    def workflow_resource(name: str) -> str:
        from aromcp_workflows.instances import ServiceError

        try:
            info = holder.get().get_info(name)
        except ServiceError as exc:
            raise ResourceNotFoundError(str(exc)) from None
        with open(info.found_at, encoding="utf-8") as handle:
            return handle.read()


def serve(project_dir: str | None = None, store: str | None = None, allowed_files: tuple[str, ...] = (),
          all_projects: bool = False, http: HttpOptions | None = None, client: Writer = "agent") -> None:
    """Run the server over stdio, or over streamable HTTP when `http` is given; logs go to
    stderr so stdout stays the protocol channel.  `HttpSetupError` when the HTTP options
    cannot be served (nothing listens then).  `client="person"` (stdio only: the headless
    runner's own server) lets its client do what the person at the CLI may."""
    from aromcp_workflows.shell import commands_root

    commands_root()  # `CommandsDirError` before anything starts: a directory others can write is refused
    level = os.environ.get("AROMCP_LOG_LEVEL", "WARNING").upper()
    install_log_masking()  # every record masked and capped, whichever library logs it
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    observer = start_tracing()  # None unless OTEL_* variables ask for traces (docs/observability.md)
    factory = default_service_factory(project_dir, store, observer, all_projects)
    try:
        if http is None:
            server = build_server(factory, log_level=level, allowed_files=allowed_files, observer=observer,
                                  client=client)
            _stop_commands_on_signals(observer)
            _adopt_orphans(server, store)
            server.run()
        else:
            _serve_http(factory, level, allowed_files, http, store, observer)
    finally:
        if observer is not None:
            observer.shutdown()


def _serve_http(factory: Callable[[], WorkflowService], level: str, allowed_files: tuple[str, ...],
                options: HttpOptions, store: str | None, observer: Observer | None = None) -> None:
    """Bind first (a port in use changes nothing, not even a token file), then decide how
    clients are checked, adopt the commands a dead server left (`_adopt_orphans`),
    and only then listen: until it can answer, a replica refuses connections, so neither a
    client nor a load balancer's check takes it for started while its claims are not made."""
    from dataclasses import replace

    import anyio

    from aromcp_workflows.http import BACKLOG, remove_quietly
    from aromcp_workflows.server.http_auth import BearerAdmission, resolve_auth
    from aromcp_workflows.server.http_guard import HttpLimits, bind, host_rule, mcp_app, serve_http

    limits, rule = HttpLimits.from_env(), host_rule(options)
    sock = bind(options)
    login: list[Path] = []
    try:
        options = replace(options, port=sock.getsockname()[1])  # port 0: the one picked
        auth = resolve_auth(options)
        server = build_server(factory, log_level=level, allowed_files=allowed_files, observer=observer, auth=auth)
        app, bearer = mcp_app(server, limits), BearerAdmission(auth)
        admissions: list[tuple[str, Admission]] = [*_mount_ui(server, app, options, bearer, login), ("", bearer)]
        notices = [f"serving MCP (streamable HTTP) at {options.url}", auth.notice, *_ui_notices(options, login)]
        _stop_commands_on_signals(observer, login)
        _adopt_orphans(server, store)
        sock.listen(BACKLOG)  # only now can a client (or a load balancer's check) connect
        print("\n".join(f"aromcp-workflows: {line}" for line in notices), file=sys.stderr, flush=True)
        anyio.run(serve_http, app, options, limits, rule, sock, level, admissions)
    finally:
        sock.close()
        for path in login:
            remove_quietly(path)


def _mount_ui(server: MCPServer, app: Any, options: HttpOptions, bearer: BearerAdmission,
              login: list[Path]) -> list[tuple[str, Admission]]:
    """`--ui`: the web view at /ui of the same app, over the tools' own service, behind the
    same Host/Origin rule as /mcp; its credential is the MCP bearer token or a session from a
    one-time login URL, which goes to a private file (`login` gets its path), never the log.
    The admission of its paths."""
    if not options.ui:
        return []
    from aromcp_workflows.http import LimitError
    from aromcp_workflows.server.http_auth import HttpSetupError, safe_host
    from aromcp_workflows.web import StreamQuota, login_file, mount_ui, to_file, url_of

    service = getattr(server, "service", None)
    assert service is not None, "build_server gives the server its service"
    try:
        streams = StreamQuota.from_env()
    except LimitError as exc:
        raise HttpSetupError(str(exc)) from None
    login.append(login_file(f"{safe_host(options.host)}-{options.port}-ui.login"))
    checks = bearer.check if bearer.backend is not None else None
    view = mount_ui(app, service, url_of(options.host, options.port, ""), checks, to_file(login[0]),
                    options.ui_actions, streams, options.port)
    view.auth.start()
    return [("/ui", view.auth.admit)]


def _ui_notices(options: HttpOptions, login: list[Path]) -> list[str]:
    if not options.ui:
        return []
    from aromcp_workflows.web import ACTIONS_ON, url_of

    mode = ACTIONS_ON if options.ui_actions else "read-only"
    return [f"web view ({mode}) at {url_of(options.host, options.port, '/ui/')}: log in with the one-time login URL "
            f"in {login[0]} (readable by you only; a new one is written there after each use), or with the bearer "
            "token"]


def _adopt_orphans(server: MCPServer, store: str | None) -> None:
    """When a server of this machine died leaving commands of this store running (or ended,
    unrecorded), adopt them now: the service (store, V8) is built only if there are any, so a
    normal start stays as fast as ever.  Their claims are made before the server answers
    anything (for at most `CLAIM_BEFORE_SERVING_S`: a store that does not answer must not keep
    the server from starting), since until then a replica elsewhere may see a lease run out
    and run a command again; waiting for the commands goes on in the background."""
    from aromcp_workflows.shell import orphans

    service = getattr(server, "service", None)
    if service is None or not orphans():  # the common start: none (those of a deleted store are removed)
        return

    def adopt() -> None:
        try:
            from aromcp_workflows.store import store_location

            mine = orphans(store=store_location(store))
            if not mine:
                return  # another store's: its own server adopts them
            found = service().adopt_orphans(mine)
            log.info("adopting %d command(s) left by a server that died", found)
        except Exception:
            log.warning("could not adopt the commands left by a server that died", exc_info=True)

    claiming = threading.Thread(target=adopt, name="aromcp-orphans", daemon=True)
    claiming.start()
    claiming.join(CLAIM_BEFORE_SERVING_S)
    if claiming.is_alive():
        log.warning("still adopting the commands left by a server that died after %d s; serving meanwhile",
                    CLAIM_BEFORE_SERVING_S)


def _stop_commands_on_signals(observer: Observer | None = None, credentials: Sequence[Path] = ()) -> None:
    """SIGTERM (a client closing us, `run` being stopped) or SIGINT: stop the shell commands
    this server started (each runs in its own process group, out of reach of a signal to
    ours) and leave at once.  No half-run command's result is stored; the instance keeps
    its step as started, and resuming runs it again.  Spans not yet exported get
    `SHUTDOWN_FLUSH_S` to leave; the files of `credentials` (a login URL) go."""
    import signal

    def stop(signum: int, _frame: Any) -> None:
        from aromcp_workflows.http import remove_quietly
        from aromcp_workflows.shell import stop_all_commands

        for path in credentials:
            remove_quietly(path)
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
