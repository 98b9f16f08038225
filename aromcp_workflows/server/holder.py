"""The one `WorkflowService` of a server, built on the first tool call (V8, the store and
the workflow loader stay off the start-up path), with the rules a server adds: clients
name workflows (paths are for the command line) and run only the files it allows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aromcp_workflows.app import WorkflowService
    from aromcp_workflows.observe import Observer
    from aromcp_workflows.safety import Masker


class ServiceHolder:
    """Builds the service on first use (heavy imports stay off the start-up path)."""

    def __init__(self, factory: Callable[[], WorkflowService], allowed_files: tuple[str, ...] = ()):
        self._factory = factory
        self._allowed_files = allowed_files
        self._service: WorkflowService | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkflowService:
        if self._service is None:
            with self._lock:
                if self._service is None:
                    service = self._factory()
                    service.loader.names_only = True  # clients name workflows; paths are for the CLI
                    service.loader.allowed_files = frozenset(Path(f).resolve() for f in self._allowed_files)
                    self._service = service
        return self._service

    def masker(self, workflow_id: str | None) -> Masker | None:
        """The masker of an instance, or None (before the service exists nothing is secret yet)."""
        if self._service is None or workflow_id is None:
            return None
        return self._service.masker(workflow_id, latest=False)  # the copy the reply was made from


def default_service_factory(project_dir: str | None = None, store: str | None = None,
                            observer: Observer | None = None, all_projects: bool = False
                            ) -> Callable[[], WorkflowService]:
    def build() -> WorkflowService:
        from aromcp_workflows.app import WorkflowService

        return WorkflowService(project_dir=project_dir, store_path=store, observer=observer,
                               all_projects=all_projects)

    return build
