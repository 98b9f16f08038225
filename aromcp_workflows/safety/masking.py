"""Masking secrets in everything we show: traces, debug output, status errors, logs.

Shared by the interpreter (stored failure messages, input errors), `explain/` and the
runner, so it lives at the top of the package rather than under `explain/`.

A value is secret when it sits under a key whose name contains `token`, `secret`,
`password` or `api_key` (any case), in the inputs or anywhere in state.  Such values are
replaced by `***` where they appear under their key, and — because transforms copy them
around — wherever the same text appears inside other strings too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

SENSITIVE_KEY = re.compile(r"token|secret|password|passwd|api_?key", re.IGNORECASE)
MASK = "***"
MIN_SECRET_LENGTH = 4  # shorter values would mask innocent text


def is_sensitive(key: str) -> bool:
    return bool(SENSITIVE_KEY.search(key))


def secret_values(*sources: Any) -> set[str]:
    """Every string (or number) held under a sensitive key in the given structures."""
    found: set[str] = set()
    for source in sources:
        _collect(source, found, under_secret=False)
    return {value for value in found if len(value) >= MIN_SECRET_LENGTH}


def _collect(node: Any, found: set[str], under_secret: bool) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _collect(value, found, under_secret or is_sensitive(str(key)))
    elif isinstance(node, list):
        for value in node:
            _collect(value, found, under_secret)
    elif under_secret and isinstance(node, (str, int, float)) and not isinstance(node, bool):
        found.add(str(node))


class SecretIndex:
    """The secrets of a set of JSON roots, found again after each change by walking only the
    top-level values that changed.

    Why: replies are masked with the instance's secrets after every step, and walking a
    whole state each time made a step cost O(state) (a 100,000-item list nobody touches
    cost tens of ms per step).  State is copy-on-write: an update copies only the
    containers on its path (`state/paths.py` `update_in`), computed values and inputs are
    replaced, never edited.  So a top-level container that is the same object as last
    time holds the same secrets, and its memo entry (which keeps the object alive, so its
    id cannot be reused by another) answers for it.  Scalars are read directly.

    A list that grew by `append` is a new object whose first items are the old list's.
    When the old list held nothing under a sensitive key at all, only the new items are
    walked: an equal prefix then holds no secret either (equal JSON values differ only
    as 1 and 1.0 or True do, and a value under a sensitive key would have been found).
    The prefix check is a C-speed comparison of items that are mostly the same objects.
    """

    def __init__(self) -> None:
        self._memo: dict[tuple[int, bool], tuple[Any, frozenset[str]]] = {}
        self._named: dict[tuple[int, str], tuple[Any, frozenset[str]]] = {}  # by root and key

    def secrets(self, *roots: Mapping[str, Any]) -> set[str]:
        """What `secret_values(*roots)` returns, for mappings as roots."""
        found: set[str] = set()
        memo: dict[tuple[int, bool], tuple[Any, frozenset[str]]] = {}
        named: dict[tuple[int, str], tuple[Any, frozenset[str]]] = {}
        for position, root in enumerate(roots):
            for key, value in root.items():
                under = is_sensitive(str(key))
                if not isinstance(value, (dict, list)):
                    _collect(value, found, under)
                    continue
                slot = (id(value), under)
                hit = memo.get(slot) or self._memo.get(slot)
                if hit is None or hit[0] is not value:
                    hit = (value, self._walk(value, under, self._named.get((position, key))))
                memo[slot] = named[(position, key)] = hit
                found |= hit[1]
        self._memo, self._named = memo, named  # only what the roots hold now: nothing old is kept alive
        return {value for value in found if len(value) >= MIN_SECRET_LENGTH}

    @staticmethod
    def _walk(value: Any, under: bool, before: tuple[Any, frozenset[str]] | None) -> frozenset[str]:
        """The secrets in `value`, walking only what was appended to a secret-free list."""
        start = 0
        if before is not None and not before[1] and isinstance(value, list) and isinstance(before[0], list):
            old = before[0]
            if len(old) <= len(value) and value[:len(old)] == old:
                start = len(old)
        inner: set[str] = set()
        _collect(value[start:] if start else value, inner, under)
        return frozenset(inner)


class Masker:
    """Replaces secrets in anything JSON-like: by key (a sensitive key's value is `***`)
    and by value (known secret strings inside any other string)."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets = sorted(set(secrets), key=len, reverse=True)

    def with_secrets(self, more: Iterable[str]) -> Masker:
        """A masker that also knows `more` (e.g. past values found in the history)."""
        extra = {s for s in more if len(s) >= MIN_SECRET_LENGTH}
        return self if extra <= set(self.secrets) else Masker([*self.secrets, *extra])

    def __call__(self, node: Any) -> Any:
        return self.mask(node)

    def mask(self, node: Any, key: str | None = None) -> Any:
        if key is not None and is_sensitive(key) and not isinstance(node, (dict, list)) and node is not None:
            return MASK
        if isinstance(node, dict):
            return {k: self.mask(v, str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.mask(v, key if key and is_sensitive(key) else None) for v in node]
        if isinstance(node, str):
            return self.mask_text(node)
        return node

    def mask_all(self, node: Any) -> Any:
        """Every leaf value replaced (the whole of something known to be secret)."""
        if isinstance(node, dict):
            return {k: self.mask_all(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self.mask_all(v) for v in node]
        return node if node is None else MASK

    def mask_text(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text
