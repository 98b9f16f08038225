"""A Mermaid flowchart of a workflow: steps in order, conditionals as diamonds, loops as
hexagons with dotted back edges, and `parallel_foreach` fanning out into a subgraph of its
sub-agent task's steps.

Built from the definition (not the compiled program) so the picture matches what the
author wrote.  Node ids are numbered in drawing order (`n1`, `n2`, ...) so the output is
stable enough to keep as a golden file.  Every label goes through `escape_label`: authors
write braces, quotes, pipes and `#` in templates and commands, and each of those means
something to Mermaid's parser.

Shapes: `(["..."])` start/end/join, `{"..."}` condition, `{{"..."}}` loop head,
`[["..."]]` parallel fan-out, `[/"..."/]` a step the agent performs, `>"..."]` a message
to the user, `["..."]` a step the server runs itself.

The same drawing is also kept as data (`flow_graph`: nodes, edges, subgraph blocks), each
node with the qualified step id it stands for (the compiler's ids, `fix_loop.run_lint`)
and its scope (`main`, or `task:<name>@<fan-out step>`), so the web view draws the very
graph `graph` prints and marks each node from an instance's history.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aromcp_workflows.definition import (
    ConditionalStep,
    ForeachStep,
    LoopStep,
    ParallelForeachStep,
    Step,
    WhileStep,
    WorkflowDefinition,
)
from aromcp_workflows.interpreter import local_step_id

MAX_LABEL = 60
AGENT_STEPS = frozenset({"agent_shell_command", "mcp_call", "user_input", "agent_prompt", "apply_hints"})

# An exit of a drawn fragment: a node id and the label its outgoing edge should carry
# ("false" for the untaken branch of a conditional, "done" for a finished loop, ...).
Tail = tuple[str, str | None]

_PLAIN = re.compile(r"[A-Za-z0-9_ ]{1,40}")
_SHAPES = {"box": '["{}"]', "diamond": '{{"{}"}}', "round": '(["{}"])', "loop": '{{{{"{}"}}}}',
           "agent": '[/"{}"/]', "parallel": '[["{}"]]', "message": '>"{}"]'}


@dataclass(frozen=True)
class FlowNode:
    """One drawn node.  `step_id`: the qualified id of the step (or loop, condition, guard)
    it stands for, within `scope`; None for start, end and join nodes.  `role` says what it
    is: step, when (a step's guard), start, end, join, exit, handler (the entry of an error
    handler), handled, done (an include's end).  `loop`: the node id of the innermost loop
    head it runs in (within its frame), `block`: the subgraph it is drawn in."""

    id: str
    label: str
    shape: str
    role: str
    step_id: str | None
    scope: str
    loop: str | None
    block: str | None


@dataclass(frozen=True)
class FlowEdge:
    source: str
    target: str
    label: str | None
    dotted: bool


@dataclass(frozen=True)
class FlowBlock:
    """A subgraph: a sub-agent task, an included workflow or an error handler."""

    id: str
    title: str
    kind: str  # task | include | handler
    parent: str | None


@dataclass(frozen=True)
class FlowGraph:
    nodes: list[FlowNode]
    edges: list[FlowEdge]
    blocks: list[FlowBlock]


@dataclass
class _Loop:
    head: str
    breaks: list[Tail] = field(default_factory=list)


@dataclass
class _Graph:
    """The lines drawn so far, plus where `break`, `continue` and `exit` lead right now,
    and the same drawing as data (`flow`)."""

    definition: WorkflowDefinition
    included: dict[str, WorkflowDefinition] = field(default_factory=dict)  # drawn inside include steps
    lines: list[str] = field(default_factory=list)
    count: int = 0
    loops: list[_Loop] = field(default_factory=list)  # innermost last
    exits: list[list[str]] = field(default_factory=lambda: [[]])  # `exit` nodes per scope (main, task)
    flow: FlowGraph = field(default_factory=lambda: FlowGraph([], [], []))
    scope: str = "main"
    blocks: list[str] = field(default_factory=list)  # the subgraphs open now, innermost last

    def node(self, label: str, shape: str = "box", step_id: str | None = None, role: str = "step") -> str:
        self.count += 1
        node_id = f"n{self.count}"
        self.lines.append(f"  {node_id}{_SHAPES[shape].format(escape_label(label))}")
        self.flow.nodes.append(FlowNode(node_id, _one_line(label), shape, role, step_id, self.scope,
                                        self.loops[-1].head if self.loops else None,
                                        self.blocks[-1] if self.blocks else None))
        return node_id

    def edge(self, source: str, target: str, label: str | None = None, dotted: bool = False) -> None:
        arrow = "-.->" if dotted else "-->"
        text = ""
        if label:  # plain words stay bare (`-.->|repeat|`); anything else is quoted
            text = f"|{label}|" if _PLAIN.fullmatch(label) else f'|"{escape_label(label)}"|'
        self.lines.append(f"  {source} {arrow}{text} {target}")
        self.flow.edges.append(FlowEdge(source, target, label or None, dotted))

    def open_block(self, block_id: str, title: str, kind: str) -> None:
        self.lines.append(f'  subgraph {block_id}["{escape_label(title)}"]')
        self.flow.blocks.append(FlowBlock(block_id, _one_line(title), kind, self.blocks[-1] if self.blocks else None))
        self.blocks.append(block_id)

    def close_block(self) -> None:
        self.blocks.pop()

    def link(self, tails: list[Tail], target: str, label: str | None = None) -> None:
        """Connect every tail to `target`; a tail's own label wins over `label`."""
        for source, own in tails:
            self.edge(source, target, own or label)


def mermaid_flowchart(definition: WorkflowDefinition,
                      included: dict[str, WorkflowDefinition] | None = None) -> str:
    """The whole workflow as `flowchart TD` text (ends with a newline).

    With `included` (name -> definition, e.g. a bundle's workflows), the steps of each
    `include_workflow` are drawn inside a subgraph right after the include step."""
    return "flowchart TD\n" + "\n".join(_drawn(definition, included).lines) + "\n"


def flow_graph(definition: WorkflowDefinition, included: dict[str, WorkflowDefinition] | None = None) -> FlowGraph:
    """The graph `mermaid_flowchart` draws, as data."""
    return _drawn(definition, included).flow


def _drawn(definition: WorkflowDefinition, included: dict[str, WorkflowDefinition] | None) -> _Graph:
    graph = _Graph(definition, dict(included or {}))
    start = graph.node(f"start: {definition.name}", "round", role="start")
    tails = _steps(graph, definition.steps, [(start, None)])
    end = graph.node("end", "round", role="end")
    graph.link(tails, end)
    for node in graph.exits[0]:
        graph.edge(node, end)
    if definition.error_handling.on_failure:
        _draw_handler(graph, "on_failure", "on failure: when a step fails", "workflow failed",
                      definition.error_handling.on_failure, None)
    return graph


def _draw_handler(graph: _Graph, key: str, title: str, trigger: str, steps: list[Any], source: str | None) -> None:
    """Error-handling steps (`on_failure`, a task's `cleanup_on_error`) in their own
    subgraph, entered by a dotted edge: they run only when something failed."""
    block = f"{_safe(key)}_{graph.count}"
    graph.open_block(block, title, "handler")
    outer_loops, graph.loops = graph.loops, []
    graph.exits.append([])
    entry = graph.node(trigger, "round", role="handler")
    prefix = "on_failure." if source is None else "cleanup_on_error."  # the compiler's ids of handler steps
    tails = _steps(graph, steps, [(entry, None)], prefix=prefix)
    done = graph.node("handled", "round", role="handled")
    graph.link(tails, done)
    for node in graph.exits.pop():
        graph.edge(node, done)
    graph.loops = outer_loops
    graph.lines.append("  end")
    graph.close_block()
    if source is not None:
        graph.edge(source, entry, "on error", dotted=True)


def _steps(graph: _Graph, steps: list[Any], tails: list[Tail], label: str | None = None,
           prefix: str = "", branch: str = "") -> list[Tail]:
    """Draw a step list after `tails`; returns the tails that flow on to whatever comes next.

    `label` marks the edges into the first step (`true`, `each item`, ...); `prefix` and
    `branch` make each step's qualified id as the compiler does."""
    for index, step in enumerate(steps):
        local = step.id or f"{step.type}_{index + 1}"
        qid = f"{prefix}{local_step_id(step, index, branch)}"
        if step.when is not None:
            guard = graph.node(f"when {step.when}", "diamond", qid, role="when")
            graph.link(tails, guard, label)
            tails = _draw(graph, step, local, [(guard, "yes")], qid) + [(guard, "skip")]
        else:
            tails = _draw(graph, step, local, _relabel(tails, label), qid)
        label = None
    if label is not None:  # an empty list: the label belongs to the edge that passes it by
        tails = _relabel(tails, label)
    return tails


def _relabel(tails: list[Tail], label: str | None) -> list[Tail]:
    return [(node, own or label) for node, own in tails]


def _draw(graph: _Graph, step: Step, local: str, tails: list[Tail], qid: str) -> list[Tail]:
    if isinstance(step, ConditionalStep):
        test = graph.node(f"{local}: {step.condition}", "diamond", qid)
        graph.link(tails, test)
        then_tails = _steps(graph, step.then, [(test, None)], "true", f"{qid}.", "then_")
        else_tails = _steps(graph, step.else_, [(test, None)], "false", f"{qid}.", "else_")
        return _unique(then_tails + else_tails)
    if isinstance(step, (WhileStep, ForeachStep)):
        return _draw_loop(graph, step, local, tails, qid)
    if isinstance(step, ParallelForeachStep):
        return _draw_parallel(graph, step, local, tails, qid)
    if step.type in ("break", "continue", "exit"):
        node = graph.node(step.type if step.type != "exit" or not step.message else f"exit: {step.message}",
                          "round", qid, role="exit" if step.type == "exit" else "step")
        graph.link(tails, node)
        if step.type == "break" and graph.loops:
            graph.loops[-1].breaks.append((node, "break"))
        elif step.type == "continue" and graph.loops:
            graph.edge(node, graph.loops[-1].head, "continue", dotted=True)
        elif step.type == "exit":
            graph.exits[-1].append(node)
        return []
    shape = "agent" if step.type in AGENT_STEPS else "message" if step.type == "user_message" else "box"
    node = graph.node(f"{local}: {_summary(step)}", shape, qid)
    graph.link(tails, node)
    if step.type == "include_workflow" and step.workflow in graph.included:
        return _draw_include(graph, step.workflow, node, qid)
    return [(node, None)]


def _draw_include(graph: _Graph, name: str, node: str, qid: str) -> list[Tail]:
    """The child workflow's steps in a subgraph; the child's own `exit` ends only the child."""
    child = graph.included.pop(name)  # drawn once; a recursive include stays a plain box
    block = f"include_{_safe(name)}_{graph.count}"
    start = len(graph.lines)
    graph.open_block(block, "included workflow: " + name, "include")
    outer_loops, graph.loops = graph.loops, []
    outer_definition, graph.definition = graph.definition, child  # its parallel steps use its own tasks
    graph.exits.append([])
    tails = _steps(graph, child.steps, [(node, None)], "run", f"{qid}.")
    exits = graph.exits.pop()
    graph.loops, graph.definition = outer_loops, outer_definition
    graph.close_block()
    block_lines = graph.lines[start:]
    entries = [line for line in block_lines if line.startswith(f"  {node} ")]  # keep the include outside
    graph.lines[start:] = [line for line in block_lines if line not in entries] + ["  end"] + entries
    graph.included[name] = child
    if exits:
        done = graph.node(f"{name} done", "round", qid, role="done")
        graph.link(tails, done)
        for source in exits:
            graph.edge(source, done)
        return [(done, None)]
    return tails


def _draw_loop(graph: _Graph, step: LoopStep, local: str, tails: list[Tail], qid: str) -> list[Tail]:
    if isinstance(step, WhileStep):
        text, body = f"while {step.condition} (max {step.limit})", step.body
    else:
        text, body = f"foreach {step.items}", step.steps
    head = graph.node(f"{local}: {text}", "loop", qid)
    graph.link(tails, head)
    graph.loops.append(_Loop(head))
    body_tails = _steps(graph, body, [(head, None)], "next", f"{qid}.")
    loop = graph.loops.pop()
    for source, own in body_tails:
        graph.edge(source, head, own if own and own != "next" else "repeat", dotted=True)
    return [(head, "done"), *loop.breaks]


def _draw_parallel(graph: _Graph, step: ParallelForeachStep, local: str, tails: list[Tail],
                   qid: str) -> list[Tail]:
    fan = graph.node(f"{local}: parallel_foreach {step.items} (max {step.max_parallel})", "parallel", qid)
    graph.link(tails, fan)
    task = graph.definition.sub_agent_tasks.get(step.sub_agent_task)
    join = graph.node(f"all {step.sub_agent_task} tasks done", "round", qid, role="join")
    if task is None:
        graph.edge(fan, join, f"unknown task {step.sub_agent_task}")
        return [(join, None)]
    start = len(graph.lines)
    block_id = f"task_{_safe(step.sub_agent_task)}_{graph.count}"
    graph.open_block(block_id, "sub-agent task: " + step.sub_agent_task, "task")
    outer_loops, graph.loops = graph.loops, []  # break/continue never cross into a task
    outer_scope, graph.scope = graph.scope, task_scope(step.sub_agent_task, qid)
    graph.exits.append([])
    task_tails = _steps(graph, task.steps, [(fan, None)], "each item")
    task_exits = graph.exits.pop()
    graph.loops = outer_loops
    graph.close_block()
    # Mermaid puts a node in the subgraph whose block first mentions it, so the edges out
    # of the fan-out node move below `end`: the fan-out stays outside, the task's steps in.
    block = graph.lines[start:]
    entries = [line for line in block if line.startswith(f"  {fan} ")]
    graph.lines[start:] = [line for line in block if line not in entries] + ["  end"] + entries
    graph.link(task_tails, join)
    for node in task_exits:
        graph.edge(node, join)
    if task.error_handling.cleanup_on_error:
        _draw_handler(graph, f"cleanup_{step.sub_agent_task}", f"cleanup on error: {step.sub_agent_task}",
                      "task failed", task.error_handling.cleanup_on_error, block_id)
    graph.scope = outer_scope
    return [(join, None)]


def task_scope(task: str, fan_out: str) -> str:
    """The scope of a sub-agent task's nodes: its task name and the fan-out step that runs
    it (two `parallel_foreach` steps may run the same task)."""
    return f"task:{task}@{fan_out}"


def _summary(step: Step) -> str:
    if step.type in ("shell_command", "agent_shell_command"):
        return f"{step.type} {step.command}"
    if step.type == "mcp_call":
        return f"mcp_call {step.mcp.method}"
    if step.type == "user_message":
        return f"message {step.message}"
    if step.type == "user_input":
        return f"user_input {step.prompt}"
    if step.type == "agent_prompt":
        return f"agent_prompt {step.prompt}"
    if step.type == "include_workflow":
        return f"include {step.workflow}"
    if step.type == "state_update":
        return "state_update " + ", ".join(u.path for u in step.as_updates())
    return str(step.type)


# Characters with a meaning inside a quoted Mermaid label, replaced by Mermaid's own
# entity codes (`#35;` is `#`).  `#` goes first so the codes we insert stay intact.
_ENTITIES = [("#", "#35;"), ("&", "#amp;"), ('"', "#quot;"), ("|", "#124;"), ("`", "#96;"),
             ("<", "#lt;"), (">", "#gt;")]


def _one_line(text: str) -> str:
    """A label as the page shows it: one line, at most MAX_LABEL characters (not escaped)."""
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…"


def escape_label(text: str) -> str:
    """Text made safe for a quoted Mermaid label: one line, at most MAX_LABEL characters,
    and no character that could end the label or start markup."""
    text = " ".join(str(text).split())
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    for char, code in _ENTITIES:
        text = text.replace(char, code)
    return text


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _unique(tails: list[Tail]) -> list[Tail]:
    return list(dict.fromkeys(tails))
