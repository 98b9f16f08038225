"""The names in scope where a rule runs, and the rewrites of values that depend on them.

AroMCP resolves a name by where it is written: a workflow input is readable bare at the
top level, `this.x` means the workflow's state, a foreach names its item after
`variable_name`, a sub-agent task reads its inputs as `inputs.x` (and `file_path` is
filled from the item).  `ImportScope` carries what is known at one place of the file, and
turns AroMCP's paths, expressions and magic result names into this project's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from aromcp_workflows.importer.js import (
    Renames,
    has_template,
    map_templates,
    rewrite_expression,
    rewrite_templates,
)
from aromcp_workflows.importer.report import Notes

WRITABLE = ("raw", "state")
# AroMCP's command result is {stdout, stderr, returncode, command}; `{{ result }}` alone is
# the parsed output here, so the whole result is rebuilt with AroMCP's key names.
SHELL_RESULT = "({stdout: result.stdout, stderr: result.stderr, returncode: result.exit_code})"
SHELL_MAGIC = {"stdout": "result.stdout", "stderr": "result.stderr", "returncode": "result.exit_code",
               "exit_code": "result.exit_code", "result": SHELL_RESULT, "output": "result.output"}
LOOP_ITEM = {"loop_item": "item", "loop_index": "index"}
_LOOP_BRACKET = re.compile(r"\[([^\[\]'\"{}]*\bloop\.[^\[\]'\"{}]*)\]")


@dataclass
class ImportScope:
    """What a rule needs to know about the place it is translating."""

    notes: Notes
    inputs: frozenset[str] = frozenset()
    fields: dict[str, str] = field(default_factory=dict)  # state field -> tier
    task_inputs: frozenset[str] | None = None
    loop: str | None = None  # innermost loop kind: "foreach" | "while" | None
    loop_names: frozenset[str] = frozenset()  # enclosing foreach loops' variable_name/index_name, kept
    loop_renames: dict[str, str] = field(default_factory=dict)  # a loop name this project refuses -> item/index
    extra: Renames | None = None  # renames for one value only (a while condition)
    new_fields: dict[str, Any] = field(default_factory=dict)  # state fields rules add (shared)

    def inner(self, **changes: Any) -> ImportScope:
        return replace(self, **changes)

    @property
    def renames(self) -> Renames:
        """AroMCP names → ours, for this place (inner scopes override outer ones)."""
        bare = {name: f"inputs.{name}" for name in self.inputs}  # AroMCP: inputs over state
        member: dict[tuple[str, str], str] = {}
        if self.loop == "foreach":
            bare.update(LOOP_ITEM)
            member.update({("state", k): v for k, v in LOOP_ITEM.items()})
            member.update({("this", k): v for k, v in LOOP_ITEM.items()})
            member.update({("loop", "item"): "item", ("loop", "index"): "index"})
        # AroMCP's `loop` holds every enclosing loop's names (innermost wins)
        member.update({("loop", name): name for name in self.loop_names})
        bare.update(self.loop_renames)
        member.update({("loop", old): new for old, new in self.loop_renames.items()})
        if self.loop is None:
            member[("loop", "*")] = "undefined"
        if self.task_inputs is not None:
            bare.update({name: f"task.{name}" for name in self.task_inputs})
            bare["task_id"] = "task.task_id"
            member.update({("inputs", name): f"task.{name}" for name in self.task_inputs})
        renames = Renames(bare=bare, member=member, root={"global": "this"})
        return renames.merged(self.extra) if self.extra else renames

    def text(self, value: str, line: int, what: str, note: str = "") -> str:
        """A text value with templates: names inside `{{ }}` renamed; the change reported."""
        if not has_template(value):
            return value
        new = rewrite_templates(value, self.renames)
        if new != value:
            self.notes.rewrite(line, value, new, note or f"{what}: names as this project scopes them")
        return new

    def expression(self, value: str, line: int, what: str) -> str:
        """A value AroMCP evaluates as JavaScript even without braces (conditions, items).
        Templates inside it (`state.m[{{ computed.key }}].n < 3`) are filled in first
        there: here the expression reads their values directly."""
        stripped = value.strip()
        if whole_template(stripped):
            return self.text(value, line, what)
        note = f"AroMCP evaluates {what} as JavaScript without braces"
        if has_template(stripped):
            stripped = map_templates(stripped, lambda expr: f"({expr.strip()})").replace("{{(", "(").replace(")}}", ")")
            note += "; the templates inside it are read as values"
        new = rewrite_expression(stripped, self.renames)
        wrapped = "{{ " + new + " }}"
        self.notes.rewrite(line, value, wrapped, note)
        return wrapped

    def evaluated_value(self, value: str, line: int) -> str:
        """A plain state_update value of a shell command that AroMCP evaluates as JavaScript
        (`"{}"`, `"[]"`, `"10"`, `"state.n + 1"`, `"[...state.log, {x: loop.i}]"`): it runs
        a value that looks like an expression (operators, `state.`/`inputs.`/`computed.`/
        `loop.`, a leading `[` or `{`, a number) with only those four names in scope, and
        keeps the text when that fails.  Such a value becomes a template here."""
        text = value.strip()
        if has_template(text) or not _looks_evaluated(text) or not _evaluates(text):
            return value
        new = "{{ " + rewrite_expression(text, self.renames) + " }}"
        self.notes.rewrite(line, value, new, "AroMCP evaluates this value as JavaScript")
        return new

    def transform(self, value: str, line: int, what: str) -> str:
        """A computed transform: AroMCP allows `{{ x }}` inside; ours reads the name itself."""
        if not has_template(value):
            return value
        new = map_templates(value, lambda expr: f"({rewrite_expression(expr.strip(), self.renames)})")
        new = new.replace("{{(", "(").replace(")}}", ")")
        self.notes.rewrite(line, value, new, f"{what}: templates inside a transform become plain JavaScript")
        return new

    def tier_of(self, name: str) -> str:
        return self.fields.get(name, "state")

    def path(self, path: str, line: int, what: str) -> str | None:
        """AroMCP state path → ours (`this.x` → `state.x`/`raw.x`); None when it cannot be.
        A bracket holding a loop expression (`items[loop.idx]`) is evaluated there, as
        AroMCP does: it becomes a bracket template (`items[{{ idx }}]`)."""
        new = rewrite_templates(path, self.renames) if has_template(path) else path
        new = _LOOP_BRACKET.sub(lambda m: "[{{ " + rewrite_expression(m.group(1).strip(), self.renames) + " }}]", new)
        head, _, rest = new.partition(".")
        if head in WRITABLE:
            pass
        elif head in ("this", "global"):
            name = rest.split(".", 1)[0].split("[", 1)[0]
            tier = self.tier_of(name)
            if tier == "computed":
                self.notes.refuse(line, f"{what} writes computed field '{name}' ({path}); computed "
                                        "fields are derived here: write the state field it is computed from")
                return None
            new = f"{tier}.{rest}"
        elif head in ("inputs", "loop", "computed"):
            self.notes.refuse(line, f"{what} writes '{path}'; {head}.* is read-only here: "
                                    "write a state field (state.<name>) instead")
            return None
        else:
            new = f"{self.tier_of(head)}.{new}"
        if new != path:
            self.notes.rewrite(line, path, new, f"{what}: AroMCP's scoped path as a tier path")
        return new

    def source(self, path: str, line: int) -> str | None:
        """A computed field's `from` path → a tier-qualified path."""
        head, _, rest = path.partition(".")
        if head in ("raw", "state", "computed", "inputs"):
            return path
        if head in ("this", "global"):
            name = rest.split(".", 1)[0]
            new = f"{self.fields.get(name, 'state')}.{rest}"
            self.notes.rewrite(line, path, new, "computed from: this.x names the tier that holds x")
            return new
        self.notes.refuse(line, f"computed field reads '{path}', which exists only while a step runs "
                                "(loop variables); compute it in the step's own template instead")
        return None


_EVALUATED_OPS = ("+", "-", "*", "/", "===", "!==", ">", "<", "&&", "||", "state.", "inputs.", "computed.",
                  "loop.", "`", "...")


def _looks_evaluated(text: str) -> bool:
    """AroMCP's test for a state_update value it runs as JavaScript."""
    number = text.lstrip("-").replace(".", "", 1)
    return any(op in text for op in _EVALUATED_OPS) or text.startswith(("[", "{")) or number.isdigit()


def _evaluates(text: str) -> bool:
    """Whether AroMCP's evaluation of `text` succeeds: it parses as one expression and reads
    no name but `state`, `inputs`, `computed`, `loop` and JavaScript's own."""
    from aromcp_workflows.expressions import ExpressionError, reads_of

    try:
        free = reads_of(f"({text})").likely_free
    except ExpressionError:
        return False
    return set(free) <= {"state", "inputs", "computed", "loop"}


def whole_template(text: str) -> bool:
    """`{{ expr }}` and nothing else."""
    from aromcp_workflows.expressions import LexError, find_template_end

    if not (text.startswith("{{") and text.endswith("}}")):
        return False
    try:
        return find_template_end(text, 2) == len(text) - 2
    except LexError:
        return False


def magic_value(value: Any, kind: str, line: int, notes: Notes) -> Any:
    """AroMCP's bare result names (`stdout`, `returncode`, `result.x`) → `{{ result... }}`."""
    if not isinstance(value, str) or has_template(value):
        return value
    word = value.strip()
    target = None
    if kind == "shell" and word in SHELL_MAGIC:
        target = SHELL_MAGIC[word]
    elif kind == "agent_shell" and word in ("stdout", "output", "result"):
        target = "result"
    elif kind not in ("shell", "agent_shell") and word.split(".", 1)[0] in ("result", "response"):
        target = "result" + word[len(word.split(".", 1)[0]):]
    if target is None:
        return value
    new = "{{ " + target + " }}"
    note = "AroMCP reads this name from the step's result"
    if word == "returncode":
        note = "AroMCP's returncode is exit_code here"
    elif kind == "shell" and word == "result":
        note = "AroMCP's whole command result, with its key names (here `{{ result }}` alone is the output)"
    elif kind == "shell" and word == "output":
        note = "the command's output (stdout, parsed by output_format)"
    notes.rewrite(line, value, new, note)
    return new
