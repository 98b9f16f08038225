"""Finding known secret texts inside other text, in time linear in the text.

`SecretMatcher` is one fixed set (an instance's secrets): a few are looked for with `in`
(C-speed substring search), more with one RE2 set whose automaton reads the text once,
however many secrets it holds.  `KnownSecrets` is the process-wide list the log masking
uses (a log line belongs to no instance): bounded, and never blind to a new secret.  The
newest secrets sit in a short list checked with `in`; when it fills up, the whole list is
compiled again into one RE2 set, dropping the secrets seen longest ago beyond the bound.
So adding a secret never compiles anything, a compile happens once per `FRESH` new
secrets, and a log line costs one automaton pass plus at most `FRESH` substring searches —
never a sort, never a scan of thousands of entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

MASK = "***"
FEW = 16  # up to this many secrets, `in` beats an RE2 call
FRESH = 64  # KnownSecrets: new secrets checked with `in` before the set is compiled again
LIMIT = 4096  # KnownSecrets: secrets kept (the ones seen longest ago go first)
LIMIT_CHARS = 1 << 20  # KnownSecrets: characters kept in all


class SecretMatcher:
    """A fixed set of secret texts: which occur in a text, where, and the text without them."""

    def __init__(self, secrets: Iterable[str]):
        self.ordered = tuple(sorted(set(secrets), key=len, reverse=True))  # once per set, not per text
        self._set: Any = _compiled_set(self.ordered) if len(self.ordered) > FEW else None

    def present(self, text: str) -> list[str]:
        """The secrets that occur in `text`, longest first (so one inside another is masked whole)."""
        if self._set is None:
            return [secret for secret in self.ordered if secret in text]
        hits = self._set.Match(text)
        return [self.ordered[index] for index in sorted(hits)] if hits else []

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every occurrence of every secret in `text`."""
        found = []
        for secret in self.present(text):
            start = text.find(secret)
            while start >= 0:
                found.append((start, start + len(secret)))
                start = text.find(secret, start + len(secret))
        return found

    def replace(self, text: str) -> str:
        for secret in self.present(text):
            text = text.replace(secret, MASK)
        return text


def _compiled_set(ordered: tuple[str, ...]) -> Any:
    """One RE2 set of literal texts (index i is ordered[i]), searched anywhere in a text."""
    options = re2.Options()
    options.literal = True
    options.log_errors = False
    options.max_mem = 64 << 20  # 4,096 secrets compile to a few MB; the DFA needs room to stay fast
    found = re2.Set.SearchSet(options)
    for secret in ordered:
        found.Add(secret)
    found.Compile()
    return found


@lru_cache(maxsize=256)
def matcher_for(secrets: frozenset[str]) -> SecretMatcher:
    """The matcher of a set, compiled once: an instance's masker is rebuilt after each change,
    and its secrets are mostly the same set as last time."""
    return SecretMatcher(secrets)


class KnownSecrets:
    """Every secret any instance of this process showed, for text that belongs to no instance."""

    def __init__(self, limit: int = LIMIT, fresh: int = FRESH, limit_chars: int = LIMIT_CHARS):
        self._limit, self._fresh_limit, self._limit_chars = limit, fresh, limit_chars
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()  # least recently seen first
        self._chars = 0
        self._match: tuple[SecretMatcher, tuple[str, ...]] = (SecretMatcher(()), ())  # compiled, newest

    def __len__(self) -> int:
        return len(self._seen)

    def __contains__(self, secret: object) -> bool:
        return secret in self._seen

    def add(self, secrets: Iterable[str]) -> None:
        """Remember `secrets` (already filtered by the masker); each is masked from now on."""
        with self._lock:
            for secret in secrets:
                if secret in self._seen:
                    self._seen.move_to_end(secret)
                    continue
                self._seen[secret] = None
                self._chars += len(secret)
                self._match = (self._match[0], (*self._match[1], secret))
            if len(self._match[1]) > self._fresh_limit:
                self._recompile()

    def _recompile(self) -> None:
        """Compile every kept secret into one set, first dropping those seen longest ago."""
        while self._seen and (len(self._seen) > self._limit or self._chars > self._limit_chars):
            dropped, _ = self._seen.popitem(last=False)
            self._chars -= len(dropped)
        self._match = (SecretMatcher(tuple(self._seen)), ())

    def mask_text(self, text: str) -> str:
        compiled, fresh = self._match  # one consistent pair (replaced whole), read without the lock
        found = compiled.present(text) + [secret for secret in fresh if secret in text]
        for secret in sorted(found, key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
            self._chars = 0
            self._match = (SecretMatcher(()), ())
