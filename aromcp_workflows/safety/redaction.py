"""Text that leaves the process — an error a client reads, a log line — with its secrets
masked and its length capped.

Known secrets (every secret a reply was masked with, in a bounded list that always holds
the newest) are replaced first, so a cut cannot split one; then the text is capped (no run
of more than MAX_ECHO non-space characters, MAX_ERROR in all); then secrets recognised by
their shape (`GITHUB_TOKEN=…`, `ghp_…`) are masked.  Every scan is linear in the text.
The MCP guard, the web view and the log record factory all use `redact`.
"""

from __future__ import annotations

import re

from aromcp_workflows.safety.known import KnownSecrets
from aromcp_workflows.safety.masking import Masker
from aromcp_workflows.safety.shapes import mask_shapes

MAX_ECHO = 200  # characters of one value an error may repeat
MAX_ERROR = 4000  # characters of one error text
MAX_LOG = 4000  # characters of one log record
_LONG_RUN = re.compile(r"\S{" + str(MAX_ECHO + 1) + ",}")
KNOWN_SECRETS = KnownSecrets()  # the secrets maskers showed in this process, for log lines (bounded)


def cap_text(text: str, limit: int = MAX_ERROR) -> str:
    """`text` with every run of more than MAX_ECHO non-space characters cut, and `limit` in all."""
    def shorten(match: re.Match[str]) -> str:
        run = match.group(0)
        return f"{run[:MAX_ECHO]}… ({len(run.encode('utf-8', 'surrogatepass')):,} bytes)"

    text = _LONG_RUN.sub(shorten, text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters in all)"


def redact(text: str, masker: Masker | None = None, limit: int = MAX_ERROR) -> str:
    """`text` with known secrets and secrets recognised by their shape masked, then capped.

    Known secrets are replaced before capping (so a cut cannot split one); shapes are masked
    in the capped text.  Every scan is linear in the text.
    """
    if masker is not None:
        text = masker.mask_text(text)
    return mask_shapes(cap_text(KNOWN_SECRETS.mask_text(text), limit))
