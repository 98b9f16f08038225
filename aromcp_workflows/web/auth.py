"""Who may use the web view: a session opened by a one-time login URL, or the bearer token.

Every API read, every event stream and every action needs a credential; the page's own
files (its HTML, CSS and JavaScript, which hold no data) and the login do not, so a
browser without one is shown how to log in.  Checked from the headers, before any body is
read (`WebAuth.admit` is the admission `http.gate` asks for the web view's paths):

- **a session**: the cookie set when a one-time login URL (`<base>/login?code=…`) is
  opened; `HttpOnly` (no script reads it) and `SameSite=Strict` (no other site's page
  sends it).  A login code works once; using it makes the next one, which the server hands
  to its user the way it handed the first (`announce`: its terminal, or a file only that
  user can read), so a second browser can log in too.  Sessions live in memory: they end
  with the server, after `SESSION_IDLE_S` unused, or when more than `MAX_SESSIONS` are open
  (the oldest first);
- **a bearer token** in `Authorization: Bearer …`: under `serve --http` the MCP server's
  own (its verifier decides), for `ui` the one of `--auth-token-file`.  The page can also
  trade it for a session (`POST <base>/api/login` with the header).

One login serves reads and actions alike.  Actions (when switched on) from a session also
carry the session's anti-forgery token (`X-Aromcp-Token`, handed to the page by
`/api/config`) from the page's own Origin; a bearer token, which no browser sends by
itself, needs neither.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.types import Scope

from aromcp_workflows.http import CREDENTIAL, Admitted, NotAdmitted, bearer_of, client_key, same_secret
from aromcp_workflows.safety import KNOWN_SECRETS

SESSION_IDLE_S = 12 * 3600.0
MAX_SESSIONS = 64
PUBLIC_PREFIXES = ("/static/", "/instances/")
PUBLIC_PATHS = frozenset({"/", "/login"})
LOGIN_API = "/api/login"
LOG_IN = ("log in first: open the one-time login URL this server gave you (`ui` prints it on its terminal or "
          "names the file that holds it; `serve --http --ui` names that file in its log){bearer}")
BearerCheck = Callable[[Scope], Awaitable[Admitted | NotAdmitted | None]]


@dataclass
class Session:
    """One logged-in browser: its key for quotas (a hash of the cookie, never the cookie),
    its anti-forgery token for actions, and when it was last used."""

    key: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    last_seen: float = field(default_factory=time.monotonic)


def static_bearer(token: str) -> BearerCheck:
    """`ui --auth-token-file`: one shared token, compared in constant time (and masked in
    every log line from then on, wherever a client put it)."""
    KNOWN_SECRETS.add([token])

    async def check(scope: Scope) -> Admitted | None:
        given = HTTPConnection(scope).headers.get("authorization", "")
        presented = bearer_of(given)
        if presented is None or not same_secret(presented, token):
            return None
        return Admitted(client_key(scope, given), "bearer")

    return check


class WebAuth:
    """The web view's credentials: one-time login codes, sessions, and the bearer check.
    `base`: the view's URL (`http://host:port/ui`); `root`: its path (`/ui`, or "" alone);
    `announce`: hands each new login URL to the server's user."""

    def __init__(self, base: str, root: str, announce: Callable[[str], None], bearer: BearerCheck | None = None,
                 port: int = 0):
        self.base = base.rstrip("/")
        self.root = root.rstrip("/")
        self.announce = announce
        self.bearer = bearer
        self.cookie = f"aromcp_ui_{port}"  # cookies ignore the port: each server its own name
        self.sessions: OrderedDict[str, Session] = OrderedDict()  # keyed by the cookie's hash
        self._code = ""

    # -- login codes ---------------------------------------------------------------------------
    def start(self) -> str:
        """Make the first login URL and hand it over; the URL (for `--open`)."""
        self._code = secrets.token_urlsafe(24)
        KNOWN_SECRETS.add([self._code])  # masked in the log, should a client put it in another URL
        url = self.login_url()
        self.announce(url)
        return url

    def login_url(self) -> str:
        return f"{self.base}/login?code={self._code}"

    def redeem(self, code: str) -> str | None:
        """A new session's cookie value for the current code (which is then used up, and the
        next one handed over); None for any other."""
        if not self._code or not code or not same_secret(code, self._code):
            return None
        self.start()
        return self.open_session()

    # -- sessions ------------------------------------------------------------------------------
    def open_session(self) -> str:
        value = secrets.token_urlsafe(32)
        KNOWN_SECRETS.add([value])
        digest = _digest(value)
        self.sessions[digest] = Session(digest[:16])
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        return value

    def close_session(self, value: str) -> None:
        self.sessions.pop(_digest(value), None)

    def holds(self, session: Session) -> bool:
        """Whether `session` is still open: not logged out, not pushed out by newer ones, not
        idle too long (an open event stream asks, so that it ends with its session)."""
        return (time.monotonic() - session.last_seen <= SESSION_IDLE_S
                and any(open_ is session for open_ in self.sessions.values()))

    def session(self, headers: Headers) -> Session | None:
        value = _cookie(headers.get("cookie", ""), self.cookie)
        found = self.sessions.get(_digest(value)) if value else None
        now = time.monotonic()
        if found is None or now - found.last_seen > SESSION_IDLE_S:
            return None
        found.last_seen = now
        return found

    def set_cookie(self, value: str) -> str:
        return f"{self.cookie}={value}; Path={self.root or '/'}; HttpOnly; SameSite=Strict"

    def clear_cookie(self) -> str:
        return f"{self.cookie}=; Path={self.root or '/'}; HttpOnly; SameSite=Strict; Max-Age=0"

    # -- the admission -------------------------------------------------------------------------
    async def admit(self, scope: Scope) -> Admitted | NotAdmitted:
        """A bearer token or a session, else an open path, else 401 (the gate answers it)."""
        headers = Headers(scope=scope)
        if "authorization" in headers:
            checked = await self.bearer(scope) if self.bearer is not None else None
            return checked or self.refusal("the bearer token is missing or wrong")
        session = self.session(headers)
        if session is not None:
            return Admitted(f"session:{session.key}", "session", session)
        path = scope.get("path", "")[len(self.root):] or "/"
        if _open(scope.get("method", ""), path):
            return Admitted()
        return self.refusal()

    def refusal(self, why: str = "") -> NotAdmitted:
        import json

        bearer = "; or send the server's bearer token as `Authorization: Bearer <token>`" if self.bearer else ""
        text = (f"{why}: " if why else "") + LOG_IN.format(bearer=bearer)
        body = {"error": text, "token_login": self.bearer is not None}  # whether the page offers a token form
        return NotAdmitted(401, json.dumps(body).encode(), b"application/json")


TOKEN_HEADER = "x-aromcp-token"  # the session's anti-forgery token, sent back by the page


def not_the_pages(request: HTTPConnection, session: Session) -> str | None:
    """Why a POST that carries a session's cookie may not come from this view's own page, or
    None when it does: a page of another site, or of another port of this host (the same
    *site*, so the browser sends a `SameSite=Strict` cookie to it), can make a browser send
    the cookie, but not the anti-forgery token the page got from `/api/config`, nor this
    view's own Origin."""
    token = request.headers.get(TOKEN_HEADER, "")
    if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
        return ("the page's anti-forgery token is missing or wrong: reload the page (it gets a new one from "
                "/api/config)")
    origin, host = request.headers.get("origin"), request.headers.get("host", "")
    if origin is None or origin.rstrip("/") != f"{request.url.scheme}://{host}":
        return "the request does not come from this web view's own page (Origin does not match)"
    return None


def credential(request: HTTPConnection) -> Admitted:
    """What the gate in front decided about this request (`http.gate`)."""
    found = request.scope.get(CREDENTIAL)
    return found if isinstance(found, Admitted) else Admitted()


def _open(method: str, path: str) -> bool:
    """The page's own files and the login: no data, so no credential (GET only, but the login API)."""
    if method == "POST":
        return path == LOGIN_API
    return method in ("GET", "HEAD") and (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES))


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


def _cookie(header: str, name: str) -> str:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""
