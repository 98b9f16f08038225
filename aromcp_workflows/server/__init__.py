"""The MCP surface: tools, prompts and resources (`mcp`), what leaves the server (`guard`), the
user asked directly (`elicit`), compact tool schemas (`schemas`), every stdio line answered
(`stdio_guard`).

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.server.http_auth import HttpOptions, HttpSetupError
    from aromcp_workflows.server.mcp import serve

__all__ = ["HttpOptions", "HttpSetupError", "serve"]
__getattr__ = lazy_face(
    __name__,
    {
        "HttpOptions": "http_auth",
        "HttpSetupError": "http_auth",
        "serve": "mcp",
    },
)
