"""Scripted answers for the headless runner: the `--answers` YAML file and its lookup.

The file maps a key to an answer.  A key is a delivered step id (`fix_batch_0.fix_files.get_hints#2`),
the id without its `#n` suffix, the id without its task prefix, the id's last dotted
component (`apply`), or, for `mcp_call` steps, the MCP method name (`hints_for_file`).
The most specific key present wins.  An answer is one of:

- a plain value (scalar or mapping): the result, the same every time;
- `{result: X}`: X is the result (use this for a literal list or a mapping that has the
  keys `result`, `error`, `when` or `when_params`);
- `{error: "why"}`: the step is reported as failed with that error;
- a list of answers, consumed one per use (the first use gets the first item, ...);
- a list whose items carry `when_params: {...}` (mcp_call params) or `when: {path: value}`
  (dotted paths into the step's `definition`): the first item that matches is used, every
  time; an item without a condition matches any step.

Knows nothing about MCP: it turns a delivered atomic step into a `ScriptedAnswer` or None.
"""

from __future__ import annotations

import datetime
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESERVED = frozenset({"result", "error", "when", "when_params"})
_SUFFIX = re.compile(r"#\d+$")
_MISSING = object()


class AnswersFileError(Exception):
    """The answers file cannot be read or has a malformed entry (a usage error)."""


@dataclass(frozen=True)
class ScriptedAnswer:
    """What to report for a step: `status` success with `result`, or failed with `error`."""

    key: str
    status: str = "success"
    result: Any = None
    error: str | None = None


def shell_answer(exit_code: int, stdout: str, stderr: str) -> ScriptedAnswer:
    """What an agent reports for an `agent_shell_command` it ran: its output, or, when the
    command failed, the step failed with the exit code and the end of its error output."""
    if exit_code != 0:
        tail = stderr.strip()[-2000:] or "(no error output)"
        return ScriptedAnswer("shell", "failed", stdout, f"exit code {exit_code}: {tail}")
    return ScriptedAnswer("shell", "success", stdout)


@dataclass
class _Reply:
    result: Any = None
    error: str | None = None


@dataclass
class _Case:
    when: dict[str, Any]
    when_params: dict[str, Any]
    reply: _Reply


class _Source:
    """One key's answers: a constant, a sequence consumed in order, or a table of cases."""

    def __init__(self, key: str, raw: Any):
        self.key = key
        self.constant: _Reply | None = None
        self.sequence: list[_Reply] | None = None
        self.cases: list[_Case] | None = None
        self.used = 0
        if isinstance(raw, list) and any(_is_case(item) for item in raw):
            self.cases = [_case(key, index, item) for index, item in enumerate(raw)]
        elif isinstance(raw, list):
            self.sequence = [_reply(f"{key}[{index}]", item) for index, item in enumerate(raw)]
        elif _is_case(raw):
            self.cases = [_case(key, 0, raw)]
        else:
            self.constant = _reply(key, raw)

    def take(self, step: dict[str, Any]) -> _Reply | None:
        if self.constant is not None:
            return self.constant
        if self.sequence is not None:
            if self.used >= len(self.sequence):
                return None
            self.used += 1
            return self.sequence[self.used - 1]
        for case in self.cases or []:
            if _matches(case, step):
                return case.reply
        return None

    def exhausted(self) -> bool:
        return self.sequence is not None and self.used >= len(self.sequence)


def _is_case(item: Any) -> bool:
    return isinstance(item, dict) and ("when" in item or "when_params" in item) and set(item) <= RESERVED


def _is_wrapper(item: Any) -> bool:
    return isinstance(item, dict) and bool(item) and set(item) <= RESERVED and ("result" in item or "error" in item)


def _reply(where: str, item: Any) -> _Reply:
    if not _is_wrapper(item):
        return _Reply(result=item)
    if "when" in item or "when_params" in item:
        raise AnswersFileError(f"answers entry {where}: `when`/`when_params` belong on the items of a list "
                               "of cases; a list of cases is never consumed")
    if "error" in item:
        if "result" in item:
            raise AnswersFileError(f"answers entry {where}: give either `result` or `error`, not both")
        return _Reply(error=str(item["error"]))
    return _Reply(result=item["result"])


def _case(key: str, index: int, item: Any) -> _Case:
    where = f"{key}[{index}]"
    if not isinstance(item, dict) or not ("when" in item or "when_params" in item):
        return _Case({}, {}, _reply(where, item))
    when, when_params = item.get("when") or {}, item.get("when_params") or {}
    if not isinstance(when, dict) or not isinstance(when_params, dict):
        raise AnswersFileError(f"answers entry {where}: `when` and `when_params` must be mappings "
                               "(e.g. when_params: {file_path: src/a.ts})")
    if "result" not in item and "error" not in item:
        raise AnswersFileError(f"answers entry {where}: a case needs `result` (or `error`) next to its condition")
    rest = {k: v for k, v in item.items() if k in ("result", "error")}
    return _Case(when, when_params, _reply(where, rest))


def _matches(case: _Case, step: dict[str, Any]) -> bool:
    definition = step.get("definition") or {}
    given = definition.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    for name, expected in case.when_params.items():
        if not _equal(params.get(name, _MISSING), expected):
            return False
    return all(_equal(_dig(definition, str(path)), expected) for path, expected in case.when.items())


def _dig(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _equal(actual: Any, expected: Any) -> bool:
    """Equality; a string with `*`, `?` or `[` is a glob pattern over a string value."""
    if actual is _MISSING:
        return False
    if isinstance(expected, str) and isinstance(actual, str) and any(c in expected for c in "*?["):
        return fnmatch.fnmatchcase(actual, expected)
    return bool(actual == expected)


def _plain(node: Any) -> Any:
    """YAML data as JSON-ready values: plain dicts and lists, dates as ISO text
    (`release: 2024-06-01` is the string an agent would have reported)."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, (datetime.date, datetime.time)):
        return node.isoformat()
    return node


def answer_keys(step: dict[str, Any], task_id: str | None) -> list[str]:
    """The keys that can answer `step`, most specific first."""
    step_id = str(step.get("id", ""))
    bare = _SUFFIX.sub("", step_id)
    keys = [step_id, bare]
    if task_id and bare.startswith(f"{task_id}."):
        local = step_id[len(task_id) + 1:]
        keys += [local, _SUFFIX.sub("", local)]
    keys.append(bare.rsplit(".", 1)[-1])
    if step.get("type") == "mcp_call":
        method = (step.get("definition") or {}).get("method")
        if isinstance(method, str):
            keys.append(method)
    unique: list[str] = []
    for key in keys:
        if key and key not in unique:
            unique.append(key)
    return unique


class AnswerBook:
    """Answers by key; `take` consumes from sequences, so one book serves one run."""

    def __init__(self, data: dict[str, Any] | None = None, origin: str = "answers"):
        data = _plain(data or {})
        if not isinstance(data, dict):
            raise AnswersFileError(f"{origin}: the answers file must be a mapping of step ids or MCP method "
                                   f"names to answers, not a {type(data).__name__}")
        self.origin = origin
        self.sources = {str(key): _Source(str(key), value) for key, value in data.items()}

    @classmethod
    def load(cls, path: str | Path) -> AnswerBook:
        """Read an answers file as the workflow loader reads a workflow (the test files'
        `answers:` are read so too): its bounds, and a mistake in it said once, in one line,
        as `FILE:LINE:COLUMN: message` — bytes that are not UTF-8, a YAML error, a duplicate key."""
        from aromcp_workflows.definition import DefinitionError, parse_yaml

        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise AnswersFileError(f"cannot read answers file {path}: {exc.strerror or exc}") from None
        try:
            documents = parse_yaml(data, str(path))
        except DefinitionError as exc:
            raise AnswersFileError(str(exc.problems[0]) if exc.problems else str(exc)) from None
        if len(documents) > 1:
            raise AnswersFileError(f"{path}: the answers file holds {len(documents)} YAML documents; give one "
                                   "mapping of step ids or MCP method names to answers (no `---` between them)")
        content = documents[0].data if documents else None
        return cls(content if content is not None else {}, origin=str(path))

    def take(self, step: dict[str, Any], task_id: str | None) -> ScriptedAnswer | None:
        """The answer for a delivered step, or None when the file has none (left)."""
        for key in answer_keys(step, task_id):
            source = self.sources.get(key)
            if source is None:
                continue
            reply = source.take(step)
            if reply is None:
                continue
            if reply.error is not None:
                return ScriptedAnswer(key, "failed", None, reply.error)
            return ScriptedAnswer(key, "success", reply.result)
        return None

    def missing_hint(self, step: dict[str, Any], task_id: str | None) -> str:
        """Which key to add (and why none matched), for the error a headless run prints."""
        keys = answer_keys(step, task_id)
        used_up = [k for k in keys if k in self.sources and self.sources[k].exhausted()]
        suggested = (step.get("definition") or {}).get("method") if step.get("type") == "mcp_call" else None
        suggested = suggested or keys[-1]
        text = f"add `{suggested}:` (or the exact step id `{step.get('id')}:`) to the answers file"
        if used_up:
            count = len(self.sources[used_up[0]].sequence or [])
            text = (f"the {count} answer(s) listed under `{used_up[0]}` were all used; give one more "
                    f"item there, or {text}")
        return text
