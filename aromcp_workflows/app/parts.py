"""What the parts of `WorkflowService` share: the attributes and the one method each part
(`WorkflowsApi`, `AuthoringApi`, `WatchingApi`) may use of the whole service, declared once,
so a part reads as a class of its own and the type checker holds it to what it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aromcp_workflows.definition import WorkflowLoader
    from aromcp_workflows.instances.registry import InstanceRegistry
    from aromcp_workflows.safety.masking import Masker


class ServicePart:
    """A part of `WorkflowService`: the service sets these in its constructor."""

    instances: InstanceRegistry
    loader: WorkflowLoader

    def masker(self, workflow_id: str, latest: bool = True) -> Masker:
        raise NotImplementedError  # WorkflowService's
