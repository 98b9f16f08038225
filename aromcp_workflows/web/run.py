"""Starting the web view: on its own (`aromcp-workflows ui`) or beside MCP (`serve --http --ui`)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aromcp_workflows.http import HostEntryError, HostGuard, HostRule, listening_socket
from aromcp_workflows.web.app import WebView

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from aromcp_workflows.app import WorkflowService

UI_PATH = "/ui"


class PortError(Exception):
    """The address cannot be listened on (the text says which and what to do)."""


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket (`listening_socket`: one IPv6 behaviour for `serve
    --http` and `ui`), or a `PortError` that says why not and what to change."""
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise PortError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port "
                        "(0 picks a free one) or --host") from None


def url_of(host: str, port: int, path: str, view: WebView) -> str:
    """The address to open; with actions on it carries the launch token, as Jupyter's does."""
    bare = host.strip("[]")
    shown = "127.0.0.1" if bare in ("0.0.0.0", "::") else (f"[{bare}]" if ":" in bare else bare)
    token = f"?token={view.token}" if view.actions else ""
    return f"http://{shown}:{port}{path}{token}"


def serve_app(app: Any, sock: socket.socket, log_level: str = "warning") -> None:
    """Run `app` on `sock` until Ctrl-C; open streams end within a second."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level.lower(), timeout_graceful_shutdown=1, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


def run_ui(service: Callable[[], WorkflowService], host: str, port: int, actions: bool, open_browser: bool,
           allowed_hosts: Sequence[str] = (), store: str | None = None) -> int:
    """`aromcp-workflows ui`: serve the web view behind the Host/Origin guard `serve --http`
    uses, and print its URL (stdout), then the store when one was named, until Ctrl-C."""
    view = WebView(service, actions=actions)
    try:
        rule = HostRule.for_bind(host, allowed_hosts)
        sock = listen(host, port)
    except (HostEntryError, PortError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    url = url_of(host, sock.getsockname()[1], "/", view)
    mode = "cancel, retry and fork on (anyone with this URL can use them)" if actions else "read-only"
    print(f"aromcp-workflows web view ({mode}): {url}", flush=True)
    if store is not None:  # not the default store, which Claude Code's plugin shares
        print(f"store: {store}", flush=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    serve_app(HostGuard(view.app(), rule), sock)
    return 0


def mount_ui(app: Starlette, service: Callable[[], WorkflowService], actions: bool = False) -> WebView:
    """`serve --http --ui`: the web view at /ui of the MCP server's own app (its own token
    for actions); `serve_http`'s Host/Origin guard stands in front of both."""
    from starlette.routing import Mount

    view = WebView(service, actions=actions)
    app.router.routes.insert(0, Mount(UI_PATH, app=view.app()))
    return view
