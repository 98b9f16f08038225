"""Static checks of `{{ }}` templates: what can be known before anything runs.

Templates are parsed by the same parser the engine renders them with
(`expressions.parse_template`), so validation and run time agree on where a template
ends, which filters exist and what counts as a stray `}}`.  Beyond syntax, a template
that reads `inputs.x` close to a declared input is a typo (an error); one that reads an
input nothing declares is a warning (the seed design reads undeclared inputs as
`undefined`: `{{ inputs.retries || 3 }}`).  Inside a sub-agent task `task.x` must name
one of the task's inputs or `task_id`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from aromcp_workflows.definition.errors import did_you_mean

if TYPE_CHECKING:
    from aromcp_workflows.expressions import ExpressionError

NEVER_CLOSED = "template opens '{{' but never closes it with '}}'"
NEVER_OPENED = "template closes '}}' that was never opened"
NESTED = "template opens '{{' inside another '{{ ... }}'"


def template_problems(text: str, inputs: Collection[str],
                      task_inputs: Collection[str] | None = None,
                      warnings: list[str] | None = None) -> list[str]:
    """Every error of the templates in `text` (empty when it has none or they are fine);
    with `warnings`, reads of undeclared inputs that are no typo go there instead."""
    if "{{" not in text and "}}" not in text:
        return []
    try:
        from aromcp_workflows.expressions import ExpressionError, ExprPart, parse_template, reads_of
    except ImportError:  # the definition layer also works on its own
        problem = unbalanced_braces(text)
        return [problem] if problem else []
    try:
        template = parse_template(text)
    except ExpressionError as exc:
        return [_parse_message(exc)]
    problems: list[str] = []
    for part in template.parts:
        if not isinstance(part, ExprPart):
            if "}}" in part:
                problems.append(NEVER_OPENED)
            continue
        if "{{" in part.source:
            problems.append(NESTED)
            continue
        if not part.source.strip():
            problems.append("empty template '{{ }}'; put an expression inside")
            continue
        try:
            reads = reads_of(part.source)
        except ExpressionError as exc:
            problems.append(f"template {{{{ {part.source.strip()} }}}} is not valid JavaScript: "
                            f"{exc.js_message or exc}")
            continue
        unknown = _unknown_keys(reads.keys_of("inputs") if "inputs" in reads.names else None,
                                inputs, "inputs", "the workflow declares no input")
        # an include_workflow may pass any input to a workflow that declares none (the seed's
        # shared/check-standards.yaml reads inputs.files so), and only declared ones otherwise
        unless = " unless an include_workflow passes it" if not inputs else ""
        for message, close in unknown:
            if warnings is not None and not close:
                warnings.append(message + ": workflow_start accepts only declared inputs, so it is "
                                f"undefined{unless}; declare it under 'inputs'")
            else:
                problems.append(message)
        if task_inputs is not None and "task" in reads.names:
            problems += [message for message, _ in _unknown_keys(reads.keys_of("task"), [*task_inputs, "task_id"],
                                                                 "task", "the sub-agent task has no input")]
    return problems


def command_problem(command: str) -> str | None:
    """Why a shell command template cannot carry its values literally, or None.

    The engine escapes each insertion for the bash quoting context it stands in; this asks
    the same lexer, so a context it cannot make safe (backticks, `${…}`, a comment, …) is
    refused when the workflow loads rather than when the step runs.
    """
    if "{{" not in command:
        return None
    try:
        from aromcp_workflows.expressions import ExpressionError, ShellContextError, command_plan
    except ImportError:  # the definition layer also works on its own
        return None
    try:
        command_plan(command)
    except ExpressionError:
        return None  # reported by template_problems
    except ShellContextError as exc:
        return str(exc)
    return None


def _unknown_keys(keys: Collection[str] | None, known: Collection[str], root: str,
                  what: str) -> list[tuple[str, bool]]:
    """Each key read that is not `known`: the problem, and whether a known name is close
    to it (a likely typo: an error, where an unknown name alone may be a warning)."""
    found = []
    for key in sorted(keys or ()):
        if key not in known:
            close = did_you_mean(key, known)
            found.append((f"template reads {root}.{key}, but {what} {key!r}{close}", bool(close)))
    return found


def _parse_message(exc: ExpressionError) -> str:
    from aromcp_workflows.expressions import UnclosedTemplate, UnknownFilter

    if isinstance(exc, UnclosedTemplate):
        return NEVER_CLOSED
    if isinstance(exc, UnknownFilter):
        return (f"template uses unknown filter {exc.name!r}{did_you_mean(exc.name, exc.known)}; "
                f"filters are: {', '.join(exc.known)}")
    return f"template: {exc.js_message or exc}"


def unbalanced_braces(text: str) -> str | None:
    """Why `text`'s `{{ }}` do not pair up, or None when they do (no JS awareness)."""
    depth, index = 0, 0
    while index < len(text):
        if text.startswith("{{", index):
            if depth:
                return NESTED
            depth, index = 1, index + 2
        elif text.startswith("}}", index) and depth:
            depth, index = 0, index + 2
        elif text.startswith("}}", index):
            return NEVER_OPENED
        else:
            index += 1
    if depth:
        return NEVER_CLOSED
    return None


def condition_problem(text: str) -> str | None:
    """Why a condition written as a template inside text ("{{ count }} > 0") is a mistake: it
    renders to text ("0 > 0"), and every text but the empty one is true, so the branch is
    always taken (a `while` ends only at its max_iterations).  None for one whole template
    or a template that does not parse (said by `template_problems`)."""
    try:
        from aromcp_workflows.expressions import ExpressionError, ExprPart, parse_template
    except ImportError:  # the definition layer also works on its own
        return None
    try:
        template = parse_template(text)
    except ExpressionError:
        return None
    if template.whole or not template.expressions:
        return None
    meant = "".join(part.source.strip() if isinstance(part, ExprPart) else part for part in template.parts).strip()
    return (f"this condition is a template inside text: it renders to text such as '0 > 0', and any text but "
            f"the empty one is true, so it always holds; write one expression: {meant!r} (or "
            f"'{{{{ {meant} }}}}')")

