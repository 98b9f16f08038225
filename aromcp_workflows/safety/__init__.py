"""Defences every layer uses: secrets masked in replies, traces, errors and logs (`masking`),
and authors' regular expressions run on RE2 in linear time (`patterns`).

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.safety.environment import command_environment, names_with_prefix
    from aromcp_workflows.safety.known import MASK
    from aromcp_workflows.safety.masking import Masker, SecretIndex, is_sensitive, secret_values
    from aromcp_workflows.safety.patterns import full_match, pattern_problem
    from aromcp_workflows.safety.redaction import KNOWN_SECRETS, MAX_ECHO, MAX_LOG, redact

__all__ = [
    "KNOWN_SECRETS",
    "MASK",
    "MAX_ECHO",
    "MAX_LOG",
    "Masker",
    "SecretIndex",
    "command_environment",
    "full_match",
    "is_sensitive",
    "names_with_prefix",
    "pattern_problem",
    "redact",
    "secret_values",
]
__getattr__ = lazy_face(
    __name__,
    {
        "MASK": "known",
        "command_environment": "environment",
        "names_with_prefix": "environment",
        "Masker": "masking",
        "SecretIndex": "masking",
        "is_sensitive": "masking",
        "secret_values": "masking",
        "full_match": "patterns",
        "pattern_problem": "patterns",
        "KNOWN_SECRETS": "redaction",
        "MAX_ECHO": "redaction",
        "MAX_LOG": "redaction",
        "redact": "redaction",
    },
)
