"""Names an expression reads that do not exist where it runs.

A template that reads a misspelt name renders as nothing, silently; validation must say
so.  But the seed design's workflows read state nobody declared (an agent may set
`raw.anything` at any time, and undeclared reads are `undefined`), so this check is
precise about what it calls an error:

- error: a scope variable used where it does not exist (`item` outside a loop, `result`
  outside a `state_update.value`, `task` or `context` outside a sub-agent task), and a
  name close to one that exists here (`conut` → `count`);
- warning: any other name that nothing declares or writes — it may be set by an agent.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aromcp_workflows.definition.errors import did_you_mean
from aromcp_workflows.definition.scopes import Site, part_label
from aromcp_workflows.definition.yaml_source import Finding

ALWAYS = frozenset({"inputs", "raw", "state", "computed", "this", "workflow_id"})
WHERE_VARIABLE_EXISTS = {
    "item": "only inside a foreach or a sub-agent task",
    "index": "only inside a foreach or a sub-agent task",
    "loop": "only inside the body of a while or foreach",
    "task": "only inside a sub-agent task's steps (task.<input>, task.task_id)",
    "context": "only inside a sub-agent task's steps (what the sub-agent was given: its inputs, "
               "task_id, workflow_id, item, index)",
    "result": "only in the state_update.value of a step that produces a result",
    "error": "only in error_handling.on_failure, cleanup_on_error and error_state_update.value",
}
TYPO_CUTOFF = 0.8  # `conut` → `count` (0.8); `summary` is not a typo of `summary_stats` (0.7)


def declared_names(data: dict[str, Any]) -> set[str]:
    """Top-level state names the workflow declares, computes or writes anywhere."""
    schema, defaults = data.get("state_schema") or {}, data.get("default_state") or {}
    names: set[str] = set()
    for tier in ("raw", "state"):
        names |= set(schema.get(tier) or {}) | set(defaults.get(tier) or {})
    names |= set(schema.get("computed") or {})
    for path in _written_paths(data):
        match = re.match(r"(?:raw|state)\.([A-Za-z_$][\w$]*)", path)
        if match:
            names.add(match.group(1))
    return names


def _written_paths(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") == "include_workflow" and "state_update" not in node and node.get("id"):
            yield f"raw.{node['id']}"
        for key, value in node.items():
            if key in ("path", "state_path", "error_state_path") and isinstance(value, str):
                yield value
            else:
                yield from _written_paths(value)
    elif isinstance(node, list):
        for item in node:
            yield from _written_paths(item)


def reference_problems(sites: Iterable[Site], known: set[str]) -> list[Finding]:
    """Every read of a name that does not exist where it is read, once per place."""
    findings: list[Finding] = []
    for site in sites:
        seen: set[str] = set()
        for label, source, extra in _reads(site):
            for name in sorted(_free_names(source) - seen):
                seen.add(name)
                found = _judge(name, label, site, known | extra)
                if found is not None:
                    findings.append((site.path, *found))
    return findings


def names_read(site: Site) -> set[str]:
    """The free names a site's expressions read, less those its own evaluation defines
    (`input` in a transform) and those every place has (`inputs`, `raw`, `this`, ...)."""
    return {name for _label, source, extra in _reads(site) for name in _free_names(source) - extra} - ALWAYS


def written_paths(node: Any) -> list[str]:
    """The state paths a step (or any part of a workflow, as dumped) writes."""
    return list(_written_paths(node))


def _reads(site: Site) -> list[tuple[str, str, frozenset[str]]]:
    """(label, JS source, names the evaluation itself adds) of each expression of a site."""
    if site.kind in ("transform", "validate"):
        extra = frozenset({"input", "output"} if site.kind == "validate" else {"input"})
        return [(f"{site.kind} of computed field {site.path[-2]!r}", site.source, extra)]
    if site.kind == "expression":
        return [(f"{site.path[-1]} {site.source.strip()!r}", site.source, frozenset())]
    from aromcp_workflows.expressions import ExpressionError, parse_template

    try:
        template = parse_template(site.source)
    except ExpressionError:
        return []
    out: list[tuple[str, str, frozenset[str]]] = []
    for part in template.expressions:
        label = part_label(part)
        for source in (part.source, *(f.arg for f in part.filters if f.arg is not None)):
            if "{{" not in source:  # a nested '{{' is reported by the template checks
                out.append((label, source, frozenset()))
    return out


def _free_names(source: str) -> set[str]:
    from aromcp_workflows.expressions import ExpressionError, reads_of

    try:
        return set(reads_of(source).likely_free) - {"this"}
    except ExpressionError:
        return set()  # a syntax problem, reported by the syntax checks


def _judge(name: str, label: str, site: Site, known: set[str]) -> tuple[str, str] | None:
    scope = site.scope
    if name in known or name in scope.variables or name in ALWAYS:
        return None
    if name in WHERE_VARIABLE_EXISTS:
        return (f"{label} reads {name!r}, which exists {WHERE_VARIABLE_EXISTS[name]}; "
                f"here ({scope.where}) it is undefined", "error")
    candidates = sorted(known | scope.variables | {"inputs", "workflow_id"})
    typo = difflib.get_close_matches(name, candidates, n=1, cutoff=TYPO_CUTOFF)
    if typo:
        return f"{label} reads {name!r}, which is not defined here (did you mean {typo[0]!r}?)", "error"
    return (f"{label} reads {name!r}, which no default_state, state_schema, computed field "
            "or step declares or writes: it is undefined unless an agent sets it (declare "
            f"it, for example as default_state.raw.{name}){did_you_mean(name, candidates)}",
            "warning")
