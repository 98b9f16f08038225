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
"""

from __future__ import annotations

import hmac
import importlib
import ipaddress
import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings

TOKEN_ENV = "AROMCP_HTTP_TOKEN"
MIN_TOKEN_CHARS = 16
STATIC_CLIENT_ID = "aromcp-http-token"  # the one principal a shared token stands for
LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})
MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


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


class StaticTokenVerifier:
    """A `TokenVerifier` for one shared secret, compared in constant time."""

    def __init__(self, token: str):
        self._token = token.encode("utf-8")

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8", "surrogateescape"), self._token):
            return AccessToken(token=token, client_id=STATIC_CLIENT_ID, scopes=[])
        return None


def is_loopback(host: str) -> bool:
    """Only this machine can reach `host` (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


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
    return HttpAuth(StaticTokenVerifier(token), settings, notice)


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
    return HttpAuth(verifier, settings, f"tokens are checked by {options.token_verifier} (issuer "
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
        text = path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(path.stat().st_mode)
    except (OSError, UnicodeDecodeError) as exc:
        raise HttpSetupError(f"cannot read the token file {path}: {exc}") from None
    if mode & 0o077:
        import sys

        print(f"aromcp-workflows: warning: the token file {path} can be read by other users (mode {mode:o}); "
              f"chmod 600 {path}", file=sys.stderr)
    return checked_token(text.strip(), f"the token file {path}")


def checked_token(token: str, where: str) -> str:
    if not token:
        raise HttpSetupError(f"{where} is empty: put a token in it (make one with {MAKE_TOKEN})")
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise HttpSetupError(f"the token in {where} must be at least {MIN_TOKEN_CHARS} characters without spaces "
                             f"(make one with {MAKE_TOKEN})")
    return token


def token_file_path(options: HttpOptions) -> Path:
    """Where a made token lives: the user data directory, one file per address and port."""
    import platformdirs

    safe = options.host.replace(":", "_").replace("[", "").replace("]", "")
    folder = Path(platformdirs.user_data_dir("aromcp-workflows", appauthor=False)) / "http"
    return folder / f"{safe}-{options.port}.token"


def write_token_file(token: str, options: HttpOptions) -> Path:
    """Write the token to a file only this user can read, replacing any earlier one at once."""
    path = token_file_path(options)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(token + "\n")
        os.replace(temporary, path)
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
