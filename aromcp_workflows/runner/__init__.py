"""The headless agent: an MCP client that performs atomic steps without an LLM.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.runner.answers import AnswerBook, AnswersFileError, ScriptedAnswer, shell_answer
    from aromcp_workflows.runner.run import UsageError, parse_inputs, run_from_cli

__all__ = [
    "AnswerBook",
    "AnswersFileError",
    "ScriptedAnswer",
    "UsageError",
    "parse_inputs",
    "run_from_cli",
    "shell_answer",
]
__getattr__ = lazy_face(
    __name__,
    {
        "AnswerBook": "answers",
        "AnswersFileError": "answers",
        "ScriptedAnswer": "answers",
        "shell_answer": "answers",
        "UsageError": "run",
        "parse_inputs": "run",
        "run_from_cli": "run",
    },
)
