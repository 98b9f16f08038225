"""Shared secrets an HTTP server of ours accepts: read from a file, checked, and where a
server may be reached from (only loopback may go without one).

`serve --http` (its bearer token) and `aromcp-workflows ui --auth-token-file` read a token
the same way; a problem is one `TokenFileError` line saying what to change.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import stat
import sys
from pathlib import Path

from starlette.types import Scope

MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})
MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


class TokenFileError(ValueError):
    """A token file or value that cannot be used; the text says what to do instead."""


def is_loopback(host: str) -> bool:
    """Only this machine can reach `host` (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def read_token_file(path: Path) -> str:
    """The token in `path`; a file others can read is used, with a warning on stderr."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = stat.S_IMODE(path.stat().st_mode)
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc}") from None
    if mode & 0o077:
        print(f"aromcp-workflows: warning: the token file {path} can be read by other users (mode {mode:o}); "
              f"chmod 600 {path}", file=sys.stderr)
    return checked_token(text.strip(), f"the token file {path}")


def checked_token(token: str, where: str) -> str:
    if not token:
        raise TokenFileError(f"{where} is empty: put a token in it (make one with {MAKE_TOKEN})")
    if len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise TokenFileError(f"the token in {where} must be at least {MIN_TOKEN_CHARS} characters without spaces "
                             f"(make one with {MAKE_TOKEN})")
    return token


def same_secret(given: str, expected: str) -> bool:
    """Compared in constant time (any text, even one that is not valid UTF-8 on the wire)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected.encode("utf-8", "surrogateescape"))


def bearer_of(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, the scheme in any case (as
    HTTP has it, and as the checks accept it), or None."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def client_key(scope: Scope, authorization: str) -> str:
    """Who a request comes from, for the per-client caps: its credential (the token, however
    the header spells the scheme: `bearer T` and `Bearer T` are one client) hashed, and its
    address."""
    token = bearer_of(authorization)
    credential = token if token is not None else authorization
    digest = hashlib.sha256(credential.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    peer = scope.get("client") or ("?", 0)
    return f"{digest}@{peer[0]}"
