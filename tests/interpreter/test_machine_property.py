"""Property: the program-counter machine agrees with a tiny tree-walking reference.

Random nested workflows (conditionals, while with break/continue, foreach, `when`
guards, server-side state updates, agent-side mcp_calls) run on the real machine with a
scripted agent must deliver the same sequence of agent steps and end in the same state
as a recursive evaluator written here, which shares no code with the interpreter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.interpreter.agent import ScriptedAgent


@dataclass(frozen=True)
class Cond:
    """A condition both sides can evaluate: `counter % mod == rem` or `counter < bound`."""

    kind: str
    a: int
    b: int

    def js(self) -> str:
        if self.kind == "mod":
            return f"{{{{ counter % {self.a} === {self.b} }}}}"
        return f"{{{{ counter < {self.a} }}}}"

    def py(self, counter: int) -> bool:
        return counter % self.a == self.b if self.kind == "mod" else counter < self.a


conds = st.one_of(
    st.builds(lambda m, r: Cond("mod", m, r % m), st.integers(2, 3), st.integers(0, 2)),
    st.builds(lambda b: Cond("lt", b, 0), st.integers(1, 12)),
)

leaf = st.one_of(
    st.builds(lambda n: ("inc", n), st.integers(1, 3)),
    st.builds(lambda n: ("mark", n), st.integers(0, 9)),
    st.builds(lambda n: ("agent", n), st.integers(0, 9)),
)


def _tree(children: Any) -> Any:
    body = st.lists(children, min_size=1, max_size=3)
    return st.one_of(
        st.builds(lambda c, t, e: ("if", c, t, e), conds, body, st.lists(children, max_size=2)),
        st.builds(lambda c, m, b, p: ("while", c, m, b, p), conds, st.integers(1, 4), body,
                  st.sampled_from(["fail", "continue"])),
        st.builds(lambda items, b: ("foreach", items, b), st.lists(st.integers(0, 5), max_size=3), body),
        st.builds(lambda c, s: ("when", c, s), conds, children),
        st.builds(lambda c: ("break_if", c), conds),
        st.builds(lambda c: ("continue_if", c), conds),
    )


steps_strategy = st.lists(st.recursive(leaf, _tree, max_leaves=12), min_size=1, max_size=5)


# -- the workflow text --------------------------------------------------------------------
def to_steps(nodes: list[Any], in_loop: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for node in nodes:
        kind = node[0]
        if kind == "inc":
            out.append({"type": "state_update", "path": "raw.counter", "operation": "increment", "value": node[1]})
        elif kind == "mark":
            out.append({"type": "state_update", "path": "raw.log", "operation": "append",
                        "value": f"m{node[1]}:{{{{ counter }}}}"})
        elif kind == "agent":
            out.append({"type": "mcp_call", "mcp": {"method": f"tool{node[1]}", "params": {"c": "{{ counter }}"}},
                        "state_update": {"path": "raw.log", "operation": "append"}})
        elif kind == "if":
            step = {"type": "conditional", "condition": node[1].js(), "then": to_steps(node[2], in_loop)}
            if node[3]:
                step["else"] = to_steps(node[3], in_loop)
            out.append(step)
        elif kind == "while":
            out.append({"type": "while", "condition": node[1].js(), "max_iterations": node[2],
                        "on_max_iterations": node[4], "body": to_steps(node[3], True)})
        elif kind == "foreach":
            out.append({"type": "foreach", "items": node[1], "steps": [
                {"type": "state_update", "path": "raw.log", "operation": "append", "value": "i{{ item }}"},
                *to_steps(node[2], True)]})
        elif kind == "when":
            inner = to_steps([node[2]], in_loop)
            if inner:
                inner[0] = {**inner[0], "when": node[1].js()}
                out.extend(inner)
        elif kind in ("break_if", "continue_if") and in_loop:
            out.append({"type": "conditional", "condition": node[1].js(),
                        "then": [{"type": kind.removesuffix("_if")}]})
    return out


# -- the reference evaluator --------------------------------------------------------------
class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _LoopLimit(Exception):
    """A while loop reached max_iterations with its condition still true (on_max_iterations: fail)."""


class Reference:
    def __init__(self) -> None:
        self.counter = 0
        self.log: list[Any] = []
        self.agent_steps: list[tuple[str, int]] = []

    def run(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            if "when" in step and not self.cond(step["when"]):
                continue
            self.step(step)

    def cond(self, text: str) -> bool:
        expr = text.strip("{} ").replace("===", "==")
        return bool(eval(expr, {}, {"counter": self.counter}))

    def step(self, step: dict[str, Any]) -> None:
        kind = step["type"]
        if kind == "state_update" and step["path"] == "raw.counter":
            self.counter += step["value"]
        elif kind == "state_update":
            self.log.append(str(step["value"]).replace("{{ counter }}", str(self.counter))
                            .replace("{{ item }}", str(self._item)))
        elif kind == "mcp_call":
            self.agent_steps.append((step["mcp"]["method"], self.counter))
            self.log.append(step["mcp"]["method"])
        elif kind == "conditional":
            self.run(step["then"] if self.cond(step["condition"]) else step.get("else", []))
        elif kind == "while":
            iterations = 0
            while self.cond(step["condition"]):
                if iterations >= step["max_iterations"]:
                    if step["on_max_iterations"] == "continue":
                        break
                    raise _LoopLimit
                iterations += 1
                try:
                    self.run(step["body"])
                except _Break:
                    break
                except _Continue:
                    continue
        elif kind == "foreach":
            saved = getattr(self, "_item", None)
            for item in step["items"]:
                self._item = item
                try:
                    self.run(step["steps"])
                except _Break:
                    break
                except _Continue:
                    continue
                finally:
                    self._item = item
            self._item = saved
        elif kind == "break":
            raise _Break
        elif kind == "continue":
            raise _Continue

    _item: Any = None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(tree=steps_strategy)
def test_machine_matches_reference(start, tree):
    steps = to_steps(tree, in_loop=False)
    if not steps:
        steps = [{"type": "state_update", "path": "raw.counter", "value": 0}]
    reference = Reference()
    expected = "completed"
    try:
        reference.run(steps)
    except _LoopLimit:
        expected = "failed"

    workflow = {"name": "prop", "default_state": {"raw": {"counter": 0, "log": []}}, "steps": steps}
    run, driver = start(json.dumps(workflow, indent=1) + "\n")
    seen: list[tuple[str, int]] = []

    def answerer(step: dict[str, Any]) -> Any:
        seen.append((step["definition"]["method"], step["definition"]["params"]["c"]))
        return step["definition"]["method"]

    final = ScriptedAgent(driver, answerer=answerer).run()
    assert final.status == expected, final.error
    assert seen == reference.agent_steps
    state = run.states["main"].flattened()
    assert state["counter"] == reference.counter
    assert state["log"] == reference.log
