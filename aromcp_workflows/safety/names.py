"""Which names say that their value is a secret: `api_token`, `gh_pat`, `db_password`, `apiKey`.

A key is split into words (`GITHUB_TOKEN` → github, token; `apiKey` → api, key;
`x-api-key` → x, api, key; `pass%77ord` is first decoded, as libpq and URL readers do).  It
is sensitive when one word is a secret's name (`token`, `secret`, `password`, `passphrase`,
`pat`, `credentials` …), ends with one (`pgpassword`, `accesstoken`), or two words make one
(`api key`, `private key`, `ssh key`).  Not every name that mentions a secret holds one: a
last word that describes the secret instead of being it (`token_count`, `password_min_length`,
`secret_name`, `token_url`, `use_token_cache`) or a first word that counts (`max_…`, `num_…`)
makes the name plain.  `tokens` alone is not a secret's name: workflows for AI agents count
tokens everywhere (`max_tokens`, `tokens_used`).

The name decides only for strings: numbers and booleans are never masked by their name
(`masking.Masker`), whatever it is.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import pairwise
from urllib.parse import unquote

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
SECRET_WORDS = frozenset({
    "token", "secret", "secrets", "password", "passwords", "passwd", "passphrase", "pat", "credential",
    "credentials", "creds", "apikey", "apikeys", "privatekey", "authorization", "cookie", "cookies",
})
GLUED = ("token", "secret", "password", "passwd", "passphrase", "apikey")  # pgpassword, accesstoken
KEY_KINDS = frozenset({"api", "private", "secret", "access", "signing", "ssh", "encryption", "master",
                       "session", "deploy", "client"})  # <kind>_key, <kind>_keys
DESCRIBING = frozenset({
    "count", "counts", "length", "len", "size", "limit", "limits", "min", "max", "type", "kind", "name",
    "names", "file", "files", "path", "paths", "dir", "url", "uri", "endpoint", "id", "ids", "cache",
    "cached", "used", "usage", "expiry", "expires", "expiration", "ttl", "policy", "hint", "required",
    "enabled", "env", "var", "label", "format", "version", "budget", "remaining", "rate", "prompt",
    "field", "fields", "set", "present", "valid", "at",
})
COUNTING = frozenset({"max", "min", "num", "total", "n", "use", "has", "is"})


@lru_cache(maxsize=8192)
def is_sensitive(key: str) -> bool:
    """Whether a string under this key (or named so in `key=value` text) is a secret."""
    words = [word.lower() for word in _WORD.findall(unquote(key) if "%" in key else key)]
    if not words:
        return False
    if len(words) > 1 and (words[-1] in DESCRIBING or words[0] in COUNTING):
        return False
    return any(_names_a_secret(word) for word in words) or any(
        first in KEY_KINDS and second in ("key", "keys") for first, second in pairwise(words))


def _names_a_secret(word: str) -> bool:
    return word in SECRET_WORDS or any(word.endswith(glued) for glued in GLUED)
