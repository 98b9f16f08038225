"""Starting the web view: on its own (`aromcp-workflows ui`) or beside MCP (`serve --http --ui`).

Either way it needs a credential for every read (`web/auth.py`) and hands out its one-time
login URLs without printing them into a log (`web/login.py`).  Alone, bound beyond loopback,
it does not start without `--auth-token-file`, as `serve --http` does not without a token.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aromcp_workflows.http import (
    MAKE_TOKEN,
    ConnectionLimits,
    HostEntryError,
    HostRule,
    LimitError,
    TokenFileError,
    credentials_dir,
    guarded,
    is_loopback,
    listening_socket,
    read_token_file,
    remove_quietly,
    uvicorn_config,
)
from aromcp_workflows.web.app import WebView
from aromcp_workflows.web.auth import BearerCheck, WebAuth, static_bearer
from aromcp_workflows.web.login import open_browser, to_file, to_terminal
from aromcp_workflows.web.streams import StreamQuota

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from aromcp_workflows.app import WorkflowService

UI_PATH = "/ui"
ACTIONS_ON = "cancel, retry, fork and answers on"  # what the banners say of a page with actions


class PortError(Exception):
    """The address cannot be listened on (the text says which and what to do)."""


@dataclass(frozen=True)
class UiOptions:
    """What `aromcp-workflows ui` was asked for (the CLI flags, as data)."""

    host: str = "127.0.0.1"
    port: int = 8780
    actions: bool = False
    open_browser: bool = False
    allowed_hosts: Sequence[str] = ()
    token_file: str | None = None
    store: str | None = None  # said after the URL when it is not the default store


def listen(host: str, port: int) -> socket.socket:
    """The server's listening socket (`listening_socket`: one IPv6 behaviour for `serve
    --http` and `ui`), or a `PortError` that says why not and what to change."""
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise PortError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port "
                        "(0 picks a free one) or --host") from None


def url_of(host: str, port: int, path: str) -> str:
    """The address to open (0.0.0.0 and :: name no host: 127.0.0.1 reaches them)."""
    bare = host.strip("[]")
    shown = "127.0.0.1" if bare in ("0.0.0.0", "::") else (f"[{bare}]" if ":" in bare else bare)
    return f"http://{shown}:{port}{path}"


def login_file(name: str) -> Path:
    """Where a server keeps its current login URL (or its browser redirect): the user data
    directory's private `http/` folder."""
    return credentials_dir() / name


def run_ui(service: Callable[[], WorkflowService], options: UiOptions) -> int:
    """`aromcp-workflows ui`: serve the web view behind the Host/Origin rule and the
    credential, say how to log in, until Ctrl-C."""
    try:
        bearer = _ui_bearer(options)
        rule = HostRule.for_bind(options.host, options.allowed_hosts)
        limits, streams = ConnectionLimits.from_env(), StreamQuota.from_env()
        sock = listen(options.host, options.port)
    except (HostEntryError, PortError, TokenFileError, LimitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    name = f"ui-{options.host.strip('[]').replace(':', '_')}-{port}"
    kept = login_file(f"{name}.login")
    on_terminal = sys.stdout.isatty()
    auth = WebAuth(url_of(options.host, port, ""), "", to_terminal() if on_terminal else to_file(kept), bearer, port)
    view = WebView(service, auth, actions=options.actions, streams=streams)
    mode = ACTIONS_ON if options.actions else "read-only"
    print(f"aromcp-workflows web view ({mode}) at {url_of(options.host, port, '/')}", flush=True)
    if options.store is not None:  # not the default store, which Claude Code's plugin shares
        print(f"store: {options.store}", flush=True)
    try:
        first = auth.start()
        if not on_terminal:
            print(f"aromcp-workflows web view: the one-time login URL is in {kept} (readable by you only; a new "
                  "one is written there after each use)", flush=True)
        if options.open_browser:
            open_browser(first, login_file(f"{name}.open.html"))
        serve_app(guarded(view.app(), rule, [("", auth.admit)], limits), sock, limits)
    finally:
        remove_quietly(kept)
        remove_quietly(login_file(f"{name}.open.html"))
    return 0


def _ui_bearer(options: UiOptions) -> BearerCheck | None:
    """The token `--auth-token-file` gives (the page takes it too); beyond loopback, required."""
    if options.token_file:
        return static_bearer(read_token_file(Path(options.token_file)))
    if not is_loopback(options.host):
        raise TokenFileError(f"ui on {options.host} can be reached from other machines, so it needs a token: give "
                             f"one with --auth-token-file FILE (make one with {MAKE_TOKEN}), or bind to 127.0.0.1")
    return None


def serve_app(app: Any, sock: socket.socket, limits: ConnectionLimits, log_level: str = "warning") -> None:
    """Run `app` on `sock` until Ctrl-C; open streams end within a second."""
    import uvicorn

    uvicorn.Server(uvicorn_config(app, limits, log_level, lifespan="on")).run(sockets=[sock])


def mount_ui(app: Starlette, service: Callable[[], WorkflowService], base: str, bearer: BearerCheck | None,
             announce: Callable[[str], None], actions: bool = False, streams: StreamQuota | None = None,
             port: int = 0) -> WebView:
    """`serve --http --ui`: the web view at /ui of the MCP server's own app; whoever serves
    it asks `view.auth.admit` about every /ui request before reading it."""
    from starlette.routing import Mount

    auth = WebAuth(base + UI_PATH, UI_PATH, announce, bearer, port)
    view = WebView(service, auth, actions=actions, streams=streams)
    app.router.routes.insert(0, Mount(UI_PATH, app=view.app()))
    return view
