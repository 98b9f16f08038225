"""Who may call the HTTP server: a bearer token by default, or an identity provider's verifier.

Over HTTP any process that can reach the port is a client, and a client can run commands
(`ci:retry-tests` runs its `command` input), so every request must carry a token the
SDK's bearer middleware checks (`MCPServer(token_verifier=..., auth=...)`: 401 with
`WWW-Authenticate` before anything runs).  Where the token comes from, first match wins:

1. `--token-verifier MODULE:NAME`: the operator's own verifier (an identity provider's
   tokens); the server publishes where to get one (`--auth-issuer-url`) as OAuth
   protected-resource metadata and accepts only tokens issued for its URL;
2. `--auth-token-file FILE`, then `AROMCP_HTTP_TOKEN`: one shared secret;
3. on loopback only, a token the server makes at start and keeps in a file only its user
   can read (the path is printed, never the token);
4. bound beyond loopback with none of these: the server does not start.

`--no-auth` turns authentication off, on loopback only.  Tokens are compared in constant
time (`hmac.compare_digest`).

The check runs first, from the headers (`BearerAdmission`, the admission of `http.gate`),
before the body is read, a stream opened or a session made; the SDK's own bearer middleware
behind it asks the same verifier about the same token and gets the answer already given
(`CheckedOnce`), so an identity provider is asked once per request.
"""

from __future__ import annotations

import hmac
import importlib
import json
import os
import secrets
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from starlette.requests import HTTPConnection
from starlette.types import Scope

from aromcp_workflows.http import (
    MAKE_TOKEN,
    Admitted,
    NotAdmitted,
    TokenFileError,
    client_key,
    credentials_dir,
    is_loopback,
    write_private,
)
from aromcp_workflows.http import checked_token as token_checked
from aromcp_workflows.http import read_token_file as token_in_file
from aromcp_workflows.safety import KNOWN_SECRETS

TOKEN_ENV = "AROMCP_HTTP_TOKEN"
STATIC_CLIENT_ID = "aromcp-http-token"  # the one principal a shared token stands for


class HttpSetupError(Exception):
    """The HTTP options cannot be served as given; the text says what to change.  The exit
    status is 2 (a usage error) unless the cause lies elsewhere (a port in use: 1)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class HttpOptions:
    """What `serve --http` was asked for (the CLI flags, as data)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token_file: str | None = None
    no_auth: bool = False
    allowed_hosts: tuple[str, ...] = ()
    token_verifier: str | None = None  # MODULE:NAME
    issuer_url: str | None = None
    resource_url: str | None = None
    scopes: tuple[str, ...] = ()
    ui: bool = False  # the web view at /ui (docs/ui.md)
    ui_actions: bool = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"


@dataclass(frozen=True)
class HttpAuth:
    """How the server checks its clients: the SDK's verifier and settings (both None with
    `--no-auth`), and the line to print at start (where the token is; never the token)."""

    verifier: TokenVerifier | None
    settings: AuthSettings | None
    notice: str


_answered: ContextVar[tuple[str, AccessToken | None] | None] = ContextVar("aromcp_token_answer", default=None)


class CheckedOnce:
    """A verifier asked at most once per request: the gate asks it first; the SDK's bearer
    middleware, asking again about the same token within the same request (the same
    context), gets that answer.  Each request runs in a task of its own, so no answer
    outlives its request."""

    def __init__(self, verifier: TokenVerifier):
        self.verifier = verifier

    async def verify_token(self, token: str) -> AccessToken | None:
        answered = _answered.get()
        if answered is not None and hmac.compare_digest(answered[0].encode(), token.encode()):
            return answered[1]
        found = await self.verifier.verify_token(token)
        _answered.set((token, found))
        return found


class BearerAdmission:
    """The MCP server's credential, checked from the headers (`http.gate`): a valid bearer
    token (and its scopes) or 401/403 at once, as the SDK words them.  Its protected-resource
    metadata (`/.well-known/...`, GET) is open; with `--no-auth` everything is."""

    def __init__(self, auth: HttpAuth):
        settings = auth.settings
        resource = settings.resource_server_url if settings is not None else None
        checked = settings is not None and settings.validate_token_resource
        self.backend = (BearerAuthBackend(auth.verifier, resource_server_url=resource if checked else None)
                        if auth.verifier is not None else None)
        self.scopes = list(settings.required_scopes or []) if settings is not None else []
        self.metadata_url: str | None = None
        if resource is not None:
            from mcp.server.auth.routes import build_resource_metadata_url

            self.metadata_url = str(build_resource_metadata_url(resource))

    async def __call__(self, scope: Scope) -> Admitted | NotAdmitted:
        peer = (scope.get("client") or ("?", 0))[0]
        if self.backend is None:
            return Admitted(f"open@{peer}", "open")
        if scope.get("method") in ("GET", "HEAD") and scope.get("path", "").startswith("/.well-known/"):
            return Admitted()
        return await self.check(scope) or self.challenge(401, "invalid_token", "Authentication required: send "
                                                         "the bearer token as `Authorization: Bearer <token>`")

    async def check(self, scope: Scope) -> Admitted | NotAdmitted | None:
        """Admitted with a valid token and its scopes; 403 without a scope; None without a valid token."""
        if self.backend is None:
            return None
        found = await self.backend.authenticate(HTTPConnection(scope))
        if found is None:
            return None
        credentials, _user = found
        missing = [scope_ for scope_ in self.scopes if scope_ not in credentials.scopes]
        if missing:
            return self.challenge(403, "insufficient_scope", f"Required scope: {missing[0]}")
        authorization = HTTPConnection(scope).headers.get("authorization", "")
        return Admitted(client_key(scope, authorization), "bearer")

    def challenge(self, status: int, error: str, description: str) -> NotAdmitted:
        parts = [f'error="{error}"', f'error_description="{description}"']
        if self.metadata_url:
            parts.append(f'resource_metadata="{self.metadata_url}"')
        body = json.dumps({"error": error, "error_description": description}).encode()
        challenge = f"Bearer {', '.join(parts)}".encode()
        return NotAdmitted(status, body, b"application/json", ((b"www-authenticate", challenge),))


class StaticTokenVerifier:
    """A `TokenVerifier` for one shared secret, compared in constant time.  The token is a
    known secret from then on: the log masking masks it wherever a client put it (a URL)."""

    def __init__(self, token: str):
        self._token = token.encode("utf-8")
        KNOWN_SECRETS.add([token])

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8", "surrogateescape"), self._token):
            return AccessToken(token=token, client_id=STATIC_CLIENT_ID, scopes=[])
        return None


def resolve_auth(options: HttpOptions, environ: Mapping[str, str] = os.environ) -> HttpAuth:
    """How the server will check clients, or `HttpSetupError` saying what to give it."""
    env_token = (environ.get(TOKEN_ENV) or "").strip()
    if options.token_verifier:
        return _verifier_auth(options, env_token)
    if options.no_auth:
        return _no_auth(options, env_token)
    if options.token_file:
        return _static(options, read_token_file(Path(options.token_file)), f"token from {options.token_file}")
    if env_token:
        return _static(options, checked_token(env_token, f"${TOKEN_ENV}"), f"token from ${TOKEN_ENV}")
    if not is_loopback(options.host):
        raise HttpSetupError(
            f"serve --http on {options.host} can be reached from other machines, so it needs a bearer token: "
            f"give one with --auth-token-file FILE or in the environment variable {TOKEN_ENV} (make one with "
            f"{MAKE_TOKEN}), or bind to 127.0.0.1")
    token = secrets.token_urlsafe(32)
    path = write_token_file(token, options)
    return _static(options, token, f"bearer token for {options.url} is in {path} (readable by you only); clients "
                                   "send it as `Authorization: Bearer <token>`")


def _static(options: HttpOptions, token: str, notice: str) -> HttpAuth:
    # The issuer is required by AuthSettings; with no resource_server_url nothing publishes it
    # (no protected-resource metadata): the token is this server's own.
    settings = AuthSettings(issuer_url=options.url.removesuffix("/mcp"), resource_server_url=None)  # type: ignore[arg-type]
    return HttpAuth(CheckedOnce(StaticTokenVerifier(token)), settings, notice)


def _no_auth(options: HttpOptions, env_token: str) -> HttpAuth:
    if not is_loopback(options.host):
        raise HttpSetupError(f"--no-auth is allowed on loopback only (127.0.0.1, ::1, localhost), not on "
                             f"{options.host}: give a token with --auth-token-file FILE or {TOKEN_ENV}")
    if options.token_file:
        raise HttpSetupError("--no-auth and --auth-token-file contradict each other: drop one")
    ignored = f" ({TOKEN_ENV} is ignored)" if env_token else ""
    return HttpAuth(None, None, f"WARNING: serving without authentication (--no-auth){ignored}: any process on "
                                "this machine can run workflows and their commands")


def _verifier_auth(options: HttpOptions, env_token: str) -> HttpAuth:
    given = [name for name, present in (("--auth-token-file", options.token_file), (TOKEN_ENV, env_token),
                                        ("--no-auth", options.no_auth)) if present]
    if given:
        raise HttpSetupError(f"--token-verifier checks every token itself: drop {' and '.join(given)}")
    if not options.issuer_url:
        raise HttpSetupError("--token-verifier needs --auth-issuer-url URL: the identity provider clients get "
                             "their tokens from (published in this server's protected-resource metadata)")
    verifier = load_verifier(str(options.token_verifier))
    resource = options.resource_url or options.url
    try:
        settings = AuthSettings(issuer_url=options.issuer_url, resource_server_url=resource,  # type: ignore[arg-type]
                                required_scopes=list(options.scopes) or None, validate_token_resource=True)
    except ValueError as exc:
        raise HttpSetupError(f"--auth-issuer-url / --auth-resource-url: {_first_error(exc)}") from None
    return HttpAuth(CheckedOnce(verifier), settings, f"tokens are checked by {options.token_verifier} (issuer "
                                        f"{options.issuer_url}, resource {resource})")


def load_verifier(spec: str) -> TokenVerifier:
    """`MODULE:NAME`, an object with `async verify_token(token)`, or a callable making one."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise HttpSetupError(f"--token-verifier {spec!r} is not MODULE:NAME (e.g. mycompany.auth:make_verifier)")
    try:
        found: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise HttpSetupError(f"--token-verifier {spec}: {exc} (is its module on PYTHONPATH?)") from None
    verifier = found if hasattr(found, "verify_token") else found() if callable(found) else found
    if not callable(getattr(verifier, "verify_token", None)):
        raise HttpSetupError(f"--token-verifier {spec} is not a token verifier: it needs a method "
                             "`async verify_token(token) -> AccessToken | None` (mcp.server.auth.provider)")
    return verifier


def read_token_file(path: Path) -> str:
    try:
        return token_in_file(path)
    except TokenFileError as exc:
        raise HttpSetupError(str(exc)) from None


def checked_token(token: str, where: str) -> str:
    try:
        return token_checked(token, where)
    except TokenFileError as exc:
        raise HttpSetupError(str(exc)) from None


def token_file_path(options: HttpOptions) -> Path:
    """Where a made token lives: the user data directory, one file per address and port."""
    return credentials_dir() / f"{safe_host(options.host)}-{options.port}.token"


def safe_host(host: str) -> str:
    """A bind address as part of a file name."""
    return host.replace(":", "_").replace("[", "").replace("]", "")


def write_token_file(token: str, options: HttpOptions) -> Path:
    """Write the token to a file only this user can read, replacing any earlier one at once."""
    path = token_file_path(options)
    try:
        write_private(path, token + "\n")
    except OSError as exc:
        raise HttpSetupError(f"cannot write the token file {path}: {exc}; give a token with --auth-token-file FILE "
                             f"or {TOKEN_ENV} instead") from None
    return path


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')}"
    return str(exc)
