"""One parsed bundle per definition content, shared by every instance that runs it.

An instance keeps a snapshot of its definitions (so editing a YAML file never changes a
running workflow), and loading an instance used to validate that snapshot into a bundle
of its own: a server holding 10,000 waiting instances of one workflow held 10,000 parsed
copies of it and 10,000 decoded snapshots, about 18 KB per instance for a small
workflow.  Nothing at run time changes a definition, so instances whose snapshots are
equal can share one bundle and one snapshot dict.

`SharedBundles` keys bundles by a digest of the snapshot's canonical JSON text.  Values
are held weakly — a bundle lives exactly as long as some instance uses it — plus the few
most recently used ones strongly, so a workflow started and finished over and over is
not validated again each time.  A server that meets many definitions therefore keeps
only the ones its live instances run, plus `keep`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

B = TypeVar("B")


def content_key(snapshot: Any) -> str:
    """A digest of a JSON-like value that is equal exactly when the values are (key order aside)."""
    text = json.dumps(snapshot, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class SharedBundles(Generic[B]):
    """Objects built from JSON snapshots, one per distinct content, held weakly (+ `keep` recent)."""

    def __init__(self, build: Callable[[dict[str, Any]], B], keep: int = 16) -> None:
        self._build = build
        self._keep = keep
        self._live: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[str, B] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0  # how many snapshots were actually parsed (tests and benchmarks read it)

    def get(self, snapshot: dict[str, Any]) -> B:
        """The shared object for this content, built from `snapshot` the first time it is seen."""
        key = content_key(snapshot)
        with self._lock:
            found = self._live.get(key)
            if found is not None:
                self._remember(key, found)
                return found
        built = self._build(snapshot)  # outside the lock: parsing may take milliseconds
        with self._lock:
            found = self._live.setdefault(key, built)  # a racing builder's object wins once, for all
            self.builds += 1
            self._remember(key, found)
            return found

    def _remember(self, key: str, value: B) -> None:
        self._recent[key] = value
        self._recent.move_to_end(key)
        while len(self._recent) > self._keep:
            self._recent.popitem(last=False)

    def __len__(self) -> int:
        return len(self._live)

    def clear(self) -> None:
        with self._lock:
            self._live.clear()
            self._recent.clear()
