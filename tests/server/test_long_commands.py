"""Long server-side commands as a user who trusts the server with their build relies on them.

Every test drives a real server subprocess over stdio with `mcp.Client(StdioServerParameters)`
and real commands that log each start and end (with the time) to `runs.log`, so a test sees
how often a command ran and when it ended:

- a client that gives up on a call (a read timeout, or a cancelled call: the SDK sends
  `notifications/cancelled`) never stops the command and never makes it run twice; the next
  `workflow_get_next_step` waits on the same command and hands out the following step within
  2 s of its end, its result in state;
- `AROMCP_CALL_BUDGET_S`: a call answers at the budget with a `wait` step and `waiting_for`,
  and the command runs once; a sub-agent's task and `run` go on through those wait steps;
- a cancel — `workflow_complete(status: cancelled)`, `aromcp-workflows cancel ID`, the page's
  cancel — stops the command's whole process group, background children included, in 2 s;
- a step's `timeout` kills the whole group and names the timeout, and `on_error` applies;
- a command printing 50 MB stays within the output cap; replies stay under 1 MB, saying so;
- the output as it comes: progress messages carry the latest line, `debug` and
  `WorkflowService.command_output` show it while the command runs.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from srv_helpers import PYTHON, ok, serve_args, server_env

pytestmark = pytest.mark.slow

JOB = """\
name: job
default_state:
  raw: {out: "", fallback_used: false}
steps:
  - id: a
    type: agent_prompt
    prompt: "first"
  - id: sh
    type: shell_command
    command: "COMMAND"
    TIMEOUT
    state_update: {path: raw.out, value: "{{ result.stdout }}"}
  - id: b
    type: agent_prompt
    prompt: "second"
"""
# Logs its start and its end (pid, wall-clock time), printing a line a beat.
COUNTED = ('echo "start $$ $(date +%s.%N)" >> runs.log; for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep BEAT; done; '
           'echo "end $$ $(date +%s.%N)" >> runs.log; echo result-$$')
# Two background sleeps and the shell that waits for them: every pid in `pids`.
GROUP = "sleep 60 & echo $! >> pids; sleep 60 & echo $! >> pids; echo $$ >> pids; echo waiting; wait"


class Project:
    """A project with the `job` workflow (its command and options given), a store and a
    commands directory, and the servers a test starts on them."""

    def __init__(self, root: Path, command: str, timeout: str = "", **env: str):
        self.root = root / "project"
        (self.root / ".aromcp" / "workflows").mkdir(parents=True)
        text = JOB.replace("COMMAND", command.replace('"', '\\"')).replace("TIMEOUT", timeout or "on_error: fail")
        (self.root / ".aromcp" / "workflows" / "job.yaml").write_text(text)
        self.home = root / "home"
        self.home.mkdir()
        self.store = root / "store.sqlite3"
        self.env = server_env(self.home, self.store, AROMCP_COMMANDS_DIR=str(root / "commands"),
                              AROMCP_PROGRESS_INTERVAL="0.2", **env)

    @asynccontextmanager
    async def client(self) -> AsyncIterator[Any]:
        params = StdioServerParameters(command=PYTHON, args=serve_args(self.root, self.store), cwd=str(self.root),
                                       env=self.env)
        async with Client(params, mode="legacy") as client:
            yield client

    def runs(self) -> list[list[str]]:
        log = self.root / "runs.log"
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []

    def service(self) -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=self.root, store_path=self.store, home=self.home)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(self.root), *args,
                               "--store", str(self.store)], env=self.env, cwd=self.root, capture_output=True,
                              text=True, timeout=60)


async def at_the_command(project: Project, client: Any) -> tuple[str, str]:
    """An instance whose agent step `a` is handed out: (workflow id, step id)."""
    wid = (await ok(client, "workflow_start", {"workflow": "job"}))["workflow_id"]
    step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
    assert step["id"] == "a"
    return wid, step["id"]


async def until(check: Any, timeout: float = 20, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone: it runs no more)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def group_pids(project: Project) -> list[int]:
    path = project.root / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def group_gone(project: Project, within_s: float = 1.0) -> bool:
    """Whether every process of the group is gone within `within_s` (a SIGKILLed process
    leaves once it is scheduled again: on a loaded machine, not at the same instant)."""
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in group_pids(project)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- clients that give up --------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["read_timeout", "cancelled"])
async def test_a_client_that_gives_up_never_stops_the_command_nor_runs_it_twice(tmp_path: Path, how: str) -> None:
    project = Project(tmp_path, COUNTED.replace("BEAT", "0.25"))
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        args = {"workflow_id": wid, "step_id": step_id, "result": "ok"}
        if how == "read_timeout":
            with pytest.raises(Exception):  # noqa: B017 - the SDK's own timeout error; it sends notifications/cancelled
                await client.call_tool("workflow_step_complete", args, read_timeout_seconds=0.5)
        else:
            call = asyncio.ensure_future(client.call_tool("workflow_step_complete", args))
            await until(lambda: project.runs(), what="the command to start")
            call.cancel()  # the SDK tells the server: notifications/cancelled
            with pytest.raises(asyncio.CancelledError):
                await call
        assert [r[0] for r in project.runs()] == ["start"], "the command did not start, or ended already"
        answer = await ok(client, "workflow_get_next_step", {"workflow_id": wid})  # waits on the same command
        answered = time.time()
        runs = project.runs()
        assert [r[0] for r in runs] == ["start", "end"] and runs[0][1] == runs[1][1], f"ran more than once: {runs}"
        assert answer["step"]["id"] == "b"
        assert answered - float(runs[1][2]) < 2.0, "the following step came more than 2 s after the command ended"
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"].endswith(f"result-{runs[0][1]}\n") and "line-8" in state["out"]


async def test_a_call_budget_answers_in_time_and_the_command_runs_once(tmp_path: Path) -> None:
    project = Project(tmp_path, COUNTED.replace("BEAT", "0.3"), AROMCP_CALL_BUDGET_S="0.8")
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        began = time.monotonic()
        first = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": step_id, "result": "ok"})
        assert time.monotonic() - began < 2.0, "the call did not answer at its budget"
        assert first["success"] and first["status"] == "running"
        waiting = first["waiting_for"]
        assert waiting["kind"] == "command" and waiting["step_id"] == "sh" and "line-$i" in waiting["command"]
        assert isinstance(waiting["for_s"], float) and "call workflow_get_next_step" in waiting["instructions"]
        # a step, not null: an agent that loops until `step: null` (the prompts' loop) goes on
        wait = first["next_step"]
        assert wait["id"] == "sh.wait" and wait["type"] == "wait" and wait["definition"]["task_ids"] == []
        assert "still running" in wait["definition"]["reason"] and "Complete this step" in wait["instructions"]
        answers = [await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": wait["id"]})]
        assert answers[0]["success"], "completing the wait step is not an error: it waits on the command"
        while answers[-1]["next_step"]["type"] == "wait":
            assert answers[-1]["status"] == "running" and answers[-1]["waiting_for"]["step_id"] == "sh"
            answers.append(await ok(client, "workflow_get_next_step", {"workflow_id": wid}))
            answers[-1]["next_step"] = answers[-1]["step"]
        answered, runs = time.time(), project.runs()
        assert len(answers) >= 2, "no call waited past its budget"
        assert [r[0] for r in runs] == ["start", "end"] and answers[-1]["step"]["id"] == "b"
        assert answered - float(runs[1][2]) < 2.0
        assert "waiting_for" not in answers[-1]
        late = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": "sh.wait"})
        assert late["success"] and late["next_step"]["id"] == "b", "a late wait completion is harmless"
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"].endswith(f"result-{runs[0][1]}\n")


FAN_OUT = """\
name: fan
steps:
  - id: pf
    type: parallel_foreach
    items: "{{ ['t0'] }}"
    sub_agent_task: job
sub_agent_tasks:
  job:
    steps:
      - id: sh
        type: shell_command
        command: "sleep 1.5; echo built"
        state_update: {path: raw.built}
      - id: check
        type: agent_prompt
        prompt: "check"
"""


async def test_a_sub_agent_past_the_call_budget_gets_a_wait_step_and_its_task_goes_on(tmp_path: Path) -> None:
    """A sub-agent pulls its task's steps until `step: null`: a budget answer must not end
    its task, and one that reports the wait step as failed (the old prompt's rule for a type
    it does not know) does not fail it either."""
    project = Project(tmp_path, "true", AROMCP_CALL_BUDGET_S="0.4")
    (project.root / ".aromcp" / "workflows" / "fan.yaml").write_text(FAN_OUT)
    async with project.client() as client:
        wid = (await ok(client, "workflow_start", {"workflow": "fan"}))["workflow_id"]
        parallel = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        task = parallel["definition"]["tasks"][0]["task_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid, "task_id": task}))["step"]
        waits = 0
        while step["type"] == "wait":
            waits += 1
            assert "task_id" in step["instructions"] and step["id"].endswith(".wait")
            reply = await ok(client, "workflow_step_complete", {
                "workflow_id": wid, "task_id": task, "step_id": step["id"], "status": "failed", "error": "unknown"})
            assert reply["success"] and reply["status"] == "running", reply
            step = reply["next_step"]
        assert waits >= 1 and step["definition"]["prompt"] == "check"
        done = await ok(client, "workflow_step_complete", {"workflow_id": wid, "task_id": task, "step_id": step["id"],
                                                           "result": "fine"})
        assert done["next_step"] is None and done["status"] == "completed"
        end = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": parallel["id"]})
        assert end["success"] and end["status"] == "completed"


SLOW_THEN_TELL = """\
name: slow
steps:
  - id: sh
    type: shell_command
    command: "sleep 1.2; echo done"
    state_update: {path: raw.out}
  - type: user_message
    message: "out was {{ raw.out }}"
"""


def test_run_goes_on_past_the_call_budget(tmp_path: Path) -> None:
    """`aromcp-workflows run` drives its server under the same budget: it waits on the
    command through its wait steps instead of ending the run as `running`."""
    project = Project(tmp_path, "true", AROMCP_CALL_BUDGET_S="0.3")
    (project.root / ".aromcp" / "workflows" / "slow.yaml").write_text(SLOW_THEN_TELL)
    done = project.cli("run", "slow")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "status: completed" in done.stdout and "out was done" in done.stdout, done.stdout
    assert "sh.wait" in done.stdout and "still running" in done.stdout


async def test_a_seed_style_run_goes_on_past_the_call_budget(tmp_path: Path) -> None:
    """Seed style (`workflow_get_next_step` after every completion, the two answers compared):
    after a wait step the command may end between the two calls, which is no disagreement."""
    from aromcp_workflows.runner.run import run_workflow

    project = Project(tmp_path, "true")
    (project.root / ".aromcp" / "workflows" / "ticks.yaml").write_text(TICKS)
    shown = io.StringIO()
    outcome = await run_workflow("ticks", {}, None, project.root, project.store, shown,
                                 env={**project.env, "AROMCP_CALL_BUDGET_S": "0.25"}, seed_style=True)
    assert outcome.status == "completed", (outcome.error, shown.getvalue())
    assert outcome.messages == ["ticked 1", "ticked 2", "ticked 3", "ticked 4"]


TICKS = """\
name: ticks
steps:
  - id: loop
    type: foreach
    items: "{{ [1, 2, 3, 4] }}"
    steps:
      - id: sh
        type: shell_command
        command: "sleep 0.6"
      - type: user_message
        message: "ticked {{ item }}"
"""


# -- stopped when asked --------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["mcp", "cli", "page"])
async def test_a_cancel_stops_the_whole_process_group(tmp_path: Path, how: str) -> None:
    project = Project(tmp_path, GROUP)
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        call = asyncio.ensure_future(client.call_tool("workflow_step_complete",
                                                      {"workflow_id": wid, "step_id": step_id, "result": "ok"}))
        await until(lambda: len(group_pids(project)) == 3, what="the command's processes")
        pids = group_pids(project)
        assert all(alive(pid) for pid in pids)
        cancelled_at = time.monotonic()
        if how == "mcp":
            assert (await ok(client, "workflow_complete", {"workflow_id": wid, "status": "cancelled"}))["success"]
        elif how == "cli":
            done = await asyncio.to_thread(project.cli, "cancel", wid)
            assert done.returncode == 0, done.stderr
        else:
            await asyncio.to_thread(cancel_from_the_page, project, wid)
        await until(lambda: not any(alive(pid) for pid in pids), timeout=2.0 - (time.monotonic() - cancelled_at),
                    what=f"the command's processes to stop ({how})")
        ended = (await asyncio.wait_for(call, 10)).structured_content
        assert ended["status"] == "cancelled" and ended["next_step"] is None
        status = await ok(client, "workflow_status", {"workflow_id": wid})
        assert status["status"] == "cancelled"
        await until(lambda: not any((tmp_path / "commands").iterdir()), timeout=5, what="the run directory to go")


TOKEN = "cancel-test-token-0123456789abcdef"


def cancel_from_the_page(project: Project, wid: str) -> None:
    """The page's cancel action: a web view process of its own (`ui --actions`), one POST with
    the bearer token the ui accepts (a person's browser sends its session cookie instead)."""
    token_file = project.root.parent / "ui.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    ui = subprocess.Popen([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(project.root), "ui", "--port", "0",
                           "--store", str(project.store), "--actions", "--auth-token-file", str(token_file)],
                          cwd=project.root, env=project.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert ui.stdout is not None
        url = urllib.parse.urlsplit(ui.stdout.readline().rsplit(" ", 1)[-1].strip())
        origin = f"{url.scheme}://{url.netloc}"
        request = urllib.request.Request(f"{origin}{url.path.rstrip('/')}/api/instances/{wid}/cancel", method="POST",
                                         data=b"", headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    finally:
        ui.terminate()
        ui.wait(10)


async def test_a_step_timeout_kills_the_whole_group_and_on_error_applies(tmp_path: Path) -> None:
    project = Project(tmp_path, GROUP, timeout="timeout: 1000\n    on_error: continue\n    fallback_value: gave-up")
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        began = time.monotonic()
        answer = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": step_id, "result": "ok"})
        assert 0.9 < time.monotonic() - began < 5
        assert answer["next_step"]["id"] == "b", "on_error: continue did not go on"
        assert group_gone(project), "a process of the group outlived the timeout"
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"] == "gave-up"
        info = await ok(client, "workflow_debug_info", {"workflow_id": wid})
        shell = [e for e in info["step_history"] if e["step_id"] == "sh"]
        assert shell and "timeout of 1000 ms" in json.dumps(shell), shell


async def test_a_step_timeout_fails_the_step_naming_the_timeout(tmp_path: Path) -> None:
    project = Project(tmp_path, GROUP, timeout="timeout: 800")
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        answer = await ok(client, "workflow_step_complete", {"workflow_id": wid, "step_id": step_id, "result": "ok"})
        assert answer["status"] == "failed" and "timeout of 800 ms" in answer["error"], answer
        assert group_gone(project)


async def test_fifty_megabytes_of_output_stay_within_the_cap(tmp_path: Path) -> None:
    from aromcp_workflows.shell.rundir import OUTPUT_CAP

    project = Project(tmp_path, "head -c 52428800 /dev/zero | tr '\\\\0' a; echo; echo done >&2")
    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        result = await client.call_tool("workflow_step_complete", {"workflow_id": wid, "step_id": step_id,
                                                                  "result": "ok"})
        assert not result.is_error and result.structured_content["next_step"]["id"] == "b"
        read = await client.call_tool("workflow_state_read", {"workflow_id": wid, "paths": ["raw.out"]})
        size = len(json.dumps(read.structured_content)) + sum(len(getattr(c, "text", "")) for c in read.content)
        assert size < 1_000_000, size  # structured content and its text copy together
        out = read.structured_content["state"]["raw.out"]
        assert len(out.encode()) <= OUTPUT_CAP + 200 and "[output truncated: " in out, out[-300:]
    stored = sum(f.stat().st_size for f in project.store.parent.glob("store.sqlite3*"))
    assert stored < 8 * OUTPUT_CAP, f"the store kept more than the cap: {stored} bytes"


# -- the output as it comes -------------------------------------------------------------------------
async def test_the_output_is_readable_while_the_command_runs(tmp_path: Path) -> None:
    project = Project(tmp_path, COUNTED.replace("BEAT", "0.4"))
    seen: list[str] = []

    async def progress(_done: float, _total: float | None, message: str | None) -> None:
        seen.append(message or "")

    async with project.client() as client:
        wid, step_id = await at_the_command(project, client)
        call = asyncio.ensure_future(client.call_tool(
            "workflow_step_complete", {"workflow_id": wid, "step_id": step_id, "result": "ok"},
            progress_callback=progress))
        await until(lambda: any("line-2" in m for m in seen), what="a progress message with an output line")
        assert any(m.startswith("step sh: command running for ") and m.endswith(": line-2") for m in seen), seen
        live = project.service().command_output(wid)
        assert live.running and live.source == "live" and live.step_id == "sh"
        assert live.stdout.text.startswith("line-1\nline-2\n") and live.stdout.start == 0 and not live.stdout.cut
        more = project.service().command_output(wid, stdout_since=live.stdout.end)
        assert more.stdout.start == live.stdout.end and "line-1" not in more.stdout.text
        debug = await asyncio.to_thread(project.cli, "debug", wid)
        assert debug.returncode == 0 and "line-2" in debug.stdout and "running" in debug.stdout, debug.stdout
        await asyncio.wait_for(call, 20)
    after = project.service().command_output(wid)
    assert not after.running and after.source == "history" and after.exit_code == 0
    assert "line-8" in after.stdout.text
    debug = project.cli("debug", wid)
    assert "line-8" in debug.stdout, debug.stdout
