"""JavaScript expressions for workflows: V8 engine, `{{ }}` templates, free-name analysis.

Public API: `ExpressionEngine`, `ExpressionError`, `MISSING` (JS undefined).  See
docs/architecture.md and docs/expressions-and-state.md.  Importing this package does not
import mini-racer; V8 starts on first use.
"""

from aromcp_workflows.expressions.analysis import Reads, analyse, js_truthy
from aromcp_workflows.expressions.engine import ExpressionEngine, reads_of
from aromcp_workflows.expressions.errors import MISSING, ExpressionError, UnclosedTemplate, UnknownFilter
from aromcp_workflows.expressions.runtime import EngineStats, EngineUnavailable
from aromcp_workflows.expressions.template import parse_template, path_to_key, to_text

__all__ = [
    "MISSING",
    "EngineStats",
    "EngineUnavailable",
    "ExpressionEngine",
    "ExpressionError",
    "Reads",
    "UnclosedTemplate",
    "UnknownFilter",
    "analyse",
    "js_truthy",
    "parse_template",
    "path_to_key",
    "reads_of",
    "to_text",
]
