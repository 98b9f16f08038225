"""The environment a workflow's command runs with: this process's own, less its credentials.

Every command a workflow makes run — a server-side `shell_command`, the headless runner's
`agent_shell_command` — gets the environment of the process that runs it, except:

- `AROMCP_HTTP_TOKEN` (the HTTP server's bearer token) and every other `AROMCP_*`
  variable whose name says it holds a secret (`names.is_sensitive`: `…_TOKEN`,
  `…_PASSWORD`, `…_API_KEY`);
- the store's password: taken out of the `AROMCP_WORKFLOWS_STORE` URL (its user part and
  any `password=` parameter), and any other variable that holds it (`PGPASSWORD`,
  a `DATABASE_URL`) left out (a password too short to look for inside other text only
  where it is the whole value).

A workflow that needs a value declares it (the step's `env:`), which is added after.  With
nothing to leave out and nothing declared the answer is None: the command inherits the
environment as it is, at no cost.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from aromcp_workflows.safety.masking import searchable
from aromcp_workflows.safety.names import is_sensitive

HTTP_TOKEN_ENV = "AROMCP_HTTP_TOKEN"
STORE_ENV = "AROMCP_WORKFLOWS_STORE"
URL_SCHEMES = ("postgresql://", "postgres://")


def command_environment(declared: Mapping[str, str] | None = None,
                        environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    """The environment for a command (`declared` on top), or None: inherit `environ` unchanged.
    Only names are read unless there is something to leave out (a command is spawned often)."""
    flagged = {name for name in names_with_prefix("AROMCP_", environ) if _credential_name(name)}
    store = environ.get(STORE_ENV, "")
    bare_store, passwords = without_password(store)
    if not flagged and not passwords and not declared:
        return None
    kept = {name: value for name, value in environ.items()
            if name not in flagged and not any(_holds(value, password) for password in passwords)}
    if store:
        kept[STORE_ENV] = bare_store
    kept.update(declared or {})
    return kept


_NAMES: dict[str, tuple[tuple[bytes, ...], tuple[str, ...]]] = {}  # prefix -> (the names as bytes, the matches)


def names_with_prefix(prefix: str, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The names in `environ` that start with `prefix`.  For this process's own environment
    they are looked for again only when its names changed (compared as the bytes it keeps,
    without decoding them): decoding every name took 15 µs of every command's spawn."""
    data = getattr(environ, "_data", None) if environ is os.environ else None
    if not isinstance(data, dict):
        return tuple(name for name in environ if name.startswith(prefix))
    key = tuple(data)
    found = _NAMES.get(prefix)
    if found is None or found[0] != key:
        found = _NAMES[prefix] = (key, tuple(name for name in environ if name.startswith(prefix)))
    return found[1]


def _credential_name(name: str) -> bool:
    return name == HTTP_TOKEN_ENV or is_sensitive(name.removeprefix("AROMCP_"))


def _holds(value: str, password: str) -> bool:
    return value == password or (searchable(password) and password in value)


def without_password(url: str) -> tuple[str, tuple[str, ...]]:
    """A PostgreSQL store URL without its password, and the password as written and decoded
    (nothing for a file path or a URL without one)."""
    if not url.startswith(URL_SCHEMES):
        return url, ()
    parts = urlsplit(url)
    found: list[str] = []
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        user, _, password = userinfo.partition(":")
        found.append(password)
        netloc = f"{user}@{host}"
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if unquote(key).strip().lower() == "password":
            found.append(value)
        else:
            query.append((key, value))
    secrets = tuple({text for password in found if password for text in (password, unquote(password))})
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query))), secrets
