"""The headless runner's programmatic API against a real server subprocess.

standards:fix on a git repo with 7 changed files: 3 batches, 3 sub-agents running
concurrently over one MCP session, the summary message, and the tool-call budget
N + T + 2 (docs/performance.md).  The standards:fix run is shared by the tests that read it.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from aromcp_workflows.runner.report import RunOutcome
from aromcp_workflows.runner.run import run_workflow
from tests.e2e.e2e_helpers import FIX_SUMMARY, SEVEN_FILES, git_repo

FIX_ANSWERS = {
    "hints_for_file": [{"when_params": {"file_path": "*.ts"}, "result": {"hints": ["prefer const"]}},
                       {"result": {"hints": ["wrap long lines"]}}],
    "apply": 2,
    "lint_project": {"errors": 0},
}


@pytest.fixture(scope="module")
def fix_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunOutcome, str]:
    base = tmp_path_factory.mktemp("fix")
    repo = git_repo(base / "repo", SEVEN_FILES)
    out = io.StringIO()
    outcome = asyncio.run(run_workflow("standards:fix", {}, FIX_ANSWERS, repo, base / "store.sqlite", out))
    return outcome, out.getvalue()


def test_standards_fix_completes_with_summary(fix_run):
    outcome, printed = fix_run
    assert outcome.status == "completed", (outcome.error, printed)
    assert outcome.exit_code == 0
    assert outcome.messages == ["Fixing 7 files in 3 batches of up to 3.", FIX_SUMMARY]
    assert FIX_SUMMARY in printed
    state = outcome.final_state
    assert state is not None
    assert state["batch_status"] == {"batch_0": "done", "batch_1": "done", "batch_2": "done"}
    assert len(state["file_results"]) == 7
    assert {r["hints"]["hints"][0] for r in state["file_results"].values()} == {"prefer const", "wrap long lines"}


def test_standards_fix_three_sub_agents_run_concurrently(fix_run):
    outcome, printed = fix_run
    steps = outcome.transcript
    assert [e.type for e in steps if e.task_id is None] == ["parallel_tasks"]
    tasks = sorted({e.task_id for e in steps if e.task_id})
    assert tasks == ["fix_batch_0", "fix_batch_1", "fix_batch_2"]
    # every task performed its first step before any task performed its last
    order = [e.task_id for e in steps if e.task_id]
    firsts = [order.index(t) for t in tasks]
    lasts = [len(order) - 1 - order[::-1].index(t) for t in tasks]
    assert max(firsts) < min(lasts), order


def test_standards_fix_tool_calls_within_budget(fix_run):
    """N = 21 task steps (hints, apply, lint for 7 files) + 1 parallel_tasks step, T = 3:
    start + the main thread's get_next_step + one get_next_step per task + one
    step_complete per step = N + T + 2 = 27.  The final state read is counted apart."""
    outcome, printed = fix_run
    assert sum(e.type == "mcp_call" for e in outcome.transcript) == 14
    assert sum(e.type == "agent_prompt" for e in outcome.transcript) == 7
    assert (outcome.agent_steps, outcome.tasks) == (22, 3)
    assert outcome.loop_calls == outcome.budget == 27
    assert outcome.tool_calls == outcome.loop_calls + 1
    assert "tool calls: 27 to run the workflow for 22 agent step(s) and 3 sub-agent task(s) " \
           "(budget N+T+2 = 27), plus 1 to read the final state" in printed


FAN_OUT = """\
name: "e2e:fan-out"
default_state:
  raw: {done: []}
steps:
  - id: fan_out
    type: parallel_foreach
    items: ["a", "b", "c"]
    max_parallel: 2
    sub_agent_task: work
    on_sub_agent_error: {strategy: retry_failed, max_retries: 1}
  - type: user_message
    message: "done: {{ done.slice().sort().join(',') }}"
sub_agent_tasks:
  work:
    steps:
      - id: slow
        type: agent_shell_command
        command: >-
          sleep 0.3; if [ {{ item }} = b ] && [ ! -e tried_b ]; then touch tried_b; echo flaky >&2; exit 1; fi;
          echo {{ item }}
        state_update: {path: "raw.done", operation: append}
"""


async def test_parallel_batches_wait_and_retried_task(tmp_path: Path):
    """max_parallel 2 over 3 items gives two parallel_tasks steps.  This orchestrator
    completes each parallel_tasks step before its sub-agents finish, so the server answers
    with a `wait` step; the runner waits for the named tasks and completes the step again.
    Task b fails once (its shell command exits 1) and `retry_failed` hands it out again in a
    third parallel_tasks step: the runner starts a new sub-agent for it."""
    workflow = tmp_path / "e2e:fan-out.yaml"
    workflow.write_text(FAN_OUT)
    out = io.StringIO()
    outcome = await run_workflow(str(workflow), {}, None, git_repo(tmp_path / "repo"), tmp_path / "s.sqlite",
                                 out, complete_parallel_early=True)
    assert outcome.status == "completed", (outcome.error, out.getvalue())
    main = [(e.step_id, e.type, e.accepted) for e in outcome.transcript if e.task_id is None]
    assert main[0] == ("fan_out", "parallel_tasks", False)
    assert ("fan_out.wait", "wait", True) in main
    assert [m[0] for m in main if m[1] == "parallel_tasks"] == ["fan_out", "fan_out.batch2", "fan_out.batch3"]
    failed = [e for e in outcome.transcript if e.status == "failed"]
    assert [(e.step_id, e.error) for e in failed] == [("work_1.slow", "exit code 1: flaky")]
    assert outcome.messages == ["done: a,b,c"]
    assert outcome.tasks == 4  # a, b, c, and b again
    assert outcome.loop_calls == outcome.budget


def test_path_to_key_is_also_a_function():
    """standards:fix calls `path_to_key(item)` as a function (found by these tests; fixed)."""
    from aromcp_workflows.expressions import ExpressionEngine

    engine = ExpressionEngine()
    assert engine.render("{{ path_to_key('src/a.ts') }}", {}) == "src_a_ts"


MESSAGES = """\
name: "e2e:messages"
steps:
  - type: user_message
    message: "before the tasks"
  - id: fan
    type: parallel_foreach
    items: ["x", "y"]
    sub_agent_task: t
  - type: user_message
    message: "after the tasks"
  - id: inc
    type: include_workflow
    workflow: "e2e:child"
  - id: q
    type: user_input
    prompt: "q?"
  - type: user_message
    message: "the end"
sub_agent_tasks:
  t:
    steps:
      - type: user_message
        message: "task {{ item }} starts"
      - id: a
        type: agent_prompt
        prompt: "do {{ item }}"
      - type: user_message
        message: "task {{ item }} ends"
"""
CHILD = """\
name: "e2e:child"
steps:
  - type: user_message
    message: "child starts"
  - id: c
    type: agent_prompt
    prompt: "child work"
  - type: user_message
    message: "child ends"
"""


async def test_messages_once_each_economical_and_seed_style(tmp_path: Path):
    """Every user_message is shown exactly once, in order, whether the agent uses the answer
    of step_complete (economical) or asks workflow_get_next_step after each step (seed
    style; the runner aborts if the two answers differ).  Both runs go at once."""
    repo = git_repo(tmp_path / "repo")
    (repo / ".aromcp" / "workflows").mkdir(parents=True)
    (repo / ".aromcp" / "workflows" / "e2e:child.yaml").write_text(CHILD)
    (repo / ".aromcp" / "workflows" / "e2e:messages.yaml").write_text(MESSAGES)
    answers = {"a": "done", "c": "done", "q": "ok"}
    economical, seed = await asyncio.gather(
        run_workflow("e2e:messages", {}, answers, repo, tmp_path / "a.sqlite", None),
        run_workflow("e2e:messages", {}, answers, repo, tmp_path / "b.sqlite", None, seed_style=True))
    for outcome in (economical, seed):
        assert outcome.status == "completed", outcome.error
        assert outcome.messages[:1] == ["before the tasks"]
        assert sorted(outcome.messages[1:5]) == ["task x ends", "task x starts", "task y ends", "task y starts"]
        assert outcome.messages[1:5].index("task x starts") < outcome.messages[1:5].index("task x ends")
        assert outcome.messages[5:] == ["after the tasks", "child starts", "child ends", "the end"]
    assert economical.loop_calls == economical.budget == 5 + 2 + 2
    assert seed.loop_calls == economical.loop_calls + seed.agent_steps


OVERRIDE = """
name: "review:files"
default_state:
  raw: { files: ["src/a.ts", "lib/b.py"], reviewer: "Ada" }
steps:
  - id: review
    type: parallel_foreach
    items: "{{ files }}"
    sub_agent_task: review_file
    sub_agent_prompt_override: "As {{ reviewer }}, review {{ item }} (file {{ index + 1 }}, task {{ task.task_id }})."
sub_agent_tasks:
  review_file:
    steps:
      - { id: look, type: agent_prompt, prompt: "Review {{ item }}", state_update: { path: "raw.seen.{{ item }}" } }
"""


def test_each_sub_agent_is_started_with_its_own_rendered_prompt(tmp_path: Path):
    """Over real MCP: each parallel_tasks entry carries `prompt`, the override rendered for
    that task, and the runner starts each sub-agent with it."""
    workflow = tmp_path / "review:files.yaml"
    workflow.write_text(OVERRIDE)
    (tmp_path / "project").mkdir()
    out = io.StringIO()
    outcome = asyncio.run(run_workflow(str(workflow), {}, {"look": "ok"}, tmp_path / "project",
                                       tmp_path / "store.sqlite", out))
    assert outcome.status == "completed", outcome.error
    assert outcome.sub_agent_prompts == {
        "review_file_0": "As Ada, review src/a.ts (file 1, task review_file_0).",
        "review_file_1": "As Ada, review lib/b.py (file 2, task review_file_1)."}
    assert "review_file_1: prompt: As Ada, review lib/b.py" in out.getvalue()
    assert (outcome.final_state or {})["seen"] == {"src/a.ts": "ok", "lib/b.py": "ok"}
