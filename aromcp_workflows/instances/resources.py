"""What the instance layer opens on first use: the store, the V8 engine, the sub-agent prompt.

The first use opens them, not the import, so server start-up stays as fast as a bare MCP
server.  One `Resources` is shared by the registry (which commits) and its live copies
(which load and catch up).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from aromcp_workflows.store import SavesLater, Store

if TYPE_CHECKING:
    from aromcp_workflows.expressions import ExpressionEngine

EngineFactory = Callable[[], "ExpressionEngine"]


def _sub_agent_prompt() -> str | None:
    try:
        from aromcp_workflows.integrations import sub_agent_prompt

        return sub_agent_prompt()
    except Exception:  # a missing prompt file must not stop a workflow: the built-in text serves
        return None


class Resources:
    """The store and the engine of one server process, each opened once, on first use."""

    def __init__(self, store_factory: Callable[[], Store], engine_factory: EngineFactory):
        self._store_factory = store_factory
        self._engine_factory = engine_factory
        self._store: Store | None = None
        self._saves_later: SavesLater | None = None  # the store, when it is one
        self._engine: ExpressionEngine | None = None
        self._prompt: str | None = None
        self._guard = threading.Lock()

    @property
    def store(self) -> Store:
        if self._store is None:
            with self._guard:
                if self._store is None:
                    store = self._store_factory()
                    self._saves_later = store if isinstance(store, SavesLater) else None
                    self._store = store
        return self._store

    @property
    def saves_later(self) -> SavesLater | None:
        """The store, if its saves can be sent now and answered later (`SavesLater`; asked
        once: an isinstance against a protocol costs microseconds, a step's budget is ~1 ms)."""
        self.store  # noqa: B018 - opens it
        return self._saves_later

    @property
    def opened(self) -> bool:
        """Whether the store was opened (asking `store` opens it)."""
        return self._store is not None

    @property
    def engine(self) -> ExpressionEngine:
        if self._engine is None:
            with self._guard:
                if self._engine is None:
                    self._engine = self._engine_factory()
        return self._engine

    @property
    def prompt(self) -> str | None:
        """The sub-agent prompt text runs hand out (read once; the interpreter reads no files)."""
        if self._prompt is None:
            self._prompt = _sub_agent_prompt()
        return self._prompt
