"""AroMCP's failure and retry settings → this project's `on_error`, `retry_count`, `max_attempts`.

AroMCP writes `error_handling: {strategy, max_retries, fallback_value}` on a step and
`max_retries` on an `agent_prompt`; here a step has `on_error`, `retry_count` (retries
after the first attempt, shell commands) and `max_attempts` (attempts, the first one
included).  AroMCP checks none of these values when it loads a file, so a wrong one
(`max_retries: "lots"`, `error_handling: "ignore"`) is refused here at its line, saying
what to write, instead of ending the import in a traceback or failing validation later
as if the translator were wrong.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap

from aromcp_workflows.importer.reading import line_of, pop_key, rename_key
from aromcp_workflows.importer.report import shown
from aromcp_workflows.importer.scope import ImportScope
from aromcp_workflows.importer.steps_keys import count_bounds

ERROR_STRATEGY = {"fail": "fail", "continue": "continue", "retry": "retry", "fallback": "continue"}
AROMCP_RETRIES = 3  # AroMCP's default max_retries (agent_prompt, agent_response)
_BARE_NAME = ("AroMCP's error_handling is a mapping, {{strategy: {0}}}: its code cannot read a bare name "
              "(a server-side command fails on it); the evident intent, strategy {0}, is taken")

ErrorSpec = tuple[int, dict[str, Any], str, str]  # line, the mapping, as written, note


def whole_count(node: Any, key: str, scope: ImportScope, what: str, bounds: tuple[int, int], line: int) -> int | None:
    """`node[key]` when it is a whole number within `bounds`; else None, refused at its line.

    AroMCP hands such a value on unchecked, so `"x"`, `null`, `2.5` or `-1` load there and
    go wrong later; here the translated count must be one the validator accepts."""
    value = node.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and bounds[0] <= value <= bounds[1]:
        return value
    example = min(max(AROMCP_RETRIES, bounds[0]), bounds[1])
    scope.notes.refuse(line_of(node, key, line), f"{key}: {shown(value)} cannot be translated: the number of {what} "
                                                 f"must be a whole number from {bounds[0]} to {bounds[1]} "
                                                 f"(e.g. {key}: {example})")
    return None


def prompt_retries(step: CommentedMap, scope: ImportScope) -> None:
    """agent_prompt `max_retries: n` (asked again up to n times) → `max_attempts: n + 1`, in place."""
    if "max_retries" not in step:
        return
    line = line_of(step, "max_retries")
    low, high = count_bounds("agent_prompt", "max_attempts")
    retries = whole_count(step, "max_retries", scope, "retries", (low - 1, high - 1), line)
    if retries is None:
        pop_key(step, "max_retries")
        return
    rename_key(step, "max_retries", "max_attempts")
    step["max_attempts"] = retries + 1
    scope.notes.rewrite(line, f"max_retries: {retries}", f"max_attempts: {retries + 1}",
                        "AroMCP counts the retries, this project the attempts, the first one included")


def input_attempts(step: CommentedMap, scope: ImportScope) -> None:
    """user_input `max_retries` is kept as `max_attempts` (docs/import.md); a count the
    validator would refuse is refused here, at the AroMCP key's line."""
    if "max_retries" in step and whole_count(step, "max_retries", scope, "attempts",
                                             count_bounds("user_input", "max_attempts"), line_of(step)) is None:
        pop_key(step, "max_retries")


def step_error_handling(step: CommentedMap, scope: ImportScope, choices: tuple[str, ...]) -> None:
    """`error_handling` → `on_error` (and `retry_count`, `fallback_value`) on the step itself."""
    found = _error_spec(step, scope)
    if found is None:
        return
    line, spec, written, note = found
    strategy = ERROR_STRATEGY[str(spec.get("strategy", "fail"))]
    if strategy not in choices:
        note = _joined(note, f"no {strategy} on {step['type']} here: a failure fails the step")
        strategy = "fail"
    new = f"on_error: {strategy}"
    if strategy == "retry":
        bounds = count_bounds("shell_command", "retry_count")
        retries = whole_count(spec, "max_retries", scope, "retries", bounds, line) if "max_retries" in spec \
            else AROMCP_RETRIES
        if retries is None:
            return
        step["retry_count"] = retries
        new += f", retry_count: {retries}"
    step["on_error"] = strategy
    if "fallback_value" in spec:
        step["fallback_value"] = spec["fallback_value"]
        note = _joined(note, "a fallback is stored as the step's result")
    scope.notes.rewrite(line, f"error_handling: {written}", new, note)


def response_error_handling(step: CommentedMap, prompt: CommentedMap, scope: ImportScope) -> None:
    """An `agent_response`'s `error_handling` → the prompt it is merged into: `retry` as
    `max_attempts: n + 1`, the others as that prompt's `on_error` (and `fallback_value`)."""
    found = _error_spec(step, scope)
    if found is None:
        return
    line, spec, written, note = found
    if spec.get("strategy") == "retry":
        low, high = count_bounds("agent_prompt", "max_attempts")
        retries = whole_count(spec, "max_retries", scope, "retries", (low - 1, high - 1), line) \
            if "max_retries" in spec else AROMCP_RETRIES
        if retries is None:
            return
        prompt["max_attempts"] = retries + 1
        new = f"max_attempts: {retries + 1}"
        note = _joined(note, "on the prompt: an answer that does not validate is asked for again")
    else:
        prompt["on_error"] = ERROR_STRATEGY[str(spec.get("strategy", "fail"))]
        new = f"on_error: {prompt['on_error']}"
        if "fallback_value" in spec:
            prompt["fallback_value"] = spec["fallback_value"]
        note = _joined(note, "on the prompt; AroMCP applies it at the first invalid answer, here after "
                             "max_attempts answers")
    scope.notes.rewrite(line, f"error_handling: {written}", new, note)


def _error_spec(step: CommentedMap, scope: ImportScope) -> ErrorSpec | None:
    """The step's `error_handling` (removed from it) as a mapping with one of AroMCP's
    strategies; None when there is none, or it names none (then refused at its line:
    AroMCP's validator refuses an unknown strategy too)."""
    if "error_handling" not in step:
        return None
    line = line_of(step, "error_handling")
    spec = pop_key(step, "error_handling")
    note = ""
    written = str(dict(spec)) if isinstance(spec, dict) else str(spec)
    if isinstance(spec, str) and spec in ERROR_STRATEGY:
        spec, note = {"strategy": spec}, _BARE_NAME.format(spec)
    strategy = spec.get("strategy", "fail") if isinstance(spec, dict) else None
    if isinstance(spec, dict) and isinstance(strategy, str) and strategy in ERROR_STRATEGY:
        return line, spec, written, note
    where = line_of(spec, "strategy", line) if isinstance(spec, dict) else line
    what = f"strategy: {shown(strategy)}" if isinstance(spec, dict) else f"error_handling: {shown(spec)}"
    scope.notes.refuse(where, f"{what} names none of AroMCP's error_handling strategies (fail, continue, retry, "
                              "fallback); write error_handling: {strategy: continue}, or another of them")
    return None


def _joined(first: str, second: str) -> str:
    return f"{first}; {second}" if first else second
