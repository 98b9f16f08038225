"""JavaScript expressions for workflows: V8 engine, `{{ }}` templates, free-name analysis.

Public API: `ExpressionEngine`, `ExpressionError`, `MISSING` (JS undefined).  See
docs/architecture.md and docs/expressions-and-state.md.  Importing this package does not
import mini-racer; V8 starts on first use.
"""

from aromcp_workflows.expressions.analysis import Reads, analyse, js_truthy
from aromcp_workflows.expressions.batch import Call, ChainItem, ChainOutcome, ValueTable
from aromcp_workflows.expressions.engine import ExpressionEngine, command_plan, reads_of
from aromcp_workflows.expressions.errors import MISSING, ExpressionError, UnclosedTemplate, UnknownFilter
from aromcp_workflows.expressions.lexer import LexError, Token, find_template_end, tokenize
from aromcp_workflows.expressions.runtime import EngineStats, EngineUnavailable
from aromcp_workflows.expressions.shell_context import ShellContextError
from aromcp_workflows.expressions.simple_eval import evaluate, is_number
from aromcp_workflows.expressions.template import ExprPart, NeedsV8, classify, parse_template, path_to_key, to_text
from aromcp_workflows.expressions.text import lone_surrogate_in, not_text, well_formed

__all__ = [
    "MISSING",
    "Call",
    "ChainItem",
    "ChainOutcome",
    "EngineStats",
    "EngineUnavailable",
    "ExprPart",
    "ExpressionEngine",
    "ExpressionError",
    "LexError",
    "NeedsV8",
    "Reads",
    "ShellContextError",
    "Token",
    "UnclosedTemplate",
    "UnknownFilter",
    "ValueTable",
    "analyse",
    "classify",
    "command_plan",
    "evaluate",
    "find_template_end",
    "is_number",
    "js_truthy",
    "lone_surrogate_in",
    "not_text",
    "parse_template",
    "path_to_key",
    "reads_of",
    "to_text",
    "tokenize",
    "well_formed",
]
