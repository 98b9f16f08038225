"""A Mermaid flowchart of a workflow: steps in order, conditionals as diamonds, loops
with back edges, and `parallel_foreach` fanning out to its sub-agent task's steps.

Built from the definition (not the compiled program) so the picture matches what the
author wrote; node ids are derived from step positions, labels are escaped for Mermaid.
"""

from __future__ import annotations

import re
from typing import Any

from aromcp_workflows.definition.steps import ConditionalStep, ForeachStep, ParallelForeachStep, WhileStep
from aromcp_workflows.definition.workflow import WorkflowDefinition

MAX_LABEL = 60


class _Graph:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.count = 0
        self.loops: list[dict[str, Any]] = []  # innermost last: {"head": id, "breaks": [ids]}

    def node(self, label: str, shape: str = "box") -> str:
        self.count += 1
        node_id = f"n{self.count}"
        text = _escape(label)
        shapes = {"box": f'["{text}"]', "diamond": f'{{"{text}"}}', "round": f'(["{text}"])',
                  "loop": f'{{{{"{text}"}}}}', "agent": f'[/"{text}"/]', "parallel": f'[["{text}"]]'}
        self.lines.append(f"  {node_id}{shapes[shape]}")
        return node_id

    def edge(self, source: str, target: str, label: str | None = None, dotted: bool = False) -> None:
        arrow = "-.->" if dotted else "-->"
        text = f"|{_escape(label)}|" if label else ""
        self.lines.append(f"  {source} {arrow}{text} {target}")


def mermaid_flowchart(definition: WorkflowDefinition) -> str:
    graph = _Graph()
    start = graph.node(f"start: {definition.name}", "round")
    end_ids = _steps(graph, definition, definition.steps, [start], "")
    end = graph.node("end", "round")
    for tail in end_ids:
        graph.edge(tail, end)
    return "flowchart TD\n" + "\n".join(graph.lines) + "\n"


def _steps(graph: _Graph, definition: WorkflowDefinition, steps: list[Any], entries: list[str],
           label: str | None) -> list[str]:
    """Draw a step list; returns the node ids that flow on to whatever comes next."""
    tails = entries
    pending_label = label
    for index, step in enumerate(steps):
        local = step.id or f"{step.type}_{index + 1}"
        if step.when is not None:
            guard = graph.node(f"when {step.when}", "diamond")
            _link(graph, tails, guard, pending_label)
            tails, skip = _draw(graph, definition, step, local, [guard], "yes"), [guard]
            tails = tails + skip
            pending_label = None
            continue
        tails = _draw(graph, definition, step, local, tails, pending_label)
        pending_label = None
    return tails


def _draw(graph: _Graph, definition: WorkflowDefinition, step: Any, local: str, entries: list[str],
          label: str | None) -> list[str]:
    if isinstance(step, ConditionalStep):
        test = graph.node(f"{local}: {step.condition}", "diamond")
        _link(graph, entries, test, label)
        then_tails = _steps(graph, definition, step.then, [test], "true") if step.then else [test]
        else_tails = _steps(graph, definition, step.else_, [test], "false") if step.else_ else [test]
        return _unique(then_tails + else_tails)
    if isinstance(step, (WhileStep, ForeachStep)):
        text = f"while {step.condition}" if isinstance(step, WhileStep) else f"foreach {step.items}"
        head = graph.node(f"{local}: {text}", "loop")
        _link(graph, entries, head, label)
        body = step.body if isinstance(step, WhileStep) else step.steps
        graph.loops.append({"head": head, "breaks": []})
        tails = _steps(graph, definition, body, [head], "next")
        loop = graph.loops.pop()
        for tail in tails:
            graph.edge(tail, head, "repeat", dotted=True)
        return [head, *loop["breaks"]]
    if isinstance(step, ParallelForeachStep):
        fan = graph.node(f"{local}: parallel_foreach {step.items} (max {step.max_parallel})", "parallel")
        _link(graph, entries, fan, label)
        task = definition.sub_agent_tasks.get(step.sub_agent_task)
        join = graph.node(f"all {step.sub_agent_task} tasks done", "round")
        if task is not None:
            graph.lines.append(f"  subgraph task_{_safe(step.sub_agent_task)}_{graph.count}"
                               f"[\"sub-agent task: {_escape(step.sub_agent_task)}\"]")
            tails = _steps(graph, definition, task.steps, [fan], "each item")
            graph.lines.append("  end")
            for tail in tails:
                graph.edge(tail, join)
        else:
            graph.edge(fan, join)
        return [join]
    if step.type in ("break", "continue", "exit"):
        node = graph.node(f"{step.type}", "round")
        _link(graph, entries, node, label)
        if step.type == "break" and graph.loops:
            graph.loops[-1]["breaks"].append(node)
        elif step.type == "continue" and graph.loops:
            graph.edge(node, graph.loops[-1]["head"], "continue", dotted=True)
        return []
    shape = "agent" if step.type in ("agent_shell_command", "mcp_call", "user_input", "agent_prompt",
                                     "apply_hints") else "box"
    node = graph.node(f"{local}: {_summary(step)}", shape)
    _link(graph, entries, node, label)
    return [node]


def _link(graph: _Graph, sources: list[str], target: str, label: str | None) -> None:
    for source in sources:
        graph.edge(source, target, label)


def _summary(step: Any) -> str:
    if step.type in ("shell_command", "agent_shell_command"):
        return f"{step.type} {step.command}"
    if step.type == "mcp_call":
        return f"mcp_call {step.mcp.method}"
    if step.type == "user_message":
        return f"message {step.message}"
    if step.type == "include_workflow":
        return f"include {step.workflow}"
    if step.type == "state_update":
        return "state_update " + ", ".join(u.path for u in step.as_updates())
    return step.type


def _escape(text: str) -> str:
    text = " ".join(str(text).split())
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return text.replace('"', "#quot;").replace("|", "#124;")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _unique(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))
