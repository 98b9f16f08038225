"""Logging in to the web view, and how a login URL reaches its user without reaching a log.

A login URL works once (`web/auth.py`); each new one is handed over the way the server
was started:

- `ui` on a terminal prints it there (`to_terminal`): only the person at that terminal
  sees it;
- otherwise (`ui` with its output going to a file or a service manager's log, and `serve
  --http --ui`, whose stderr is a log) it is written to a file only its user can read
  (`to_file`), and the log names the file, never the URL;
- `--open` gives the browser a 0600 HTML file that redirects to the URL (`open_browser`),
  as Jupyter does: a browser's command line is visible to every local user (`ps`).
"""

from __future__ import annotations

import html
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from aromcp_workflows.http import write_private
from aromcp_workflows.web.auth import WebAuth, credential, not_the_pages

NO_STORE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def login_routes(auth: WebAuth) -> list[Route]:
    """`GET /login?code=…` (a login URL), `POST /api/login` (the bearer token traded for a
    session: the page's form), `POST /api/logout`."""

    async def login(request: Request) -> Response:
        value = auth.redeem(request.query_params.get("code", ""))
        if value is None:
            return PlainTextResponse("this login link was already used, or is not this server's: open the newest "
                                     "login URL the server gave you (each works once)", 401, headers=NO_STORE)
        return RedirectResponse(f"{auth.root}/", 303, headers={**NO_STORE, "Set-Cookie": auth.set_cookie(value)})

    async def api_login(request: Request) -> Response:
        if credential(request).via != "bearer":
            return auth_refused(auth)
        return JSONResponse({"ok": True}, headers={**NO_STORE, "Set-Cookie": auth.set_cookie(auth.open_session())})

    async def api_logout(request: Request) -> Response:
        session = credential(request).session
        why = None if session is None else not_the_pages(request, session)
        if why is not None:  # a page elsewhere may not end the person's session either
            return JSONResponse({"error": why}, status_code=403, headers=NO_STORE)
        value = request.cookies.get(auth.cookie)
        if value:
            auth.close_session(value)
        return JSONResponse({"ok": True}, headers={**NO_STORE, "Set-Cookie": auth.clear_cookie()})

    return [Route("/login", login), Route("/api/login", api_login, methods=["POST"]),
            Route("/api/logout", api_logout, methods=["POST"])]


def auth_refused(auth: WebAuth) -> Response:
    refused = auth.refusal()
    return Response(refused.body, refused.status, media_type=refused.content_type.decode())


def to_terminal(stream: TextIO = sys.stdout) -> Callable[[str], None]:
    def show(url: str) -> None:
        print(f"aromcp-workflows web view: log in at {url} (works once; a new login URL is printed here "
              "after each use)", file=stream, flush=True)

    return show


def to_file(path: Path) -> Callable[[str], None]:
    def keep(url: str) -> None:
        write_private(path, url + "\n")

    return keep


def open_browser(url: str, path: Path) -> Path:
    """Open the browser on a private HTML file that redirects to `url` (never `url` in argv)."""
    import webbrowser

    quoted = html.escape(url, quote=True)
    write_private(path, f'<!doctype html>\n<meta charset="utf-8">\n<meta name="referrer" content="no-referrer">\n'
                        f'<meta http-equiv="refresh" content="0;url={quoted}">\n'
                        f'<title>aromcp-workflows</title>\n<p><a href="{quoted}">Open the web view</a></p>\n')
    webbrowser.open(path.as_uri())
    return path
