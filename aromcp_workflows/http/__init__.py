"""What every HTTP surface of ours shares, below both `server/` (MCP over HTTP) and `web/`
(the page): which Host and Origin are answered, the socket they listen on, the credential
checked from the headers before any body is read, the connection limits, the access log,
and the files that hold a credential.

Light on purpose (Starlette types only, no MCP SDK): the web view alone imports it at start.
"""

from aromcp_workflows.http.access import AccessLog
from aromcp_workflows.http.connections import CONNECTION, ConnectionBook, guarded_protocol
from aromcp_workflows.http.gate import (
    CREDENTIAL,
    Admission,
    Admitted,
    BodyDeadline,
    CredentialGate,
    NotAdmitted,
    refuse,
)
from aromcp_workflows.http.hosts import BACKLOG, HostEntryError, HostGuard, HostRule, listening_socket, respond
from aromcp_workflows.http.limits import LimitError, read_limits
from aromcp_workflows.http.private import credentials_dir, remove_quietly, write_private
from aromcp_workflows.http.serving import ConnectionLimits, guarded, uvicorn_config
from aromcp_workflows.http.tokens import (
    MAKE_TOKEN,
    TokenFileError,
    bearer_of,
    checked_token,
    client_key,
    is_loopback,
    read_token_file,
    same_secret,
)

__all__ = [
    "BACKLOG",
    "CONNECTION",
    "CREDENTIAL",
    "MAKE_TOKEN",
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
    "NotAdmitted",
    "TokenFileError",
    "bearer_of",
    "checked_token",
    "client_key",
    "credentials_dir",
    "guarded",
    "guarded_protocol",
    "is_loopback",
    "listening_socket",
    "read_limits",
    "read_token_file",
    "refuse",
    "remove_quietly",
    "respond",
    "same_secret",
    "uvicorn_config",
    "write_private",
]
