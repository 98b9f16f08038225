"""Masking secrets in everything we show: replies, traces, debug output, status errors, logs.

Shared by the interpreter (stored failure messages, input errors), `explain/`, the runner
and the reply guard, so it lives at the top of the package.

What is a secret (docs/security.md, "Secrets"):

- a field the workflow *declares* secret (`secret: true` on an input or a `state_schema`
  field, or listed under `secrets:`), and a computed field fed by a secret: masked whole
  under its key, whatever its type (`secret_keys` of the `Masker`);
- a *string* under a key whose name says it is a secret (`names.is_sensitive`:
  `api_token`, `gh_pat`, `db_password`); numbers and booleans are never masked by name;
- a string whose *shape* gives it away, wherever it appears (`shapes`: `ghp_…`, `sk-…`,
  a URL's password, `GITHUB_TOKEN=…`).

The texts of the first two kinds are *known secrets*: they are masked wherever the same
text appears again (transforms copy values around).  A known secret is never a bare
number or date, nor shorter than MIN_SECRET_LENGTH: its digits would vanish from every
count and timestamp.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Any

from aromcp_workflows.safety.known import MASK, matcher_for
from aromcp_workflows.safety.names import is_sensitive
from aromcp_workflows.safety.shapes import SEPARATOR, mask_shapes, spans

MIN_SECRET_LENGTH = 6  # shorter values would mask innocent text
_NUMERIC = re.compile(r"[-+\d.,:/eETZ\s]*")  # numbers, dates, times: never a known secret

__all__ = ["MASK", "Masker", "SecretIndex", "is_sensitive", "searchable", "secret_values"]


def searchable(value: str) -> bool:
    """Whether a secret's text may be looked for inside other text."""
    return len(value) >= MIN_SECRET_LENGTH and not _NUMERIC.fullmatch(value)


def secret_values(*sources: Any) -> set[str]:
    """Every searchable string held under a sensitive key in the given structures."""
    found: set[str] = set()
    for source in sources:
        _collect(source, found, under_secret=False)
    return found


def _collect(node: Any, found: set[str], under_secret: bool) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            _collect(value, found, under_secret or is_sensitive(str(key)))
    elif isinstance(node, list):
        for value in node:
            _collect(value, found, under_secret)
    elif under_secret and isinstance(node, str) and searchable(node):
        found.add(node)


Memo = dict[tuple[int, bool], tuple[Any, frozenset[str]]]


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

    A list that grew by `append` is a new object whose first items are the old list's:
    when they are equal to the old list's (a C-speed comparison of items that are mostly
    the same objects), only the new items are walked.  Equal JSON values hold the same
    strings under the same keys (they differ only as 1, 1.0 and True do, and numbers are
    never secrets), so the old items' secrets are still theirs.
    """

    def __init__(self) -> None:
        self._memo: Memo = {}
        self._named: dict[tuple[int, str], tuple[Any, frozenset[str]]] = {}  # by root and key

    def secrets(self, *roots: Mapping[str, Any], declared: Sequence[Collection[str]] = ()) -> set[str]:
        """What `secret_values(*roots)` returns, for mappings as roots; `declared[i]` names
        the keys of `roots[i]` that are secret whatever their name."""
        found: set[str] = set()
        memo: Memo = {}
        named: dict[tuple[int, str], tuple[Any, frozenset[str]]] = {}
        for position, root in enumerate(roots):
            secret_keys = declared[position] if position < len(declared) else ()
            for key, value in root.items():
                under = key in secret_keys or is_sensitive(str(key))
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
        return found

    @staticmethod
    def _walk(value: Any, under: bool, before: tuple[Any, frozenset[str]] | None) -> frozenset[str]:
        """The secrets in `value`, walking only what was appended to the list it was before."""
        inner: set[str] = set()
        if before is not None and isinstance(value, list) and isinstance(before[0], list):
            old = before[0]
            if len(old) <= len(value) and value[:len(old)] == old:
                _collect(value[len(old):], inner, under)
                return before[1] | inner
        _collect(value, inner, under)
        return frozenset(inner)


class Masker:
    """Replaces secrets in anything JSON-like: by key (a declared secret's value is `***`
    whatever it is; a string under a sensitive name is `***`), by value (known secret
    texts inside any other string), and by shape."""

    def __init__(self, secrets: Iterable[str] = (), secret_keys: Iterable[str] = ()):
        self.secrets = frozenset(secret for secret in secrets if searchable(secret))
        self.secret_keys = frozenset(secret_keys)
        self._matcher = matcher_for(self.secrets)

    def with_secrets(self, more: Iterable[str]) -> Masker:
        """A masker that also knows `more` (e.g. past values found in the history)."""
        extra = {secret for secret in more if searchable(secret)} - self.secrets
        return Masker(self.secrets | extra, self.secret_keys) if extra else self

    def masks_whole(self, key: str) -> bool:
        """Whether everything under `key` is secret (a declared or fed secret, or a secret's name)."""
        return key in self.secret_keys or is_sensitive(key)

    def __call__(self, node: Any) -> Any:
        return self.mask(node)

    def mask(self, node: Any, key: str | None = None) -> Any:
        """`node` with every secret masked.  All its strings are scanned as one text (one
        pass of each automaton, not one call per string); only strings found to hold a
        secret are masked one by one.

        `key` is the key `node` stands under: a reply's own field (`status`, `state`), so a
        secret's name masks a string there, but a workflow's declared secret of the same name
        does not (a field declared `status` must not hide the reply's status)."""
        texts: list[str] = []
        copy = self._by_key(node, key, texts, declared=False)
        flagged = self._flagged(texts)
        if not flagged:
            return copy
        return self._masked_texts(copy, flagged)

    def _by_key(self, node: Any, key: str | None, texts: list[str], declared: bool = True) -> Any:
        """A copy with values under secret keys masked; every other string goes to `texts`.
        `declared`: whether `key` is checked against the declared secrets too."""
        if declared and key is not None and key in self.secret_keys:
            return self.mask_all(node)
        if isinstance(node, dict):
            return {k: self._by_key(v, str(k), texts) for k, v in node.items()}
        if isinstance(node, list):
            inherited = key if key is not None and is_sensitive(key) else None
            return [self._by_key(v, inherited, texts) for v in node]
        if isinstance(node, str):
            if key is not None and is_sensitive(key):
                return MASK
            texts.append(node)
        return node

    def _flagged(self, texts: list[str]) -> set[str]:
        """The strings of `texts` that hold a known secret or a secret's shape."""
        if not texts:
            return set()
        joined = texts[0] if len(texts) == 1 else SEPARATOR.join(texts)
        found = self._matcher.spans(joined) + spans(joined)
        if not found:
            return set()
        starts = [0, *accumulate(len(text) + 1 for text in texts)]
        return {texts[bisect_right(starts, start) - 1] for start, _ in found}

    def _masked_texts(self, node: Any, flagged: set[str]) -> Any:
        if isinstance(node, dict):
            return {k: self._masked_texts(v, flagged) for k, v in node.items()}
        if isinstance(node, list):
            return [self._masked_texts(v, flagged) for v in node]
        if isinstance(node, str) and node in flagged:
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
        """`text` with known secrets, then secrets recognised by their shape, masked."""
        return mask_shapes(self._matcher.replace(text))
