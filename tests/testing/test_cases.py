"""Running cases: what passes, what fails and how a failure reads, stubs and real commands.

Each test writes a workflow and its test file into a tmp project and runs
`aromcp-workflows test` in this process (the real CLI entry point, the real service, V8
and SQLite); the assertions are on what it prints and its exit status.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.testing.conftest import Project

DEPLOY = """\
name: "demo:deploy"
inputs:
  target: { type: string, default: "staging" }
steps:
  - id: build
    type: shell_command
    command: "make build"
    on_error: continue
    state_update: { path: raw.build_exit, value: "{{ result.exit_code }}" }
  - id: built
    type: conditional
    condition: "{{ build_exit === 0 }}"
    then:
      - id: confirm
        type: user_input
        prompt: "Deploy to {{ inputs.target }}?"
        choices: ["yes", "no"]
        state_update: { path: raw.confirmed }
      - id: deploy
        type: shell_command
        when: "{{ confirmed === 'yes' }}"
        command: "make deploy TARGET={{ inputs.target }}"
      - type: user_message
        message: "Deploy to {{ inputs.target }}: {{ confirmed === 'yes' ? 'done' : 'skipped' }}."
    else:
      - type: exit
        status: failed
        message: "The build failed (exit code {{ build_exit }})."
"""

STUBS = """\
    shell:
      - match: "make build"
        results: [{ exit_code: 0 }]
      - match: "make deploy*"
        results: [{ exit_code: 0 }]
"""


@pytest.fixture
def deploy(project: Project) -> Project:
    project.write("demo:deploy.yaml", DEPLOY)
    return project


def cases(text: str) -> str:
    return "cases:\n" + text


def test_a_passing_case_passes_and_a_wrong_expectation_shows_path_and_both_values(deploy: Project) -> None:
    deploy.write("demo:deploy.test.yaml", cases(f"""\
  - name: deploys
    answers: {{ confirm: "yes" }}
{STUBS}    expect:
      state: {{ confirmed: "yes", build_exit: 0 }}
      messages: ["Deploy to staging: done."]
  - name: wrong
    inputs: {{ target: prod }}
    answers: {{ confirm: "yes" }}
{STUBS}    expect:
      state: {{ confirmed: "no", missing: 1 }}
"""))
    done = deploy.cli("test")
    assert done.code == 1
    lines = done.out.splitlines()
    assert lines[:2] == [".aromcp/workflows/demo:deploy.test.yaml::deploys PASSED",
                         ".aromcp/workflows/demo:deploy.test.yaml::wrong FAILED"]
    assert ".aromcp/workflows/demo:deploy.test.yaml:12: case 'wrong'" in lines
    assert '  state.confirmed: expected "no", got "yes"' in lines
    assert "  state.missing: expected 1, got (missing)" in lines
    history = lines[lines.index("  last steps:") + 1:]
    assert history[0].split() == ["success", "build", "(shell_command)"]
    assert "'Deploy to prod: done.'" in done.out
    assert lines[-1].strip("= ").startswith("1 failed, 1 passed in ")


def test_a_command_no_stub_matches_fails_the_case_and_names_it(deploy: Project) -> None:
    deploy.write("demo:deploy.test.yaml", cases("""\
  - name: forgot deploy
    answers: { confirm: "yes" }
    shell:
      - match: "make build"
        results: [{ exit_code: 0 }]
"""))
    done = deploy.cli("test")
    assert done.code == 1
    assert ("  command matched no stub: make deploy TARGET=staging  (add a `shell:` entry whose match fits it)"
            in done.out.splitlines())


def test_consecutive_results_are_used_in_order_and_the_last_repeats(project: Project) -> None:
    project.write("demo:poll.yaml", """\
name: "demo:poll"
default_state: { raw: { codes: [] } }
steps:
  - id: poll
    type: foreach
    items: [1, 2, 3, 4]
    steps:
      - type: shell_command
        command: "check"
        on_error: continue
        state_update: { path: raw.codes, operation: append, value: "{{ result.exit_code }}" }
""")
    project.write("demo:poll.test.yaml", cases("""\
  - name: two failures then success
    shell:
      - match: "check"
        results: [{ exit_code: 3 }, { exit_code: 2 }, { exit_code: 0 }]
    expect:
      state: { codes: [3, 2, 0, 0] }
"""))
    assert project.cli("test").code == 0


def test_a_step_with_no_answer_stops_the_case_waiting(deploy: Project) -> None:
    deploy.write("demo:deploy.test.yaml", cases(f"""\
  - name: asks before deploying
{STUBS}    expect:
      status: waiting
      state: {{ build_exit: 0 }}
  - name: not answered
{STUBS}    expect:
      status: completed
"""))
    done = deploy.cli("test")
    assert "demo:deploy.test.yaml::asks before deploying PASSED" in done.out
    assert '  status: expected "completed", got "waiting"' in done.out
    assert ("  stopped: no answer for step built.confirm (user_input) of the main thread: add `confirm:` (or the "
            "exact step id `built.confirm:`) to the answers file") in done.out


def test_expectations_error_messages_and_exact_values(deploy: Project) -> None:
    deploy.write("demo:deploy.test.yaml", cases("""\
  - name: failing build
    shell:
      - match: "make build"
        results: [{ exit_code: 2 }]
    expect:
      error: "The build failed (exit code 2)."
      state: { build_exit: 2 }
  - name: true is not 1
    shell:
      - match: "make build"
        results: [{ exit_code: 1 }]
    expect:
      status: failed
      state: { build_exit: true }
  - name: messages out of order
    answers: { confirm: "no" }
    shell:
      - match: "make build"
        results: [{ exit_code: 0 }]
    expect:
      messages: ["Deploy to staging: skipped.", "Deploy to staging: skipped."]
  - name: a refused input
    inputs: { target: [1] }
    expect:
      status: not_started
      error: "input 'target'"
"""))
    done = deploy.cli("test")
    assert "demo:deploy.test.yaml::failing build PASSED" in done.out
    assert "  state.build_exit: expected true, got 1" in done.out
    assert ('  messages[1]: expected "Deploy to staging: skipped." (shown, but before the message expected '
            'ahead of it); messages shown: ["Deploy to staging: skipped."]') in done.out
    assert "demo:deploy.test.yaml::a refused input PASSED" in done.out


def test_without_shell_commands_run_for_real_in_a_throwaway_project(project: Project) -> None:
    project.write("demo:files.yaml", """\
name: "demo:files"
steps:
  - id: listing
    type: shell_command
    command: "ls -R . | sort && touch made-here"
    output_format: lines
    state_update: { path: raw.files }
  - id: agent_lists
    type: agent_shell_command
    command: "cat data/in.txt"
    state_update: { path: raw.agent_saw }
""")
    project.write("demo:files.test.yaml", cases("""\
  - name: sees only its project files
    project:
      data/in.txt: "hello"
    expect:
      state: { agent_saw: "hello" }
  - name: a stub answers the agent's command too
    shell:
      - match: "ls*"
        results: [{ stdout: "x\\n" }]
      - match: "cat *"
        results: [{ stdout: "from a stub" }]
    expect:
      state: { files: [x], agent_saw: "from a stub" }
"""))
    done = project.cli("test", "--junit", "report.xml")
    assert done.code == 0, done.out
    assert not (project.root / "made-here").exists()  # the command ran in the throwaway folder
    suite = ET.parse(project.root / "report.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "0"


def test_junit_keeps_each_failure_and_k_selects_cases(deploy: Project) -> None:
    deploy.write("demo:deploy.test.yaml", cases(f"""\
  - name: deploys
    answers: {{ confirm: "yes" }}
{STUBS}  - name: wrong
    answers: {{ confirm: "yes" }}
{STUBS}    expect: {{ state: {{ confirmed: "no" }} }}
  - name: other
    answers: {{ confirm: "no" }}
{STUBS}"""))
    done = deploy.cli("test", "-k", "deploys or wrong", "--junit", str(deploy.root / "out" / "j.xml"))
    assert done.code == 1 and "other" not in done.out
    root = ET.parse(deploy.root / "out" / "j.xml").getroot()
    cases_ = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases_) == {"deploys", "wrong"}
    assert cases_["wrong"].get("classname") == "demo:deploy.test.yaml" and cases_["wrong"].get("line") == "9"
    failure = cases_["wrong"].find("failure")
    assert failure is not None and 'state.confirmed: expected "no", got "yes"' in (failure.text or "")
    assert deploy.cli("test", "-k", "not wrong and not other").out.count("PASSED") == 1


PARALLEL = """\
name: "demo:fan"
default_state: { raw: { done: [] } }
steps:
  - id: fan
    type: parallel_foreach
    items: ["a", "b", "c"]
    max_parallel: 2
    sub_agent_task: work
  - type: user_message
    message: "done: {{ done.length }}"
sub_agent_tasks:
  work:
    steps:
      - id: ask
        type: agent_prompt
        prompt: "Work on {{ item }}"
        state_update: { path: raw.done, operation: append }
      - type: user_message
        message: "{{ item }} finished"
"""


def test_sub_agent_tasks_run_in_task_order_so_messages_are_always_the_same(project: Project) -> None:
    project.write("demo:fan.yaml", PARALLEL)
    project.write("demo:fan.test.yaml", cases("""\
  - name: every task
    answers:
      ask:
        - when: { prompt: "Work on b" }
          result: B
        - result: x
    expect:
      state: { done: [x, B, x] }
      messages: ["a finished", "b finished", "c finished", "done: 3"]
"""))
    for _ in range(3):
        assert project.cli("test").code == 0


def test_the_session_api_gives_outcomes(deploy: Project) -> None:
    """`TestSession` is what the CLI and the pytest plugin drive."""
    from aromcp_workflows.testing.session import TestSession

    path = deploy.write("demo:deploy.test.yaml", cases(f"""\
  - name: deploys
    answers: {{ confirm: "yes" }}
{STUBS}"""))
    session = TestSession(deploy.root, coverage=True)
    try:
        test_file = session.load(Path(path))
        outcome = session.run(test_file, test_file.cases[0])
    finally:
        session.close()
    assert outcome.passed and outcome.status == "completed" and outcome.workflow_id
    assert outcome.state["confirmed"] == "yes" and outcome.messages == ["Deploy to staging: done."]
    assert outcome.coverage is not None
