"""The web view: a local page over the instance store (`aromcp-workflows ui`, `serve --http --ui`).

A Starlette app, thin over `WorkflowService`: every route calls one typed service method
and returns its result as JSON, masked at the edge exactly as MCP replies are (the
instance's masker, then `safety.redaction.redact` for error texts).  The page itself is
static HTML, CSS and JavaScript shipped in `web/static/`: nothing is built at install and
nothing is fetched from the network when it runs.

Whoever serves it puts in front the Host/Origin rule (`http/hosts.py`: a Host or Origin
of another host is refused, against DNS rebinding) and the credential, checked from the
headers (`web/auth.py`: a session from a one-time login URL, or the bearer token), so
every read and every event stream needs a credential; the page's own files hold no data
and need none.  Changing anything — cancel, retry, fork — also needs `actions` on
(`--actions`, `--ui-actions`), and from a session the session's anti-forgery token (sent
back by the page in the `X-Aromcp-Token` header) and an `Origin` that is this very
server: otherwise 403, and nothing changes.  Event streams are capped (`web/streams.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.safety import Masker, redact
from aromcp_workflows.web.auth import WebAuth, credential, not_the_pages
from aromcp_workflows.web.login import login_routes
from aromcp_workflows.web.streams import CountedStream, StreamQuota

if TYPE_CHECKING:
    from aromcp_workflows.app import WorkflowService

STATIC = Path(__file__).with_name("static")
POLL_S = 0.4  # how often an open instance page's stream asks the store for the version
STREAM_S = 300.0  # a stream ends after this long; the browser reconnects by itself
HTTP_STATUS: dict[ErrorKind, int] = {  # a refusal's kind, as the status a browser understands
    "invalid": 400, "not_found": 404, "conflict": 409, "refused": 403,
    "not_saved": 503, "busy": 503, "unavailable": 503,
}
RouteHandler = Callable[[Request], Awaitable[Response]]


class WebView:
    """The routes, over one service (built on first use by `service`)."""

    def __init__(self, service: Callable[[], WorkflowService], auth: WebAuth, actions: bool = False,
                 streams: StreamQuota | None = None):
        self._service = service
        self.auth = auth
        self.actions = actions
        self.streams = streams or StreamQuota.from_env()

    @property
    def service(self) -> WorkflowService:
        return self._service()

    # -- pages -----------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        """The one page (instances list and instance view are drawn by app.js from the URL)."""
        base = request.scope.get("root_path", "").rstrip("/") + "/"
        html = (STATIC / "index.html").read_text(encoding="utf-8").replace("__BASE__", base)
        return HTMLResponse(html, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                                           "Content-Security-Policy": CSP})

    async def config(self, request: Request) -> Response:
        """What the page may offer, (to a session) the anti-forgery token its actions send, and
        `stale_after`: the seconds an agent may stay silent before its run is stalled (the
        server's `AROMCP_STALE_AFTER`), so an open page marks it when that time passes."""
        from aromcp_workflows.app import stale_after

        session = credential(request).session
        return JSONResponse({"actions": self.actions, "csrf": session.csrf if session is not None else "",
                             "stale_after": stale_after()},
                            headers={"Cache-Control": "no-store"})

    # -- reads -----------------------------------------------------------------------------
    async def instances(self, request: Request) -> Response:
        query = request.query_params
        statuses = [s for s in query.getlist("status") if s] or None
        page = _int(query.get("page"), 1)
        per_page = _int(query.get("per_page"), 50)
        found = await _call(lambda: self.service.instance_page(statuses, query.get("workflow") or None,
                                                               query.get("project") or None, page, per_page))
        return _json(found, Masker())  # as the reply guard masks a list that names no instance

    async def instance(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        return await self._reply(workflow_id, lambda: self.service.instance_view(workflow_id))

    async def state(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        seq = request.query_params.get("seq")
        at = None if seq in (None, "") else _int(seq, 0)
        return await self._reply(workflow_id, lambda: self.service.state_at(workflow_id, at))

    async def traces(self, request: Request) -> Response:
        workflow_id = request.path_params["workflow_id"]
        return await self._reply(workflow_id, lambda: self.service.trace_transformations(workflow_id, None, True))

    async def output(self, request: Request) -> Response:
        """A command's output as it comes: from byte `stdout_since`/`stderr_since` on (poll
        again from each slice's `end`), or its last bytes; of the running command, or the
        step's last run (`WorkflowService.command_output`)."""
        workflow_id, query = request.path_params["workflow_id"], request.query_params
        since = [None if query.get(k) in (None, "") else max(0, _int(query.get(k), 0))
                 for k in ("stdout_since", "stderr_since")]
        return await self._reply(workflow_id, lambda: self.service.command_output(
            workflow_id, query.get("step_id") or None, query.get("task_id") or None, since[0], since[1],
            _int(query.get("limit"), 16 * 1024)))

    async def _reply(self, workflow_id: str, call: Callable[[], Any]) -> Response:
        """What a service call (a read, an answer, an action) gave, masked as the instance's
        replies are; a refusal, in words (`_refusal`)."""
        try:
            result = await _call(call)
        except Exception as exc:
            return await self._refusal(workflow_id, exc)
        return _json(result, await _call(lambda: self.service.masker(workflow_id, latest=False)))

    async def _refusal(self, workflow_id: str | None, exc: Exception) -> Response:
        """A service refusal as `{error}` with the status a browser understands, masked."""
        if not isinstance(exc, KindedError):
            raise exc
        masker = None
        if workflow_id is not None:
            try:
                masker = await _call(lambda: self.service.masker(workflow_id, latest=False))
            except Exception:
                masker = None
        text = redact(str(exc), masker)
        return JSONResponse({"error": text, "kind": exc.kind}, status_code=HTTP_STATUS[exc.kind])

    async def events(self, request: Request) -> Response:
        """Server-sent events: `version` each time the instance's committed version changes
        (in this process or any other that shares the store), so the page reloads its data."""
        workflow_id = request.path_params["workflow_id"]
        try:
            first = await _call(lambda: self.service.instance_version(workflow_id))
        except Exception as exc:
            return await self._refusal(workflow_id, exc)
        client = credential(request).principal or "?"
        refused = self.streams.take(client)
        if refused is not None:
            return JSONResponse({"error": refused[1]}, status_code=refused[0])

        session = credential(request).session  # a stream with a cookie ends with its session

        async def stream() -> Any:
            seen, loop = first, asyncio.get_running_loop()
            ends = loop.time() + STREAM_S
            yield f"retry: 1000\nevent: version\ndata: {seen}\n\n"
            while loop.time() < ends and not await request.is_disconnected():
                await asyncio.sleep(POLL_S)
                if session is not None and not self.auth.holds(session):
                    return
                try:
                    now = await _call(lambda: self.service.instance_version(workflow_id))
                except Exception:
                    return
                if now != seen:
                    seen = now
                    yield f"event: version\ndata: {now}\n\n"

        return CountedStream(stream(), self.streams, client, media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # -- actions ---------------------------------------------------------------------------
    def refused(self, request: Request) -> str | None:
        """Why this POST may not change anything, or None when it may."""
        if not self.actions:
            return ("actions are off: this web view is read-only (start it with --actions, or serve --http with "
                    "--ui-actions, to cancel, retry, fork or answer questions)")
        admitted = credential(request)
        if admitted.via == "bearer":
            return None  # a token no browser sends by itself: no request forged by a page carries it
        if admitted.session is None:
            return "log in first"
        return not_the_pages(request, admitted.session)

    async def answer(self, request: Request) -> Response:
        """The person answers the question the instance waits on: `{value, step_id?}`, checked
        as the form and `aromcp-workflows answer` check it (a wrong value changes nothing)."""
        workflow_id = request.path_params["workflow_id"]
        reason = self.refused(request)
        if reason is not None:
            return JSONResponse({"error": reason}, status_code=403)
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("value"), str):
            return JSONResponse({"error": "send {\"value\": \"the answer\", \"step_id\": optional}"},
                                status_code=400)
        step_id = body.get("step_id") if isinstance(body.get("step_id"), str) else None
        return await self._reply(workflow_id, lambda: self.service.answer(workflow_id, body["value"], step_id))

    async def action(self, request: Request) -> Response:
        workflow_id, name = request.path_params["workflow_id"], request.path_params["action"]
        reason = self.refused(request)
        if reason is not None:
            return JSONResponse({"error": reason}, status_code=403)
        perform = ACTIONS.get(name)
        if perform is None:
            return JSONResponse({"error": f"unknown action {name!r}: use cancel, retry or fork"}, status_code=404)
        return await self._reply(workflow_id, lambda: perform(self.service, workflow_id))

    # -- the app ---------------------------------------------------------------------------
    def app(self) -> Starlette:
        """The routes as an app; whoever serves it puts `HostGuard` in front (`web/run.py`)."""
        routes = [
            Route("/", self.page),
            Route("/instances/{workflow_id}", self.page),
            Route("/api/config", self.config),
            Route("/api/instances", self.instances),
            Route("/api/instances/{workflow_id}", self.instance),
            Route("/api/instances/{workflow_id}/state", self.state),
            Route("/api/instances/{workflow_id}/traces", self.traces),
            Route("/api/instances/{workflow_id}/events", self.events),
            Route("/api/instances/{workflow_id}/output", self.output),
            Route("/api/instances/{workflow_id}/answer", self.answer, methods=["POST"]),
            Route("/api/instances/{workflow_id}/{action}", self.action, methods=["POST"]),
            *login_routes(self.auth),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
        return Starlette(routes=routes)


def _cancel(service: WorkflowService, workflow_id: str) -> Any:
    return service.complete(workflow_id, "cancelled", refuse_ended=True)  # "done" only if it is cancelled


def _retry(service: WorkflowService, workflow_id: str) -> Any:
    return service.retry(workflow_id)


def _fork(service: WorkflowService, workflow_id: str) -> Any:
    return service.fork(workflow_id, by="person")  # the person at the page, not the agent


# What each POST does: one typed service method (the same ones `cancel`, `retry` and `fork`
# of the command line and the MCP tools call).
ACTIONS: dict[str, Callable[[WorkflowService, str], Any]] = {"cancel": _cancel, "retry": _retry, "fork": _fork}

# The page's own files only: no inline script, no other origin, no framing.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'self'; form-action 'none'")


async def _call(action: Callable[[], Any]) -> Any:
    """A service call in a worker thread: it reads the store and may wait on a lock."""
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(action)


def _json(result: Any, masker: Any) -> Response:
    data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
    if masker is not None:
        data = {key: masker.mask(value, key) for key, value in data.items()}
    return JSONResponse(data, headers={"Cache-Control": "no-store"})


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
