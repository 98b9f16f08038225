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
    """The environment for a command (`declared` on top), or None: inherit `environ` unchanged."""
    store = environ.get(STORE_ENV, "")
    bare_store, passwords = without_password(store)
    dropped = [name for name, value in environ.items() if _credential(name, value, passwords)]
    if not dropped and bare_store == store and not declared:
        return None
    kept = {name: value for name, value in environ.items() if name not in dropped}
    if store and STORE_ENV in kept:
        kept[STORE_ENV] = bare_store
    kept.update(declared or {})
    return kept


def _credential(name: str, value: str, passwords: tuple[str, ...]) -> bool:
    if name == STORE_ENV:
        return False  # kept, without its password
    if name.startswith("AROMCP_") and (name == HTTP_TOKEN_ENV or is_sensitive(name.removeprefix("AROMCP_"))):
        return True
    return any(password == value or (searchable(password) and password in value) for password in passwords)


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
