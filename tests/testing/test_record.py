"""`test --record`: a finished instance becomes a case that passes when it is run.

The instances here are driven through the real `WorkflowService` (what the MCP tools call),
with real shell commands; the recorded case is then run by `aromcp-workflows test` with no
command running for real (its `shell:` stubs replay them).
"""

from __future__ import annotations

from typing import Any

from ruamel.yaml import YAML

from tests.testing.conftest import Project

WORKFLOW = """\
name: "demo:rec"
default_state:
  raw: { started: "{{ now() }}", id: "{{ uuid() }}" }
steps:
  - id: listing
    type: shell_command
    command: "seq 1 400"
    output_format: lines
    state_update: { path: raw.numbers }
  - id: odd
    type: shell_command
    command: "test -f nothing-[here]*"
    on_error: continue
    state_update: { path: raw.odd_exit, value: "{{ result.exit_code }}" }
  - id: pick
    type: user_input
    prompt: "How many?"
    validation: { pattern: "^[0-9]+$", error_message: "a number" }
    state_update: { path: raw.count }
  - id: fan
    type: parallel_foreach
    items: ["a", "b"]
    sub_agent_task: work
    on_sub_agent_error: { strategy: continue }
  - type: user_message
    message: "picked {{ count }} of {{ numbers.length }}, at {{ started }}"
sub_agent_tasks:
  work:
    steps:
      - id: look
        type: mcp_call
        mcp: { method: look, params: { at: "{{ item }}" } }
        state_update: { path: "raw.seen.{{ item }}" }
"""


def drive(project: Project) -> str:
    """An instance run to its end through the service, as an agent would."""
    service = project.service()
    workflow_id = service.start("demo:rec").workflow_id
    step = service.next_step(workflow_id).step
    assert step is not None and step["id"] == "pick"
    refused = service.step_complete(workflow_id, "pick", result="many")
    assert not refused.success
    step = service.step_complete(workflow_id, "pick", result="7").next_step
    assert step is not None and step["type"] == "parallel_tasks"
    for task in step["definition"]["tasks"]:
        task_id = task["task_id"]
        inner = service.next_step(workflow_id, task_id).step
        assert inner is not None
        if task_id.endswith("_0"):
            service.step_complete(workflow_id, inner["id"], result={"found": task_id}, task_id=task_id)
        else:
            service.step_complete(workflow_id, inner["id"], status="failed", error="cannot look", task_id=task_id)
    done = service.step_complete(workflow_id, step["id"])
    assert done.status == "completed", done
    return workflow_id


def load(path: Any) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def test_a_real_run_becomes_a_case_that_passes(project: Project) -> None:
    project.write("demo:rec.yaml", WORKFLOW)
    workflow_id = drive(project)
    out = project.workflows / "demo:rec.test.yaml"
    done = project.cli("test", "--record", workflow_id, "--out", str(out), "--store", str(project.store))
    assert done.code == 0, done.out + done.err
    assert f"wrote case 'recorded {workflow_id}' to {out}" in done.out
    assert "  left out expect.state.started: it differs from run to run" in done.out
    assert "  left out expect.state.id: it differs from run to run" in done.out
    assert "  left out expect.messages: 'picked 7 of 400, at " in done.out
    case = load(out)["cases"][0]
    assert case["answers"]["pick"] == [{"result": "many"}, {"result": "7"}]
    assert case["answers"]["work_0.look"] == {"result": {"found": "work_0"}}
    assert case["answers"]["work_1.look"] == {"error": "cannot look"}
    stubs = {stub["match"]: stub["results"] for stub in case["shell"]}
    assert stubs["test -f nothing-[[]here][*]"] == [{"exit_code": 1}]
    assert stubs["seq 1 400"][0]["stdout"] == "".join(f"{n}\n" for n in range(1, 401))  # 1,492 characters
    assert case["expect"]["status"] == "completed"
    assert case["expect"]["state"]["count"] == "7" and "started" not in case["expect"]["state"]
    run = project.cli("test")
    assert run.code == 0 and f"demo:rec.test.yaml::recorded {workflow_id} PASSED" in run.out, run.out


def test_a_case_is_added_below_the_cases_already_written(project: Project) -> None:
    project.write("demo:rec.yaml", WORKFLOW)
    workflow_id = drive(project)
    before = ("# my tests: keep this comment\ncases:\n  - name: mine    # and this one\n"
              "    answers: { pick: \"1\", look: {} }\n    shell:\n      - { match: \"*\", results: [{}] }\n"
              "    expect: { state: { count: \"1\" } }\n")
    out = project.write("demo:rec.test.yaml", before)
    args = ("test", "--record", workflow_id, "--out", str(out), "--store", str(project.store))
    assert project.cli(*args, "--name", "from production").code == 0
    assert project.cli(*args, "--name", "from production").code == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith(before)
    assert [c["name"] for c in load(out)["cases"]] == ["mine", "from production", "from production (2)"]
    assert project.cli("test").out.count("PASSED") == 3


def test_recording_refuses_what_it_cannot_write(project: Project) -> None:
    project.write("demo:rec.yaml", WORKFLOW)
    service = project.service()
    waiting = service.start("demo:rec").workflow_id
    service.next_step(waiting)
    store = ("--store", str(project.store))
    out = str(project.workflows / "demo:rec.test.yaml")
    done = project.cli("test", "--record", waiting, "--out", out, *store)
    assert done.code == 2
    assert f"instance {waiting} is running; record a finished one (completed, failed or cancelled)" in done.err
    done = project.cli("test", "--record", "wf_nope", "--out", out, *store)
    assert done.code == 2 and "No workflow instance with id 'wf_nope'" in done.err
    service.complete(waiting, "cancelled")
    done = project.cli("test", "--record", waiting, "--out", str(project.root / "demo:rec.test.yaml"), *store)
    assert done.code == 2 and "must sit beside the workflow file" in done.err
    done = project.cli("test", "--record", waiting, "--out", str(project.workflows / "rec.yaml"), *store)
    assert done.code == 2 and "must be a test file named <workflow>.test.yaml" in done.err
    project.write("demo:rec.test.yaml", "cases: oops\n")
    done = project.cli("test", "--record", waiting, "--out", out, *store)
    assert done.code == 2 and "is not a valid test file; fix it first" in done.err
    assert (project.workflows / "demo:rec.test.yaml").read_text() == "cases: oops\n"


def test_a_replay_that_went_elsewhere_leaves_nothing_out(project: Project) -> None:
    """A command holding a secret is recorded as `***`, so its stub matches nothing and the
    replay fails: what it ended with is not run-to-run noise, and `answers` (the same on
    every run) was left out as if it were.  Found by an author-at-the-command-line probe."""
    project.write("demo:sec.yaml", 'name: "demo:sec"\nsteps:\n  - id: stamp\n    type: shell_command\n'
                                   '    command: "echo token=ghp_abcdefghijklmnopqrstuvwxyz0123456789"\n'
                                   '  - id: ask\n    type: user_input\n    prompt: "Ship?"\n'
                                   '    state_update: { path: raw.answer }\n')
    service = project.service()
    workflow_id = service.start("demo:sec").workflow_id
    assert service.next_step(workflow_id).step["id"] == "ask"
    assert service.step_complete(workflow_id, "ask", result="yes").status == "completed"
    out = project.workflows / "demo:sec.test.yaml"
    done = project.cli("test", "--record", workflow_id, "--out", str(out), "--store", str(project.store))
    assert done.code == 1, done.out + done.err
    assert "left out" not in done.out, done.out
    assert "note: secret values were written as ***" in done.out
    assert "command matched no stub: echo token=" in done.out
    assert load(out)["cases"][0]["expect"]["state"]["answer"] == "yes"
