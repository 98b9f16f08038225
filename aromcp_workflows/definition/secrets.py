"""Which fields of a workflow hold secrets, and where the workflow shows one.

A field is secret *whole* (masked under its key whatever its type, and its text wherever
it appears) when the workflow declares it so — `secret: true` on an input, a task input or
a `state_schema` field, or its name under the top-level `secrets:` list — and when it is a
computed field that is named like a secret or reads one: through `from`, a name its
transform reads, or another such field (the state store's own dependency graph says so).
A string field is secret *by its name* (`safety.names.is_sensitive`) unless the workflow
declares it (or defaults it to) a number or a boolean.

Validation uses the same answers: a `secrets:` entry that names no field is an error (a
typo there would leave a secret in clear), and a secret read by a `user_message` (shown
to the user as `***`) or by an `agent_prompt`/`user_input` prompt (sent to the agent's model
in clear: a step's definition is never masked) is a warning.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aromcp_workflows.definition.computed import computed_specs
from aromcp_workflows.definition.errors import did_you_mean
from aromcp_workflows.definition.scopes import Site
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import Finding, NodePath
from aromcp_workflows.safety import is_sensitive

TIERS = ("inputs", "raw", "state", "computed")
NOT_TEXT = frozenset({"number", "integer", "boolean"})


@dataclass(frozen=True)
class SecretFields:
    """The fields of one workflow that are secret whole, by tier."""

    inputs: frozenset[str] = frozenset()
    raw: frozenset[str] = frozenset()
    state: frozenset[str] = frozenset()
    computed: frozenset[str] = frozenset()
    task_inputs: frozenset[str] = frozenset()  # of every sub-agent task

    def tier(self, tier: str) -> frozenset[str]:
        return frozenset(getattr(self, tier, frozenset()))

    @property
    def names(self) -> frozenset[str]:
        """Every such field's name: the keys a masker masks whole wherever they appear."""
        return self.inputs | self.raw | self.state | self.computed | self.task_inputs


def secret_fields(definition: WorkflowDefinition) -> SecretFields:
    """The declared secrets of `definition`, and the computed fields they (or named secrets) feed."""
    declared = declared_secrets(definition)
    tasks = frozenset(name for task in definition.sub_agent_tasks.values()
                      for name, spec in task.inputs.items() if spec.secret)
    return SecretFields(inputs=frozenset(declared["inputs"]), raw=frozenset(declared["raw"]),
                        state=frozenset(declared["state"]), computed=_computed_secrets(definition, declared),
                        task_inputs=tasks)


def declared_secrets(definition: WorkflowDefinition) -> dict[str, set[str]]:
    """Tier → names declared secret by a `secret: true` flag or the `secrets:` list."""
    schema = definition.state_schema
    declared = {"inputs": {name for name, spec in definition.inputs.items() if spec.secret},
                "raw": {name for name, spec in schema.raw.items() if _flagged(spec)},
                "state": {name for name, spec in schema.state.items() if _flagged(spec)},
                "computed": {name for name, spec in schema.computed.items() if spec.secret}}
    for entry in definition.secrets:
        tier, _, rest = entry.partition(".")
        if tier in declared and rest:
            declared[tier].add(rest.split(".")[0].split("[")[0])
        else:  # a bare name: that field in every tier (validation refuses a name no tier has)
            for names in declared.values():
                names.add(entry)
    return declared


def _flagged(spec: Any) -> bool:
    return isinstance(spec, dict) and spec.get("secret") is True


def named_secret(definition: WorkflowDefinition, tier: str, name: str) -> bool:
    """Whether a field is a secret by its name: a sensitive name, and not declared or defaulted
    as a number or a boolean (the name decides for text only)."""
    if not is_sensitive(name):
        return False
    if tier == "inputs":
        spec = definition.inputs.get(name)
        return spec is None or spec.type not in NOT_TEXT
    if tier in ("raw", "state"):
        declared = getattr(definition.state_schema, tier).get(name)
        kind = declared.get("type") if isinstance(declared, dict) else declared
        default = getattr(definition.default_state, tier).get(name)
        return kind not in NOT_TEXT and not isinstance(default, (bool, int, float))
    return True


def _computed_secrets(definition: WorkflowDefinition, declared: dict[str, set[str]]) -> frozenset[str]:
    computed = definition.state_schema.computed
    seeds = declared["computed"] | {name for name in computed if is_sensitive(name)}
    if not computed:
        return frozenset(seeds)
    from aromcp_workflows.state import StateError, shared_graph

    try:
        graph = shared_graph(computed_specs(definition))
    except StateError:  # a cycle or a bad transform: validation reports it, no store is built from it
        return frozenset(seeds)

    def is_secret(path: tuple[str, ...]) -> bool:
        tier, rest = path[0], path[1:]
        if tier not in declared or tier == "computed":
            return False
        if not rest:  # the whole tier is read
            return bool(declared[tier]) or any(named_secret(definition, tier, name)
                                               for name in _tier_names(definition, tier))
        return (rest[0] in declared[tier] or named_secret(definition, tier, rest[0])
                or any(is_sensitive(part) for part in rest[1:]))

    return graph.reaching(is_secret, seeds)


def _tier_names(definition: WorkflowDefinition, tier: str) -> set[str]:
    if tier == "inputs":
        return set(definition.inputs)
    return set(getattr(definition.state_schema, tier)) | set(getattr(definition.default_state, tier))


# -- validation ---------------------------------------------------------------------------
SHOWN_BY = {"user_message": ("message",), "agent_prompt": ("prompt", "context"),
            "apply_hints": ("prompt", "file", "hints", "context"), "user_input": ("prompt",)}


def secret_problems(definition: WorkflowDefinition, data: dict[str, Any], sites: Iterable[Site]) -> list[Finding]:
    """Entries of `secrets:` that name nothing (errors), and secrets a message or a prompt reads (warnings)."""
    findings: list[Finding] = [(("secrets", index), message, "error")
                               for index, message in _unknown_entries(definition, data)]
    fields = secret_fields(definition)
    for site in sites:
        shown = _shown_by(data, site.path)
        if shown is None or site.kind != "template":
            continue
        for secret in secret_reads(site.source, definition, fields, site.scope.task_inputs):
            findings.append((site.path, _shown_message(shown, secret), "warning"))
    return findings


def _unknown_entries(definition: WorkflowDefinition, data: dict[str, Any]) -> Iterable[tuple[int, str]]:
    from aromcp_workflows.definition.references import declared_names

    fields = declared_names(data)  # raw and state names declared, defaulted or written anywhere
    known = {"inputs": set(definition.inputs), "computed": set(definition.state_schema.computed),
             "raw": fields, "state": fields}
    every = set().union(*known.values())
    for index, entry in enumerate(definition.secrets):
        tier, _, rest = entry.partition(".")
        if tier in known and rest and ("." in rest or "[" in rest):
            yield index, (f"secrets lists {entry!r}, a path inside a field; list the whole field "
                          f"'{tier}.{rest.split('.')[0].split('[')[0]}' (everything in it is then secret)")
        elif tier in known and rest and rest not in known[tier]:
            yield index, (f"secrets lists {entry!r}, but the workflow declares no {tier} field {rest!r}"
                          f"{did_you_mean(entry, [f'{t}.{n}' for t, names in known.items() for n in names])}; "
                          "a secret that names nothing masks nothing: fix the name")
        elif not (tier in known and rest) and entry not in every:
            yield index, (f"secrets lists {entry!r}, which no input or state field is called"
                          f"{did_you_mean(entry, every)}; write inputs.<name>, raw.<name>, state.<name> or "
                          "computed.<name> for a declared field")


def _shown_by(data: dict[str, Any], path: NodePath) -> str | None:
    """The step type when `path` lies in a part of a step that shows its text to a person or a model."""
    node: Any = data
    shown = None
    for part in path:
        if shown is None and isinstance(node, dict) and isinstance(node.get("type"), str):
            kind = node["type"]
            shown = kind if kind in SHOWN_BY and part in SHOWN_BY[kind] else None
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return shown


def secret_reads(source: str, definition: WorkflowDefinition, fields: SecretFields,
                 task_inputs: frozenset[str] = frozenset()) -> list[str]:
    """The secrets a template reads, tier-qualified (`inputs.api_token`, `computed.tail`);
    `task_inputs`: the inputs of the sub-agent task it belongs to (read by their bare names)."""
    from aromcp_workflows.expressions import ExpressionError, parse_template, reads_of

    try:
        parts = parse_template(source).expressions
    except ExpressionError:
        return []
    found: list[str] = []
    for part in parts:
        try:
            reads = reads_of(part.source)
        except ExpressionError:
            continue
        for name in sorted(reads.likely_free):
            if name in task_inputs and name in fields.task_inputs:
                hits = [f"task.{name}"]
            else:
                hits = _read_secrets(name, reads.keys_of(name), definition, fields)
            found += [hit for hit in hits if hit not in found]
    return found


def _read_secrets(name: str, keys: frozenset[str] | None, definition: WorkflowDefinition,
                  fields: SecretFields) -> list[str]:
    if name in TIERS:
        names = keys if keys is not None else _tier_names(definition, name) | fields.tier(name)
        return [f"{name}.{key}" for key in sorted(names)
                if key in fields.tier(name) or named_secret(definition, name, key)]
    if name == "task":
        return [f"task.{key}" for key in sorted(keys or fields.task_inputs) if key in fields.task_inputs]
    for tier in ("computed", "raw", "state"):  # the flattened view: computed hides raw hides state
        if name in fields.tier(tier) or (tier != "computed" and named_secret(definition, tier, name)
                                         and name in _tier_names(definition, tier)):
            return [f"{tier}.{name}"]
    return []


def _shown_message(kind: str, secret: str) -> str:
    if kind == "user_message":
        return (f"this user_message shows the secret {secret}; replies mask it, so the user reads *** "
                "in its place: leave it out of the message")
    return (f"this {kind} puts the secret {secret} in the step handed to the agent, whose definition is "
            "never masked: the agent's model and its logs receive it in clear; give the agent only what it "
            "needs (a shell_command step can use the secret on the server)")
