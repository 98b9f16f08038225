"""Step types, error handling and the delivery protocol on the in-process machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from aromcp_workflows.interpreter import InputError, RunError
from tests.interpreter.agent import ScriptedAgent

USER_INPUT = """
name: ask
steps:
  - id: choose
    type: user_input
    prompt: "Which branch?"
    validation:
      pattern: "^(main|dev)$"
      error_message: "Answer main or dev"
    max_attempts: 3
    state_update:
      path: raw.branch
  - type: user_message
    message: "Using {{ branch }}"
"""


def test_user_input_invalid_then_valid(start):
    run, driver = start(USER_INPUT)
    first = driver.next_step()
    assert first.step["type"] == "user_input"
    assert first.step["definition"]["prompt"] == "Which branch?"
    bad = driver.complete(None, "choose", result="feature")
    assert bad.success is False
    assert "Answer main or dev" in bad.error
    assert bad.next_step["id"] == "choose"
    assert "not accepted" in bad.next_step["instructions"]
    again = driver.next_step()
    assert again.step["id"] == "choose"  # nothing skipped: the same step again
    good = driver.complete(None, "choose", result="dev")
    assert good.success is True
    assert good.next_step is None
    assert good.messages == ["Using dev"]
    assert good.status == "completed"


def test_user_input_exhausting_attempts_fails_the_workflow(start):
    run, driver = start(USER_INPUT)
    driver.next_step()
    for answer in ("x", "y"):
        assert driver.complete(None, "choose", result=answer).success is False
    last = driver.complete(None, "choose", result="z")
    assert last.success is False  # the last answer was rejected too
    assert last.status == "failed" and last.next_step is None
    assert "no valid answer after 3 attempts" in last.error
    after = driver.next_step()
    assert after.status == "failed" and after.error == "step choose failed: " + last.error


def _shell_workflow(on_error: str, extra: str = "") -> str:
    return f"""
name: sh
steps:
  - id: flaky
    type: shell_command
    command: "echo out; echo boom >&2; exit 3"
    on_error: {on_error}
    retry_count: 2
    retry_delay: 1
    {extra}
    state_update:
      path: raw.result
  - type: user_message
    message: "after: {{{{ result | json }}}}"
"""


def test_shell_failure_fails_the_workflow_naming_step_exit_code_and_stderr(start):
    run, driver = start(_shell_workflow("fail"))
    answer = driver.next_step()
    assert answer.status == "failed"
    assert answer.step is None
    assert "flaky" in answer.error and "exited with code 3" in answer.error and "boom" in answer.error


def test_shell_failure_continue_stores_fallback(start):
    run, driver = start(_shell_workflow("continue", 'fallback_value: {ok: false}'))
    answer = driver.next_step()
    assert answer.status == "completed"
    assert answer.messages == ['after: {"ok":false}']


def test_shell_failure_retry_then_fallback(start):
    run, driver = start(_shell_workflow("retry", "fallback_value: gave-up"))
    answer = driver.next_step()
    assert answer.status == "completed"
    assert answer.messages == ['after: "gave-up"']
    attempts = [e for e in driver.events if e.kind == "step_completed"]
    assert len({e.data["attempt"] for e in attempts}) == 3  # first try + 2 retries


def test_shell_retry_exhausted_without_fallback_fails(start):
    run, driver = start(_shell_workflow("retry"))
    assert driver.next_step().status == "failed"


@pytest.mark.parametrize("payload", ["x; touch {p}", "$(touch {p})", "`touch {p}`", "a' ; touch {p}; echo '"])
def test_template_values_in_commands_are_shell_quoted(start, tmp_path: Path, payload: str):
    target = tmp_path / "pwned"
    workflow = f"""
name: quoting
default_state:
  raw:
    evil: {payload.format(p=target)!r}
steps:
  - type: shell_command
    command: "echo {{{{ evil }}}}"
    state_update:
      path: raw.echoed
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    assert not target.exists()
    assert run.states["main"].flattened()["echoed"] == payload.format(p=target)


def test_raw_filter_opts_out_of_quoting(start, tmp_path: Path):
    workflow = """
name: raw
default_state:
  raw:
    cmd: "echo a && echo b"
steps:
  - type: shell_command
    command: "{{ cmd | raw }}"
    output_format: lines
    state_update:
      path: raw.out
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    assert run.states["main"].flattened()["out"] == ["a", "b"]


def test_step_ids_distinguish_loop_iterations(start):
    workflow = """
name: ids
steps:
  - id: fix_loop
    type: foreach
    items: [1, 2]
    steps:
      - id: run_lint
        type: agent_shell_command
        command: "echo {{ item }}"
"""
    run, driver = start(workflow)
    agent = ScriptedAgent(driver)
    agent.run()
    assert [s[2] for s in agent.transcript.steps] == ["fix_loop.run_lint#1", "fix_loop.run_lint#2"]


def test_seed_style_and_economical_agents_see_each_message_once(start):
    workflow = """
name: msgs
steps:
  - type: user_message
    message: one
  - id: a
    type: mcp_call
    mcp: {method: m}
  - type: user_message
    message: two
  - id: b
    type: mcp_call
    mcp: {method: m}
  - type: user_message
    message: three
"""
    run, driver = start(workflow)
    seen: list[str] = []
    step = driver.next_step()  # seed style: get_next_step → act → complete → get_next_step
    seen += step.messages
    while step.step is not None:
        driver.complete(None, step.step["id"], result="ok")  # ignores the answer
        step = driver.next_step()
        seen += step.messages
    assert seen == ["one", "two", "three"]

    run2, driver2 = start(workflow)
    agent = ScriptedAgent(driver2, answers={"m": "ok"})
    agent.run()
    assert agent.transcript.messages[:3] == ["one", "two", "three"]


def test_completing_a_step_twice_is_harmless_and_unknown_ids_are_errors(start):
    workflow = """
name: twice
steps:
  - id: a
    type: mcp_call
    mcp: {method: m}
  - id: b
    type: mcp_call
    mcp: {method: m}
"""
    run, driver = start(workflow)
    driver.next_step()
    first = driver.complete(None, "a", result=1)
    assert first.next_step["id"] == "b"
    again = driver.complete(None, "a", result=1)
    assert again.success is True and again.next_step["id"] == "b"
    with pytest.raises(RunError, match="not the current step"):
        run.complete(None, "zzz")
    with pytest.raises(RunError, match="unknown task_id"):
        run.complete("nope", "b")


def test_inputs_are_checked_all_at_once(start):
    workflow = """
name: typed
inputs:
  count: {type: integer, required: true}
  flag: {type: boolean}
steps: []
"""
    with pytest.raises(InputError) as info:
        start(workflow, {"flag": "maybe", "extra": 1})
    text = str(info.value)
    assert "count" in text and "required" in text and "flag" in text and "unknown input 'extra'" in text


def test_error_handling_on_failure_runs_with_error_in_scope(start):
    workflow = """
name: failing
error_handling:
  error_collection:
    state_path: raw.errors
  on_failure:
    - type: user_message
      message: "Workflow failed: {{ error.message }}"
steps:
  - id: boom
    type: shell_command
    command: "exit 7"
"""
    run, driver = start(workflow)
    answer = driver.next_step()
    assert answer.status == "failed"
    assert answer.messages
    assert answer.messages[0].startswith("Workflow failed: step boom failed: command exited with code 7")
    assert run.states["main"].flattened()["errors"][0]["step_id"] == "boom"


def test_error_handling_continue_skips_the_failed_step(start):
    workflow = """
name: tolerant
error_handling:
  on_error: continue
steps:
  - id: boom
    type: shell_command
    command: "exit 1"
  - type: user_message
    message: "still here"
"""
    run, driver = start(workflow)
    answer = driver.next_step()
    assert answer.status == "completed"
    assert answer.messages[-1] == "still here"


PARALLEL = """
name: par
default_state:
  raw: {{done: [], errors: []}}
steps:
  - id: fan
    type: parallel_foreach
    items: [1, 2, 3]
    max_parallel: 2
    sub_agent_task: work
    on_sub_agent_error:
      strategy: {strategy}
      max_retries: 1
      collect_errors: true
      error_state_path: raw.errors
  - type: user_message
    message: "done={{{{ done.length }}}} errors={{{{ errors.length }}}}"
sub_agent_tasks:
  work:
    inputs:
      n: {{type: integer, default: "{{{{ item }}}}"}}
    steps:
      - id: do
        type: mcp_call
        mcp: {{method: work, params: {{n: "{{{{ task.n }}}}"}}}}
      - type: state_update
        path: raw.done
        operation: append
        value: "{{{{ task.n }}}}"
    error_handling:
      cleanup_on_error:
        - type: state_update
          path: raw.cleaned
          value: "{{{{ task.task_id }}}}"
"""


def _flaky_answerer(fail_first_of: set[int]):
    failed: set[int] = set()

    def answer(step):
        n = step["definition"]["params"]["n"]
        if n in fail_first_of and n not in failed:
            failed.add(n)
            return "failed", f"task {n} broke"
        return "success", "ok"

    return answer


@pytest.mark.parametrize("strategy,status,message", [
    ("continue", "completed", "done=2 errors=1"),
    ("retry_failed", "completed", "done=3 errors=0"),
])
def test_parallel_batches_and_error_strategies(start, strategy, status, message):
    run, driver = start(PARALLEL.format(strategy=strategy))
    agent = ScriptedAgent(driver, answerer=_flaky_answerer({2}))
    final = agent.run()
    assert final.status == status, final.error
    batches = [s for s in agent.transcript.steps if s[0] == "main" and s[1] == "parallel_tasks"]
    assert len(batches) >= 2  # 3 tasks with max_parallel 2
    assert agent.transcript.messages[-1] == message
    assert run.states["main"].flattened()["cleaned"] == "work_1"


def test_parallel_fail_all_fails_the_workflow(start):
    run, driver = start(PARALLEL.format(strategy="fail_all"))
    agent = ScriptedAgent(driver, answerer=_flaky_answerer({1}))
    final = agent.run()
    assert final.status == "failed"
    assert "task work_0 failed" in final.error and "on_sub_agent_error is fail_all" in final.error
    # the first failure stops the fan-out at once: the second batch is never handed out
    assert run.threads["work_2"].status == "cancelled"
    assert not [s for s in agent.transcript.steps if s[0] == "work_2"]
    assert [e.data["failed"] for e in driver.events if e.kind == "tasks_stopped"] == ["work_0"]


def test_completing_parallel_step_early_answers_wait(start):
    run, driver = start(PARALLEL.format(strategy="continue"))
    step = driver.next_step().step
    assert step["type"] == "parallel_tasks"
    assert [t["task_id"] for t in step["definition"]["tasks"]] == ["work_0", "work_1"]
    early = driver.complete(None, step["id"])
    assert early.success is False
    assert early.next_step["type"] == "wait"
    assert early.next_step["definition"]["task_ids"] == ["work_0", "work_1"]
    # finish one task, re-deliver: only the unfinished one is listed
    ScriptedAgent(driver, answers={"work": "ok"}).run("work_0")
    again = driver.next_step().step
    assert [t["task_id"] for t in again["definition"]["tasks"]] == ["work_1"]
