"""What every HTTP surface of ours shares, below both `server/` (MCP over HTTP) and `web/`
(the page): which Host and Origin are answered, the socket they listen on, the credential
checked from the headers before any body is read, the connection limits, the access log,
and the files that hold a credential.

Light on purpose (Starlette types only, no MCP SDK): the web view alone imports it at start.
"""

from aromcp_workflows.http import tokens
from aromcp_workflows.http.access import AccessLog
from aromcp_workflows.http.connections import CONNECTION, ConnectionBook, guarded_protocol
from aromcp_workflows.http.gate import CREDENTIAL, Admission, Admitted, BodyDeadline, CredentialGate, Refused, refuse
from aromcp_workflows.http.hosts import BACKLOG, HostEntryError, HostGuard, HostRule, listening_socket, respond
from aromcp_workflows.http.limits import LimitError, read_limits
from aromcp_workflows.http.private import credentials_dir, remove_quietly, write_private
from aromcp_workflows.http.serving import ConnectionLimits, guarded, uvicorn_config

__all__ = [
           "BACKLOG",
           "CONNECTION",
           "CREDENTIAL",
           "AccessLog",
           "Admission",
           "Admitted",
           "BodyDeadline",
           "ConnectionBook",
           "ConnectionLimits",
           "CredentialGate",
           "HostEntryError",
           "HostGuard",
           "HostRule",
           "LimitError",
           "Refused",
           "credentials_dir",
           "guarded",
           "guarded_protocol",
           "listening_socket",
           "read_limits",
           "refuse",
           "remove_quietly",
           "respond",
           "tokens",
           "uvicorn_config",
           "write_private",
]
