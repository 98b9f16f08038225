"""Rewrite rules for steps: AroMCP's step types and keys → this project's.

Each rule takes one AroMCP step (a round-trip mapping, changed in place where it can be)
and returns the steps that replace it — usually the same one, sometimes none
(`wait_step`), sometimes two (a `user_message` with a `state_update` becomes a message
and an update).  Keys AroMCP accepts but ignores, or that have no meaning here, are
dropped with a note, because AroMCP passes unknown keys through without complaint.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from aromcp_workflows.importer.js import Renames
from aromcp_workflows.importer.reading import carry_comments, delete_key, line_of, new_map, pop_key, rename_key
from aromcp_workflows.importer.results import (
    apply_result_writes,
    collect_writes,
    merge_agent_response,
    raw_command,
    translate_update_step,
)
from aromcp_workflows.importer.rules_errors import input_attempts, prompt_retries, step_error_handling
from aromcp_workflows.importer.scope import ImportScope
from aromcp_workflows.importer.steps_keys import OUR_STEP_TYPES, allowed_keys

AROMCP_MAX_ITERATIONS = 100  # AroMCP's while_loop default (its loop leaves normally there)


def translate_steps(steps: Any, scope: ImportScope, line: int) -> CommentedSeq:
    """A step list, translated; rules may merge a step into the one before it.
    `line` is where the list's key is written (a renamed key keeps its line), so a value
    that is no list (`then_steps: 5`) is refused there rather than at the top of the file."""
    out = CommentedSeq()
    if not isinstance(steps, list):
        scope.notes.refuse(line, "a step list must be a YAML list of steps")
        return out
    for index, step in enumerate(steps):
        if not isinstance(step, CommentedMap):
            scope.notes.refuse(line_of(steps, index, line), "a step must be a mapping with a 'type'")
            continue
        out.extend(translate_step(step, scope, out))
    return out


def translate_step(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    """One step → the steps that replace it (`before`: the steps already emitted here)."""
    line = line_of(step)
    kind = step.get("type")
    if not isinstance(kind, str):
        what = "an 'action:' step (AroMCP's later Temporal dialect)" if "action" in step else "a step without 'type'"
        scope.notes.refuse(line, f"{what} cannot be translated; write it with a 'type' "
                                 f"({', '.join(OUR_STEP_TYPES[:4])}, ...)")
        return []
    rule = RULES.get(kind)
    if rule is None and kind not in OUR_STEP_TYPES:
        scope.notes.refuse(line, f"step type '{kind}' has no counterpart here; "
                                 f"use one of {', '.join(OUR_STEP_TYPES)}")
        return []
    extra: list[CommentedMap] = rule(step, scope, before) if rule else []
    if step.get("type") is None:  # the rule consumed the step (merged or removed)
        if extra or before:
            carry_comments(step, extra[-1] if extra else before[-1])
        return extra
    _drop_context(step, scope)
    _drop_unknown(step, scope)
    return [step, *extra]


def _drop_context(step: CommentedMap, scope: ImportScope) -> None:
    if "execution_context" in step:
        scope.notes.rewrite(line_of(step, "execution_context"), f"execution_context: {step['execution_context']}",
                            "(removed)", "the step type decides who performs it here")
        delete_key(step, "execution_context")


def _drop_unknown(step: CommentedMap, scope: ImportScope) -> None:
    allowed = allowed_keys(str(step.get("type")))
    for key in [k for k in step if k not in allowed]:
        scope.notes.rewrite(line_of(step, key), f"{key}: {step[key]}", "(removed)",
                            f"no '{key}' on {step['type']} here; AroMCP ignores it too" if key in _IGNORED
                            else f"no '{key}' on {step['type']} here")
        delete_key(step, key)


_IGNORED = frozenset({"format", "message_type", "timeout_seconds", "description", "variable_name"})


def _rename_type(step: CommentedMap, scope: ImportScope, new: str, note: str = "") -> None:
    old = step["type"]
    if old == new:
        return
    scope.notes.rewrite(line_of(step, "type"), f"type: {old}", f"type: {new}", note)
    step["type"] = new


def _rename(step: CommentedMap, scope: ImportScope, old: str, new: str, note: str = "") -> None:
    if old in step:
        scope.notes.rewrite(line_of(step, old), old, new, note)
        rename_key(step, old, new)


def _seconds_to_ms(step: CommentedMap, scope: ImportScope, key: str = "timeout") -> None:
    value = step.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = int(value * 1000)
        scope.notes.rewrite(line_of(step, key), f"{key}: {value}", f"timeout: {ms}",
                            "AroMCP counts seconds, this project milliseconds")
        if key != "timeout":
            delete_key(step, key)
        step["timeout"] = ms


def _templates(step: CommentedMap, scope: ImportScope, keys: tuple[str, ...]) -> None:
    """Rename inside the templates of these keys' values (recursively into maps/lists)."""
    for key in keys:
        if key in step:
            step[key] = _walk(step[key], scope, line_of(step, key), key)


def _walk(value: Any, scope: ImportScope, line: int, what: str) -> Any:
    if isinstance(value, str):
        return scope.text(value, line, what)
    if isinstance(value, dict):
        for key in list(value):
            value[key] = _walk(value[key], scope, line_of(value, key, line), what)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            value[i] = _walk(item, scope, line_of(value, i, line), what)
    return value


def _conditional(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _condition(step, scope)
    for old, new in (("then_steps", "then"), ("else_steps", "else")):
        _rename(step, scope, old, new)
        if new in step:
            step[new] = translate_steps(step[new], scope, line_of(step, new))
    return []


def _condition(step: CommentedMap, scope: ImportScope) -> None:
    if isinstance(step.get("condition"), str):
        step["condition"] = scope.expression(step["condition"], line_of(step, "condition"), "the condition")


def _while(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _rename_type(step, scope, "while")
    inner = scope.inner(loop="while")
    condition = step.get("condition")
    after: list[CommentedMap] = []
    if isinstance(condition, str) and "loop.iteration" in condition:
        counted, after = _count_iterations(step, scope)
        _condition(step, inner.inner(extra=Renames(member={("loop", "iteration"): counted})))
    else:
        _condition(step, inner)
    body = translate_steps(step.get("body", []), inner, line_of(step, "body", line_of(step)))
    if after:
        body.insert(0, new_map(id=f"{_safe_id(step)}_count", type="state_update", path=after[0]["path"],
                               operation="increment", value=1))
    step["body"] = body
    if "max_iterations" not in step:
        step["max_iterations"] = AROMCP_MAX_ITERATIONS
        scope.notes.rewrite(line_of(step), "(no max_iterations)", f"max_iterations: {AROMCP_MAX_ITERATIONS}",
                            "AroMCP's default limit, where its loop ends and the workflow goes on; here a "
                            "loop without max_iterations fails at its limit")
    return after


def _safe_id(step: CommentedMap) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in str(step.get("id") or "loop"))


def _count_iterations(step: CommentedMap, scope: ImportScope) -> tuple[str, list[CommentedMap]]:
    """AroMCP's `loop.iteration` in a while condition (finished iterations, from 0) as a
    counter in state: incremented first thing in the body, set back to 0 after the loop.
    Inside a sub-agent task the counter is kept per task."""
    field = f"{_safe_id(step)}_iterations"
    initial: Any
    if scope.task_inputs is not None:
        path, read, initial = f"state.{field}.{{{{ task.task_id }}}}", f"(this.{field}?.[task.task_id] ?? 0)", {}
    else:
        path, read, initial = f"state.{field}", f"(this.{field} ?? 0)", 0
    scope.new_fields.setdefault(field, initial)
    scope.notes.rewrite(line_of(step, "condition"), "loop.iteration (in a while condition)", read,
                        f"AroMCP's condition counts finished iterations from 0; kept in state.{field}, "
                        "counted at the start of each iteration and reset after the loop")
    reset = new_map(id=f"{_safe_id(step)}_reset", type="state_update", path=path, value=0)
    return read, [reset]


def _foreach(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    kept, renamed = set(scope.loop_names), dict(scope.loop_renames)
    for key, ours in (("variable_name", "item"), ("index_name", "index")):
        name = step.get(key)
        if name is None or name == ours:
            continue
        if _loop_name_here(name):
            kept.add(str(name))
            renamed.pop(str(name), None)
            continue
        pop_key(step, key)
        renamed[str(name)] = ours
        scope.notes.rewrite(line_of(step), f"{key}: {name}", ours,
                            f"'{name}' means something else here; it is renamed to `{ours}` in the body")
    inner = scope.inner(loop="foreach", loop_names=frozenset(kept - set(renamed)), loop_renames=renamed)
    if isinstance(step.get("items"), str):
        step["items"] = scope.expression(step["items"], line_of(step, "items"), "foreach items")
    _rename(step, scope, "body", "steps")
    step["steps"] = translate_steps(step.get("steps", []), inner, line_of(step, "steps", line_of(step)))
    return []


def _loop_name_here(name: Any) -> bool:
    """Whether this project's foreach takes `name` as its variable_name/index_name."""
    from aromcp_workflows.definition import LOOP_NAME_RESERVED

    return isinstance(name, str) and name.isidentifier() and name not in LOOP_NAME_RESERVED


def _parallel(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    if isinstance(step.get("items"), str):
        step["items"] = scope.expression(step["items"], line_of(step, "items"), "parallel_foreach items")
    if "max_parallel" in step:
        scope.notes.rewrite(line_of(step, "max_parallel"), f"max_parallel: {step['max_parallel']}",
                            f"max_parallel: {step['max_parallel']}",
                            "AroMCP starts tasks only for the first max_parallel items and drops the rest; "
                            "here every item runs, max_parallel at a time")
    return []


def _mcp_call(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    if _own_state_update(step):
        return _as_state_update(step, scope)
    _rename(step, scope, "tool", "method")
    _rename(step, scope, "parameters", "params")
    _templates(step, scope, ("params", "method"))
    _seconds_to_ms(step, scope)
    step_error_handling(step, scope, ("fail", "continue"))
    return apply_result_writes(step, collect_writes(step, scope, "mcp"), scope)


def _own_state_update(step: CommentedMap) -> bool:
    """An mcp_call of the workflow server's own `workflow_state_update` with an updates list."""
    params = step.get("parameters", step.get("params"))
    return (step.get("tool", step.get("method")) == "workflow_state_update" and isinstance(params, dict)
            and isinstance(params.get("updates"), list) and set(params) <= {"updates", "workflow_id"}
            and not {"state_update", "state_updates", "store_result"} & set(step))


def _as_state_update(step: CommentedMap, scope: ImportScope) -> list[CommentedMap]:
    """The agent would call this server's own tool to write state: the server writes it here."""
    params = pop_key(step, "parameters", None) or pop_key(step, "params")
    pop_key(step, "tool", None)
    pop_key(step, "method", None)
    step["updates"] = params["updates"]
    _rename_type(step, scope, "state_update", "a call of the workflow server's own workflow_state_update: "
                                              "the server applies the updates itself, no agent step")
    return translate_update_step(step, scope)


def _shell(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    if step.get("execution_context") == "client":
        _rename_type(step, scope, "agent_shell_command", "execution_context: client means the agent runs it")
        delete_key(step, "execution_context")
    _rename(step, scope, "working_directory", "working_dir")
    _seconds_to_ms(step, scope)
    if "timeout" not in step and step["type"] == "shell_command":
        step["timeout"] = 30000
        scope.notes.rewrite(line_of(step), "(no timeout)", "timeout: 30000", "AroMCP's default is 30 seconds")
    if isinstance(step.get("command"), str):
        step["command"] = raw_command(step["command"], scope, line_of(step, "command"))
    choices = ("fail", "continue", "retry") if step["type"] == "shell_command" else ("fail", "continue")
    step_error_handling(step, scope, choices)
    kind = "shell" if step["type"] == "shell_command" else "agent_shell"
    return apply_result_writes(step, collect_writes(step, scope, kind), scope)


def _state_update(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    return translate_update_step(step, scope)


def _batch_update(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _rename_type(step, scope, "state_update")
    return _state_update(step, scope, before)


def _user_message(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _templates(step, scope, ("message",))
    writes = collect_writes(step, scope, "message")
    if not writes:
        return []
    update = new_map(id=f"{step.get('id', 'message')}_update", type="state_update",
                     updates=CommentedSeq(new_map(path=p, value=v) for _, p, v, _ in writes))
    scope.notes.rewrite(writes[0][0], "user_message state_update", "a state_update step after the message",
                        "a message has no result here; the update runs right after it, as in AroMCP")
    return [update]


def _user_input(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _templates(step, scope, ("prompt", "instructions", "choices", "default"))
    if "instructions" in step:
        step["prompt"] = f"{step.get('prompt', '')}\n\n{pop_key(step, 'instructions')}"
        scope.notes.rewrite(line_of(step, "prompt"), "instructions", "appended to prompt")
    input_attempts(step, scope)
    _rename(step, scope, "max_retries", "max_attempts")
    validation = step.get("validation")
    if isinstance(validation, dict):
        for key in [k for k in validation if k not in ("pattern", "error_message")]:
            scope.notes.rewrite(line_of(validation, key), f"validation.{key}", "(removed)",
                                "only pattern is checked here")
            delete_key(validation, key)
    return apply_result_writes(step, collect_writes(step, scope, "input"), scope)


def _agent_prompt(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    _templates(step, scope, ("prompt", "context"))
    _rename(step, scope, "expected_response", "response_schema")
    prompt_retries(step, scope)
    return apply_result_writes(step, collect_writes(step, scope, "agent"), scope)


def _agent_response(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    return merge_agent_response(step, scope, before)


def _wait(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    scope.notes.rewrite(line_of(step), f"wait_step {step.get('id', '')}".strip(), "(removed)",
                        "parallel_foreach here already waits until every sub-agent task has finished")
    step["type"] = None
    return []


def _break(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    if scope.loop is None:
        _rename_type(step, scope, "exit", f"a {step['type']} outside any loop: AroMCP's code answers "
                                          "'used outside of loop'; the evident intent is to end the workflow")
    return []


RULES: dict[str, Any] = {
    "conditional": _conditional, "while_loop": _while, "while": _while, "foreach": _foreach,
    "parallel_foreach": _parallel, "mcp_call": _mcp_call, "shell_command": _shell,
    "agent_shell_command": _shell, "state_update": _state_update, "batch_state_update": _batch_update,
    "user_message": _user_message, "user_input": _user_input, "agent_prompt": _agent_prompt,
    "agent_response": _agent_response, "wait_step": _wait, "break": _break, "continue": _break,
}
