"""What the fault campaign runs: the shipped workflows, workflows that stress the hard paths,
and for each instance a plan (key, workflow, inputs) and the answers of its agent.

Every answer is a pure function of the instance's key and the step it answers (its id and
rendered definition), never of timing: a run under faults and a fault-free run of the same
plan must end in the same state, and any difference is the server's.

Shell steps with a side effect append `start <label>` and `end <label>` to
`.chaos/effects/<key>.log` in the project (the label names the step and its iteration), so
the checker counts how often each command ran and whether a run was cut short.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if not any(Path(entry, "aromcp_workflows").is_dir() for entry in sys.path if entry):
    sys.path.append(str(REPO))  # not installed, no --server-tree: this checkout's package

from aromcp_workflows.runner.answers import AnswerBook  # noqa: E402

EFFECTS = ".chaos/effects"


def effect(label: str, pause: str) -> str:
    """A command with a side effect: one line when it starts, one when it ends, a pause between
    (`label` and `pause` may hold templates; the values are shell-quoted by the server).  Each
    line names the host it ran on (`$CHAOS_HOST`, set by the setup for each of its hosts)."""
    log = ".chaos/effects/{{ inputs.tag }}.log"
    return (f"printf 'start %s %s\\n' {label} $CHAOS_HOST >> {log}; sleep {pause}; "
            f"printf 'end %s %s\\n' {label} $CHAOS_HOST >> {log}; echo {label}")


NESTED = """\
name: chaos:nested
description: "nested loops with break: an outer foreach, an inner while that breaks early"
inputs:
  tag: {type: string, required: true}
  rounds: {type: integer, default: 3}
default_state:
  raw: {answers: [], effects: [], count: 0}
steps:
  - id: outer
    type: foreach
    items: "{{ Array.from({length: inputs.rounds}, (_, i) => i) }}"
    steps:
      - id: inner
        type: while
        condition: "{{ true }}"
        max_iterations: 6
        body:
          - id: tick
            type: state_update
            path: raw.count
            operation: increment
            value: 1
          - id: think
            type: agent_prompt
            prompt: "round {{ item }} count {{ count }}"
            state_update: {path: raw.answers, operation: append}
          - id: effect
            type: shell_command
            command: "@NESTED@"
            state_update: {path: raw.effects, operation: append, value: "{{ result.stdout.trim() }}"}
          - id: enough
            type: conditional
            condition: "{{ count % 3 === 0 }}"
            then:
              - type: break
  - type: user_message
    message: "nested done: {{ count }} rounds"
""".replace("@NESTED@", effect("nested-{{ item }}-{{ count }}", "0.{{ count % 4 }}"))

FANOUT = """\
name: chaos:fanout
description: "a parallel fan-out: each task prompts twice and runs a command with a side effect"
inputs:
  tag: {type: string, required: true}
  items: {type: array, default: ["a", "b", "c"]}
default_state:
  raw: {shared: [], effects: [], count: 0}
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ inputs.items }}"
    max_parallel: 2
    sub_agent_task: work
  - type: user_message
    message: "fanout done: {{ count }}"
sub_agent_tasks:
  work:
    inputs:
      name: {type: string, default: "{{ item }}"}
    steps:
      - id: first
        type: agent_prompt
        prompt: "{{ task.name }} first"
        state_update: {path: raw.shared, operation: append}
      - id: effect
        type: shell_command
        command: "@FAN@"
        state_update: {path: raw.effects, operation: append, value: "{{ result.stdout.trim() }}"}
      - id: second
        type: agent_prompt
        prompt: "{{ task.name }} second"
        state_update: {path: raw.shared, operation: append}
      - id: tally
        type: state_update
        path: raw.count
        operation: increment
        value: 1
""".replace("@FAN@", effect("fan-{{ task.name }}", "0.3"))

CHILD = """\
name: chaos:child
description: "included twice by chaos:include: an answer and a command of its own"
inputs:
  tag: {type: string, required: true}
  part: {type: string, required: true}
default_state:
  raw: {said: ""}
steps:
  - id: ask
    type: agent_prompt
    prompt: "part {{ inputs.part }}"
    state_update: {path: raw.said}
  - id: effect
    type: shell_command
    command: "@CHILD@"
    state_update: {path: raw.done}
""".replace("@CHILD@", effect("child-{{ inputs.part }}", "0.2"))

INCLUDE = """\
name: chaos:include
description: "includes chaos:child twice, then confirms with the agent"
inputs:
  tag: {type: string, required: true}
default_state:
  raw: {confirmed: ""}
steps:
  - id: one
    type: include_workflow
    workflow: "chaos:child"
    inputs: {tag: "{{ inputs.tag }}", part: "one"}
  - id: two
    type: include_workflow
    workflow: "chaos:child"
    inputs: {tag: "{{ inputs.tag }}", part: "two"}
  - id: confirm
    type: agent_prompt
    prompt: "confirm {{ raw.one.said }} and {{ raw.two.said }}"
    state_update: {path: raw.confirmed}
"""

INPUT = """\
name: chaos:input
description: "user_input with choices and validation, a branch on the answer, a side effect"
inputs:
  tag: {type: string, required: true}
default_state:
  raw: {color: "", size: "", note: ""}
steps:
  - id: color
    type: user_input
    prompt: "Pick a color"
    choices: ["red", "green", "blue"]
    max_attempts: 10
    state_update: {path: raw.color}
  - id: size
    type: user_input
    prompt: "A size, as digits"
    validation: {pattern: "^[0-9]+$", error_message: "digits only"}
    max_attempts: 10
    state_update: {path: raw.size}
  - id: branch
    type: conditional
    condition: "{{ raw.color === 'red' }}"
    then:
      - id: effect
        type: shell_command
        command: "@INPUT@"
        state_update: {path: raw.note}
    else:
      - id: note
        type: agent_prompt
        prompt: "note about {{ raw.color }}"
        state_update: {path: raw.note}
""".replace("@INPUT@", effect("input-{{ raw.size }}", "0.2"))

STRESS = {"chaos:nested": NESTED, "chaos:fanout": FANOUT, "chaos:child": CHILD, "chaos:include": INCLUDE,
          "chaos:input": INPUT}
SHIPPED = ("ci:retry-tests", "deps:analyze", "standards:check", "standards:fix")
KINDS = (*SHIPPED, "chaos:nested", "chaos:fanout", "chaos:include", "chaos:input")
STANDARDS_ANSWERS = REPO / "examples" / "answers" / "standards-fix.yaml"


@dataclass(frozen=True)
class Plan:
    """One logical instance: its key (also the idempotency key), workflow and inputs."""

    key: str
    workflow: str
    inputs: dict[str, Any] = field(default_factory=dict)


def plans(seed: int, count: int, prefix: str) -> list[Plan]:
    """`count` plans, every kind of workflow in turn, inputs drawn from the seed."""
    rng = random.Random(seed)
    found = []
    for n in range(count):
        kind = KINDS[n % len(KINDS)]
        key = f"{prefix}-{seed}-{n}"
        found.append(Plan(key, kind, _inputs(kind, key, rng)))
    return found


def _inputs(kind: str, key: str, rng: random.Random) -> dict[str, Any]:
    if kind == "ci:retry-tests":  # fails once, passes the second time: counts its own runs
        log = f"{EFFECTS}/{key}.retry"
        return {"command": f"printf 'run %s\\n' $CHAOS_HOST >> {log}; test $(wc -l < {log}) -ge 2",
                "max_attempts": 3}
    if kind == "deps:analyze":
        return {"review": rng.random() < 0.5}
    if kind == "chaos:nested":
        return {"tag": key, "rounds": rng.randint(2, 3)}
    if kind == "chaos:fanout":
        return {"tag": key, "items": [f"t{i}" for i in range(rng.randint(2, 4))]}
    if kind in ("chaos:include", "chaos:input"):
        return {"tag": key}
    return {}


def make_project(root: Path) -> Path:
    """A git project with changed files (what the shipped standards workflows look at), the
    stress workflows in `.aromcp/workflows`, manifests for deps:analyze, and `.chaos/` for
    the side effects; `.gitignore` keeps `.chaos` and `.aromcp` out of the changed files."""
    if root.exists():
        shutil.rmtree(root)
    subprocess.run([sys.executable, str(REPO / "examples" / "demo_project.py"), str(root)], check=True,
                   capture_output=True)
    (root / ".gitignore").write_text(".chaos/\n.aromcp/\n")
    (root / "package.json").write_text(json.dumps({"dependencies": {"left-pad": "^1.0.0", "react": "18"}}))
    (root / "requirements.txt").write_text("requests>=2\npsycopg==3.3\n")
    workflows = root / ".aromcp" / "workflows"
    workflows.mkdir(parents=True)
    for name, text in STRESS.items():
        (workflows / f"{name}.yaml").write_text(text)
    (root / EFFECTS).mkdir(parents=True)
    return root


def digest(*parts: Any) -> int:
    """A stable number from the parts (the same in every process and run)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


class Answers:
    """The agent's answers: from the shipped answers file where it has one, else derived from
    the instance's key and the step (`answer`).  A `user_input` step gets one wrong answer
    first now and then (its re-issue is part of what is tested)."""

    def __init__(self) -> None:
        self.book = AnswerBook.load(STANDARDS_ANSWERS)

    def answer(self, key: str, step: dict[str, Any], task_id: str | None, attempt: int) -> tuple[str, Any]:
        """(status, result) for a delivered step; `attempt` counts the answers the agent chose
        for this step before (a resend of a call is not a new answer)."""
        kind, definition, step_id = step["type"], step.get("definition") or {}, step["id"]
        scripted = self.book.take(step, task_id)
        if scripted is not None:
            return scripted.status, scripted.result
        if kind == "user_input":
            return "success", self._user_input(key, step_id, definition, attempt)
        if kind == "agent_prompt":
            if definition.get("response_schema"):
                return "success", {"findings": [f"{key}:{step_id}"]}
            return "success", f"{key}:{step_id}:{definition.get('prompt', '')}"
        if kind == "mcp_call":
            return "success", {"method": definition.get("method"), "ok": True}
        if kind == "agent_shell_command":
            return "success", ""
        raise ValueError(f"no answer for a {kind} step ({step_id})")

    @staticmethod
    def _user_input(key: str, step_id: str, definition: dict[str, Any], attempt: int) -> str:
        n = digest(key, step_id)
        wrong = attempt == 0 and n % 3 == 0
        choices = definition.get("choices")
        if choices:
            return "purple" if wrong else str(choices[n % len(choices)])
        return "lots" if wrong else str(10 + n % 90)
