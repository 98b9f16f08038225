"""What every HTTP surface of ours shares, below both `server/` (MCP over HTTP) and `web/`
(the page): which Host and Origin are answered, and the socket they listen on.

Light on purpose (Starlette types only, no MCP SDK): the web view alone imports it at start.
"""

from aromcp_workflows.http.hosts import BACKLOG, HostEntryError, HostGuard, HostRule, listening_socket, respond

__all__ = ["BACKLOG", "HostEntryError", "HostGuard", "HostRule", "listening_socket", "respond"]
