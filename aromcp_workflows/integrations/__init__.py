"""Glue to agent clients: the prompt texts (`prompts`) and client set-up (`claude`).

Nothing is imported here eagerly, so importing the package costs nothing at server start.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.integrations.claude import InstallError, install_claude
    from aromcp_workflows.integrations.prompts import orchestrator_prompt, sub_agent_prompt

__all__ = ["InstallError", "install_claude", "orchestrator_prompt", "sub_agent_prompt"]
__getattr__ = lazy_face(
    __name__,
    {
        "InstallError": "claude",
        "install_claude": "claude",
        "orchestrator_prompt": "prompts",
        "sub_agent_prompt": "prompts",
    },
)
