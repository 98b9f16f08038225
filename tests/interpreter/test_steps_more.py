"""More step behaviour: output formats, limits, schemas, retries of the whole workflow,
and two sub-agents pulling one task."""

from __future__ import annotations

import threading

from aromcp_workflows.interpreter.output import parse_output
from aromcp_workflows.shell.runner import OUTPUT_CAP
from tests.interpreter.agent import ScriptedAgent


def test_output_formats_parse_as_declared(start):
    workflow = """
name: formats
steps:
  - type: shell_command
    command: "printf 'a\\nb\\n'"
    output_format: lines
    state_update: {path: raw.lines}
  - type: shell_command
    command: "echo '{\\"n\\": 3}'"
    output_format: json
    state_update: {path: raw.json}
  - type: shell_command
    command: "printf 'name=x\\nsize: 4\\n'"
    output_format: key_value
    state_update: {path: raw.kv}
  - type: shell_command
    command: "echo hello"
    state_update: {path: raw.text}
"""
    run, driver = start(workflow)
    assert driver.next_step().status == "completed"
    state = run.states["main"].flattened()
    assert state["lines"] == ["a", "b"]
    assert state["json"] == {"n": 3}
    assert state["kv"] == {"name": "x", "size": "4"}
    assert state["text"] == "hello"


def test_invalid_json_output_fails_with_a_reason(start):
    run, driver = start("""
name: badjson
steps:
  - id: parse
    type: shell_command
    command: "echo not-json"
    output_format: json
""")
    answer = driver.next_step()
    assert answer.status == "failed"
    assert "parse" in answer.error and "not valid JSON" in answer.error


def test_shell_timeout_kills_the_command(start):
    run, driver = start("""
name: slow
steps:
  - id: sleepy
    type: shell_command
    command: "sleep 30"
    timeout: 300
""")
    answer = driver.next_step()
    assert answer.status == "failed"
    assert "timeout of 300 ms" in answer.error


def test_shell_output_is_capped_with_a_note(start):
    run, driver = start(f"""
name: chatty
steps:
  - type: shell_command
    command: "head -c {OUTPUT_CAP + 5000} /dev/zero | tr '\\\\0' x"
    state_update: {{path: raw.out}}
""")
    assert driver.next_step().status == "completed"
    out = run.states["main"].flattened()["out"]
    assert out.startswith("x" * 1000)
    assert "[output truncated: 5000 more bytes not kept" in out


def test_lines_drop_only_the_trailing_empty_line():
    assert parse_output("a\n\nb\n", "lines") == ["a", "", "b"]
    assert parse_output("", "lines") == []


def test_agent_prompt_response_schema_rejects_then_accepts(start):
    run, driver = start("""
name: schema
steps:
  - id: review
    type: agent_prompt
    prompt: "Review"
    response_schema:
      type: object
      properties: {findings: {type: array, items: {type: string}}}
      required: [findings]
    state_update: {path: raw.review}
""")
    step = driver.next_step().step
    assert step["type"] == "agent_prompt" and step["definition"]["response_schema"]["required"] == ["findings"]
    bad = driver.complete(None, "review", result='{"findings": "none"}')
    assert bad.success is False and "findings" in bad.error
    good = driver.complete(None, "review", result='{"findings": ["ok"]}')  # a JSON string is parsed
    assert good.success is True and good.status == "completed"
    assert run.states["main"].flattened()["review"] == {"findings": ["ok"]}


def test_agent_shell_command_is_quoted_and_its_output_parsed(start, tmp_path):
    run, driver = start("""
name: agentsh
default_state:
  raw: {name: "a b; rm -rf x"}
steps:
  - id: list
    type: agent_shell_command
    command: "echo {{ name }}"
    output_format: lines
    state_update: {path: raw.out}
""", project_dir=tmp_path)
    step = driver.next_step().step
    assert step["definition"]["command"] == "echo 'a b; rm -rf x'"
    ScriptedAgent(driver, cwd=tmp_path).run()
    assert run.states["main"].flattened()["out"] == ["a b; rm -rf x"]


def test_exit_with_failed_status_fails_the_workflow(start):
    run, driver = start("""
name: bail
steps:
  - type: exit
    status: failed
    message: "nothing to do here"
""")
    answer = driver.next_step()
    assert answer.status == "failed" and "nothing to do here" in answer.error


def test_retry_workflow_starts_over_then_fails(start, tmp_path):
    run, driver = start(f"""
name: again
error_handling:
  on_error: retry_workflow
  max_retries: 2
steps:
  - type: shell_command
    command: "echo x >> {tmp_path}/runs; exit 1"
""")
    answer = driver.next_step()
    assert answer.status == "failed"
    assert (tmp_path / "runs").read_text().count("x") == 3  # first run + 2 retries


def test_two_sub_agents_pulling_one_task_do_no_harm(start):
    run, driver = start("""
name: dup
default_state: {raw: {log: []}}
steps:
  - id: fan
    type: parallel_foreach
    items: [1]
    sub_agent_task: t
sub_agent_tasks:
  t:
    steps:
      - id: a
        type: mcp_call
        mcp: {method: m}
      - type: state_update
        path: raw.log
        operation: append
        value: "{{ item }}"
""")
    task_id = driver.next_step().step["definition"]["tasks"][0]["task_id"]
    barrier = threading.Barrier(2)
    results = []

    def sub_agent() -> None:
        step = driver.next_step(task_id).step
        barrier.wait()
        results.append(driver.complete(task_id, step["id"], result="done"))

    threads = [threading.Thread(target=sub_agent) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.success for r in results)
    assert run.states["main"].flattened()["log"] == [1]  # the step's effects happened once
    assert run.threads[task_id].status == "completed"


def test_a_bare_condition_reading_a_missing_name_is_false(start):
    """`condition: "absent"` evaluates to undefined, which JavaScript treats as false."""
    run, driver = start("""
name: undefined-condition
steps:
  - type: conditional
    condition: "absent"
    then:
      - type: user_message
        message: "wrong branch"
    else:
      - type: user_message
        message: "else branch"
""")
    assert driver.next_step().messages == ["else branch"]


def test_a_shell_step_with_templates_everywhere_crosses_into_v8_once(start, engine):
    run, driver = start("""
name: one-crossing
default_state:
  raw: {files: ["a b", "c"], why: "lint"}
steps:
  - id: run
    type: agent_shell_command
    command: "echo {{ files.map(f => f.toUpperCase()).join(' ') }}"
    reason: "{{ why.toUpperCase() }} for {{ files.length }} files"
""")
    before = engine.stats.v8_calls
    step = driver.next_step().step
    assert engine.stats.v8_calls - before == 1
    assert step["definition"]["command"] == "echo 'A B C'"
    assert step["definition"]["reason"] == "LINT for 2 files"
