"""Where a step's result goes: AroMCP's several forms → this project's one `state_update`.

AroMCP writes a result through `state_update`, a plural `state_updates` list,
`store_result`, or (for `agent_response`) `store_response`, and names parts of it with
bare words (`stdout`, `returncode`, `response.fixes`).  Here a step has one
`state_update`; when AroMCP wrote several places, the whole result is kept at
`state.<step id>_result` and a `state_update` step right after copies the parts.
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from aromcp_workflows.importer.js import Renames, add_raw_filter, map_templates, rewrite_expression, rewrite_templates
from aromcp_workflows.importer.reading import line_of, new_map, pop_key
from aromcp_workflows.importer.report import shown
from aromcp_workflows.importer.rules_errors import response_error_handling
from aromcp_workflows.importer.scope import ImportScope, magic_value, whole_template

ResultWrite = tuple[int, str, Any, str]  # line, our path, value (None = the result), operation


def collect_writes(step: CommentedMap, scope: ImportScope, kind: str) -> list[ResultWrite]:
    """Every place AroMCP would write this step's result, translated (keys removed)."""
    writes: list[ResultWrite] = []
    single = pop_key(step, "state_update", None)
    specs: list[tuple[int, Any]] = []
    if isinstance(single, dict):
        specs.append((line_of(single), single))
    plural = pop_key(step, "state_updates", None)
    if isinstance(plural, list):
        line = line_of(plural)
        scope.notes.rewrite(line, "state_updates", "state_update", "one result, several places")
        specs += [(line_of(plural, i, line), spec) for i, spec in enumerate(plural)]
    for key in ("store_result", "store_response"):
        if isinstance(step.get(key), str):
            specs.append((line_of(step, key), {"path": pop_key(step, key), "value": None, "_key": key}))
    for line, spec in specs:
        path = scope.path(str(spec.get("path", "")), line, "result path")
        if path is None:
            continue
        value = spec.get("value")
        if spec.get("_key"):
            scope.notes.rewrite(line, f"{spec['_key']}: {spec['path']}", f"state_update: {{path: {path}}}")
        value_line = line_of(spec, "value", line) if "value" in spec else line
        magic = magic_value(value, kind, value_line, scope.notes)
        if kind == "shell" and isinstance(value, str) and magic == value:
            magic = scope.evaluated_value(value, value_line)  # AroMCP runs a server step's values
        value = magic
        if isinstance(value, str):
            value = _result_scope(scope, kind).text(value, value_line, "result value",
                                                    "AroMCP's names for the result inside templates")
        writes.append((line, path, value, str(spec.get("operation", "set"))))
    return writes


# The names AroMCP gives a step's result inside `{{ }}` of a state_update value.
RESULT_NAMES = {
    "shell": {"stdout": "result.stdout", "stderr": "result.stderr", "returncode": "result.exit_code",
              "output": "result.output"},
    "agent_shell": {"output": "result", "stdout": "result"},
    "input": {"input": "result"},
    "agent": {"response": "result"},
    "mcp": {"response": "result"},
}


def _result_scope(scope: ImportScope, kind: str) -> ImportScope:
    names = {k: v for k, v in RESULT_NAMES.get(kind, {}).items() if k not in scope.fields}
    return scope.inner(extra=Renames(bare=names)) if names else scope


def apply_result_writes(step: CommentedMap, writes: list[ResultWrite], scope: ImportScope) -> list[CommentedMap]:
    """Put the writes on `step`; return the extra `state_update` step needed for several."""
    if not writes:
        return []
    if len(writes) == 1:
        step["state_update"] = _spec(writes[0])
        return []
    step_id = str(step.get("id") or "step")
    keep = f"state.{step_id}_result"
    whole = _WHOLE_SHELL_RESULT if step.get("type") == "shell_command" else "{{ result }}"
    step["state_update"] = new_map(path=keep, value=whole)
    renames = Renames(bare={"result": keep})
    updates = CommentedSeq()
    for line, path, value, operation in writes:
        if value is None:
            value = "{{ " + keep + (".output" if step.get("type") == "shell_command" else "") + " }}"
        elif isinstance(value, str):
            value = rewrite_templates(value, renames)
        updates.append(_spec((line, path, value, operation)))
    scope.notes.rewrite(writes[0][0], f"{len(writes)} result writes", f"state_update: {keep} + step {step_id}_store",
                        "a step keeps one result here; the copies are made by the next step")
    return [new_map(id=f"{step_id}_store", type="state_update", updates=updates)]


# `{{ result }}` alone is a command's parsed output; the copies need every part of it.
_WHOLE_SHELL_RESULT = ("{{ ({stdout: result.stdout, stderr: result.stderr, exit_code: result.exit_code, "
                       "output: result.output}) }}")


def _spec(write: ResultWrite) -> CommentedMap:
    _, path, value, operation = write
    spec = new_map(path=path)
    if value is not None:
        spec["value"] = value
    if operation != "set":
        spec["operation"] = operation
    return spec


def raw_command(command: str, scope: ImportScope, line: int) -> str:
    """A command whose templates AroMCP inserts unquoted: renamed, and marked `| raw`."""
    new = map_templates(command, lambda expr: add_raw_filter(rewrite_expression(expr, scope.renames)))
    if new != command:
        scope.notes.rewrite(line, command, new, "AroMCP inserts values into commands unquoted; `| raw` keeps "
                                                "that (drop it to have the value shell-quoted)")
    return new


def translate_update_step(step: CommentedMap, scope: ImportScope) -> list[CommentedMap]:
    """A `state_update` step: one path or a list (AroMCP's `state_updates`/`updates`)."""
    listed = pop_key(step, "state_updates", None)
    if listed is not None:
        scope.notes.rewrite(line_of(step), "state_updates", "updates", "a state_update step's list is `updates` here")
    listed = listed if listed is not None else pop_key(step, "updates", None)
    if listed is None:
        spec = _update(step, scope, line_of(step))
        if spec is None:
            return []
        for key in ("path", "value", "operation"):
            pop_key(step, key, None)
        step.update(spec)
        return []
    updates = CommentedSeq()
    for i, item in enumerate(listed if isinstance(listed, list) else []):
        spec = _update(item, scope, line_of(listed, i, line_of(step))) if isinstance(item, dict) else None
        if spec is not None:
            updates.append(spec)
    step["updates"] = updates
    return []


def _update(item: Any, scope: ImportScope, line: int) -> CommentedMap | None:
    path = scope.path(str(item.get("path", "")), line, "state_update path")
    if path is None:
        return None
    value = item.get("value")
    if isinstance(value, str):
        value = scope.text(value, line, "state_update value")
    operation = str(item.get("operation", "set"))
    if operation == "decrement":
        value = _decrement(item, value, path, scope, line)
        if value is _NOT_A_NUMBER:
            return None
    elif operation == "multiply":
        scope.notes.refuse(line, f"operation 'multiply' on {path} has no counterpart here; "
                                 f"write it as a set with value \"{{{{ this.<field> * n }}}}\"")
        return None
    spec = new_map(path=path)
    if "value" in item or operation not in ("increment", "delete"):
        spec["value"] = value
    if operation != "set":
        spec["operation"] = "increment" if operation == "decrement" else operation
    return spec


def _decrement(item: Any, value: Any, path: str, scope: ImportScope, line: int) -> Any:
    """The value that makes AroMCP's decrement an increment here (`-1` when none is given:
    AroMCP decrements by 1), or `_NOT_A_NUMBER` after refusing a value that is no number."""
    negated = _negate(value)
    if negated is _NOT_A_NUMBER:
        scope.notes.refuse(line_of(item, "value", line),
                           f"operation 'decrement' on {path} by {shown(item.get('value'))}, which is not a number "
                           "(AroMCP's subtraction fails on it); write a number (value: 1) or one template "
                           "(value: \"{{ this.amount }}\")")
    else:
        scope.notes.rewrite(line_of(item, "operation", line), "operation: decrement",
                            f"operation: increment, value: {negated}")
    return negated


_NOT_A_NUMBER = object()


def _negate(value: Any) -> Any:
    """The increment that is AroMCP's decrement by `value` (default 1): a number negated,
    or one template `{{ x }}` as `{{ -(x) }}`.  Anything else (`"abc"`, `"{{ n }} items"`,
    a list) is `_NOT_A_NUMBER`: increment it and the sign would silently be lost."""
    if value is None:
        return -1
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return -value
    if isinstance(value, str) and whole_template(value.strip()):
        return map_templates(value, lambda expr: f" -({expr.strip()}) ")
    return _NOT_A_NUMBER


def merge_agent_response(step: CommentedMap, scope: ImportScope, before: CommentedSeq) -> list[CommentedMap]:
    """AroMCP's `agent_response` (the agent's answer to the prompt before it) → that prompt's result."""
    line = line_of(step)
    writes = collect_writes(step, scope, "agent")
    prompt = before[-1] if before and before[-1].get("type") == "agent_prompt" \
        and "state_update" not in before[-1] else None
    if prompt is None:
        prompt = new_map(id=step.get("id", "agent_response"), type="agent_prompt",
                         prompt=f"Report your response for step {step.get('id', '')} as JSON.")
        scope.notes.rewrite(line, "agent_response", "agent_prompt",
                            "no agent_prompt before it: the agent is asked for the response itself")
        extra_first: list[CommentedMap] = [prompt]
    else:
        scope.notes.rewrite(line, f"agent_response {step.get('id', '')}".strip(),
                            f"result of agent_prompt {prompt.get('id', '')}".strip(),
                            "the agent's answer to the prompt is that prompt's result here")
        extra_first = []
    if isinstance(step.get("response_schema"), dict):
        prompt["response_schema"] = step["response_schema"]
    response_error_handling(step, prompt, scope)
    step["type"] = None
    return extra_first + apply_result_writes(prompt, writes, scope)
