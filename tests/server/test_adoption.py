"""A command whose server dies is adopted by the next server on the machine, not run again.

Found by the fault campaign (`benchmarks/chaos.py`, SIGKILL of the server at random moments):
commands run in a session of their own, so the first run outlived its server and finished;
the next server saw the owner's pid gone and ran the command again, sometimes while the
first run was still going.  Now the command's output and exit status go to files of a run
directory named in its claim (`shell.rundir`), and the next server waits for the running
command and takes its result.

Every test runs real servers over stdio (`rawstdio.RawServer`) and a real command that
appends one line to `runs.log` each time it starts and one when it ends, so a test sees
exactly how often it ran.  Where a test needs the command still running at some point, the
command waits for the test to open a gate (`Machine(sleep=None)`, `machine.release()`) rather
than for a clock: under load a server start can take longer than any sleep.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rawstdio import RawServer
from srv_helpers import PYTHON, TOKEN, free_port, serve_args, server_env, stop, wait_for_port

from tests.processes import alive

pytestmark = pytest.mark.slow

WORKFLOW = """\
name: adopt
default_state:
  raw: {out: "", code: -1}
steps:
  - id: a
    type: agent_prompt
    prompt: "first"
  - id: sh
    type: shell_command
    command: "echo start $$ >> runs.log; WAIT; echo end $$ >> runs.log; echo result-$$; exit 3"
    on_error: continue
    state_update: {path: raw.out, value: "{{ result.stdout }}"}
  - id: code
    type: state_update
    path: raw.code
    value: "{{ 1 }}"
  - id: b
    type: agent_prompt
    prompt: "second"
"""


GATE = "release"  # the file (in the project) a gated command waits for


class Machine:
    """A project, a store and a commands directory shared by the servers a test starts.

    The command sleeps `sleep` seconds, or with `sleep=None` runs until `release()`."""

    def __init__(self, root: Path, sleep: float | None, **env: str) -> None:
        self.root = root
        self.project = root / "project"
        (self.project / ".aromcp" / "workflows").mkdir(parents=True)
        wait = f"until [ -e {GATE} ]; do sleep 0.02; done" if sleep is None else f"sleep {sleep}"
        (self.project / ".aromcp" / "workflows" / "adopt.yaml").write_text(WORKFLOW.replace("WAIT", wait))
        self.home = root / "home"
        self.home.mkdir()
        self.store = root / "store.sqlite3"
        self.commands = root / "commands"
        self.env = {"AROMCP_COMMANDS_DIR": str(self.commands), **env}
        self.servers: list[RawServer] = []

    async def server(self) -> RawServer:
        started = await RawServer(serve_args(self.project, self.store), server_env(self.home, self.store, **self.env),
                                  self.project, self.root / f"server{len(self.servers)}.stderr").start()
        self.servers.append(started)
        return started

    def runs(self) -> list[str]:
        log = self.project / "runs.log"
        return log.read_text().split("\n")[:-1] if log.exists() else []

    def release(self) -> None:
        """Let a gated command end (it outlives every server: never leave it waiting)."""
        (self.project / GATE).touch()

    async def close(self) -> None:
        self.release()
        for server in self.servers:
            if server.proc is not None and server.proc.returncode is None:
                if server.proc.pid:
                    os.kill(server.proc.pid, signal.SIGCONT)
                await server.close()


async def shell_started(machine: Machine, server: RawServer) -> tuple[str, asyncio.Future[dict[str, Any]]]:
    """An instance whose agent step `a` is completed: the call that runs `sh` is in flight
    once `runs.log` shows the command started."""
    wid = (await server.call_tool("workflow_start", {"workflow": "adopt"}))["workflow_id"]
    first = (await server.call_tool("workflow_get_next_step", {"workflow_id": wid}))["step"]
    call = await server.send_request("tools/call", {"name": "workflow_step_complete", "arguments": {
        "workflow_id": wid, "step_id": first["id"], "result": "ok"}})
    deadline = time.monotonic() + 20
    while not machine.runs() or not claimed(machine):
        assert time.monotonic() < deadline, "the command never started, or its claim was never committed"
        await asyncio.sleep(0.02)
    return wid, call


def claimed(machine: Machine) -> bool:
    """Whether a command's claim is committed (on a store file the command starts first, and
    its run directory is marked once the claim is in the store: `app.launch`)."""
    return machine.commands.is_dir() and any((d / "claimed").exists() for d in machine.commands.iterdir())


def events(machine: Machine, wid: str, kind: str) -> list[dict[str, Any]]:
    from aromcp_workflows.store import open_store

    store = open_store(str(machine.store))
    try:
        return [e.data for e in store.history(wid, kinds=[kind])]
    finally:
        store.close()



async def orphaned(machine: Machine) -> str:
    """An instance whose command runs on while its server is SIGKILLed (its id)."""
    first = await machine.server()
    wid, _ = await shell_started(machine, first)
    await first.kill()
    return wid


async def taken_over(machine: Machine, first: RawServer, wid: str) -> RawServer:
    """SIGKILL `first` while its command runs, and start the next server: it takes the command
    over by itself (returned once the takeover is in the history)."""
    await first.kill()
    second = await machine.server()
    deadline = time.monotonic() + 20
    while not events(machine, wid, "shell_adopted"):
        assert time.monotonic() < deadline, "the next server never took the command over"
        await asyncio.sleep(0.05)
    return second


async def result_committed(machine: Machine, wid: str, why: str) -> None:
    """Wait until the instance's command result is in its history (`why`: what failed if not)."""
    deadline = time.monotonic() + 30
    while not [e for e in events(machine, wid, "step_completed") if e.get("type") == "shell_command"]:
        assert time.monotonic() < deadline, why
        await asyncio.sleep(0.05)

async def test_a_command_running_when_its_server_died_is_adopted(tmp_path: Path) -> None:
    machine = Machine(tmp_path, sleep=None)
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        await first.kill()  # the command goes on without its server
        assert [line.split()[0] for line in machine.runs()] == ["start"]
        second = await machine.server()
        call = asyncio.create_task(second.call_tool("workflow_get_next_step", {"workflow_id": wid}))
        machine.release()
        answer = await call  # waits for the orphan
        pid = machine.runs()[0].split()[1]
        assert machine.runs() == [f"start {pid}", f"end {pid}"]  # ran once, to its end
        assert answer["step"]["id"] == "b"
        state = (await second.call_tool("workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"] == f"result-{pid}\n" and state["code"] == 1  # the first run's own result
        completed = events(machine, wid, "step_completed")
        assert [e["exit_code"] for e in completed if e.get("type") == "shell_command"] == [3]
        assert len(events(machine, wid, "shell_adopted")) == 1
        assert events(machine, wid, "shell_released") == []
        assert list(machine.commands.iterdir()) == []  # committed: its run directory is gone
    finally:
        await machine.close()


async def test_an_adopted_command_says_its_output_was_cut_by_the_server_that_died(tmp_path: Path) -> None:
    """A command writes far past the output cap while its server waits; that server cuts the
    file back (keeping the head apart) and is killed.  The next server's result starts with
    what the command wrote first and says how much was not kept, as the first server's would."""
    from aromcp_workflows.shell.runner import OUTPUT_CAP

    machine = Machine(tmp_path, sleep=None)
    chatty = (f"head -c {OUTPUT_CAP} /dev/zero | tr '\\\\0' a; head -c {3 * OUTPUT_CAP} /dev/zero | tr '\\\\0' b; "
              f"echo start $$ >> runs.log; until [ -e {GATE} ]; do sleep 0.02; done")
    (machine.project / ".aromcp" / "workflows" / "adopt.yaml").write_text(WORKFLOW.replace(
        "echo start $$ >> runs.log; WAIT; echo end $$ >> runs.log; echo result-$$; exit 3", chatty))
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        deadline = time.monotonic() + 20
        while not list(machine.commands.glob("*/out.head")):
            assert time.monotonic() < deadline, "the first server never cut the output back"
            await asyncio.sleep(0.05)
        await first.kill()
        second = await machine.server()
        call = asyncio.create_task(second.call_tool("workflow_get_next_step", {"workflow_id": wid}))
        machine.release()
        assert (await call)["step"]["id"] == "b"
        assert len(machine.runs()) == 1  # ran once
        out = (await second.call_tool("workflow_state_read", {"workflow_id": wid}))["state"]["out"]
        assert out.startswith("a" * OUTPUT_CAP), out[:80]
        assert f"{3 * OUTPUT_CAP} more bytes not kept" in out, out[-200:]
    finally:
        await machine.close()


async def test_a_cancel_stops_an_adopted_command_with_its_children(tmp_path: Path) -> None:
    """The command's server died and the next one took it over; `aromcp-workflows cancel`
    then stops the whole group (a background child included) within 2 s, although neither
    the canceller nor the adopting server is its parent."""
    machine = Machine(tmp_path, sleep=None)
    (machine.project / ".aromcp" / "workflows" / "adopt.yaml").write_text(WORKFLOW.replace(
        "echo start $$ >> runs.log; WAIT;",
        f"sleep 60 & echo $! >> pids; echo $$ >> pids; echo start $$ >> runs.log; "
        f"until [ -e {GATE} ]; do sleep 0.02; done;"))
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        pids = [int(pid) for pid in (machine.project / "pids").read_text().split()]
        second = await taken_over(machine, first, wid)
        cancelled_at = time.monotonic()
        done = await asyncio.to_thread(subprocess.run, [
            PYTHON, "-m", "aromcp_workflows", "--project-dir", str(machine.project), "cancel", wid,
            "--store", str(machine.store)], env=server_env(machine.home, machine.store, **machine.env),
            cwd=machine.project, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        while any(alive(pid) for pid in pids):
            assert time.monotonic() - cancelled_at < 2.0, f"still running 2 s after the cancel: {pids}"
            await asyncio.sleep(0.02)
        status = await second.call_tool("workflow_status", {"workflow_id": wid})
        assert status["status"] == "cancelled"
        assert [line.split()[0] for line in machine.runs()] == ["start"]  # never run again
    finally:
        await machine.close()


async def test_an_adopted_command_is_killed_at_the_timeout_counted_from_its_start(tmp_path: Path) -> None:
    """The step's `timeout` runs from the command's start, whichever server waits for it: the
    server that took it over kills the whole group then (not a full timeout after it took
    over), and the step fails naming the timeout (`on_error: continue` stores it)."""
    machine = Machine(tmp_path, sleep=None)
    (machine.project / ".aromcp" / "workflows" / "adopt.yaml").write_text(WORKFLOW.replace(
        "echo start $$ >> runs.log; WAIT;",
        f"sleep 60 & echo $! >> pids; echo $$ >> pids; echo start $$ >> runs.log; "
        f"until [ -e {GATE} ]; do sleep 0.02; done;").replace("    on_error: continue\n",
                                                              "    on_error: continue\n    timeout: 6000\n"))
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        seen_started = time.monotonic()  # a little after it started
        pids = [int(pid) for pid in (machine.project / "pids").read_text().split()]
        await first.kill()
        await asyncio.sleep(1.0)
        second = await machine.server()
        while any(alive(pid) for pid in pids):
            assert time.monotonic() - seen_started < 7.5, "not killed at its timeout"
            await asyncio.sleep(0.02)
        assert time.monotonic() - seen_started > 5.5, "killed before its timeout"
        await result_committed(machine, wid, "the timed-out result was never committed")
        done = [e for e in events(machine, wid, "step_completed") if e.get("type") == "shell_command"]
        assert [e["exit_code"] for e in done] == [124] and "timeout of 6000 ms" in done[0]["stderr_tail"]
        answer = await second.call_tool("workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "b"
        assert [line.split()[0] for line in machine.runs()] == ["start"]
    finally:
        await machine.close()


async def test_an_adopted_commands_output_is_readable_while_it_runs(tmp_path: Path) -> None:
    """What the page and `debug` show of a running command (`command_output`) still comes
    from its files once another server has taken it over, and from the history once its
    result is committed."""
    from aromcp_workflows.app.service import WorkflowService

    machine = Machine(tmp_path, sleep=None)
    (machine.project / ".aromcp" / "workflows" / "adopt.yaml").write_text(WORKFLOW.replace(
        "echo start $$ >> runs.log; WAIT;",
        f"echo line-1; echo start $$ >> runs.log; until [ -e {GATE} ]; do sleep 0.02; done; echo line-2;"))
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        second = await taken_over(machine, first, wid)
        service = WorkflowService(project_dir=machine.project, store_path=machine.store, home=machine.home)
        live = await asyncio.to_thread(service.command_output, wid)
        assert live.running and live.source == "live" and live.step_id == "sh"
        assert live.stdout.text == "line-1\n", live.stdout.text
        machine.release()
        await result_committed(machine, wid, "the adopted command's result was never committed")
        after = await asyncio.to_thread(service.command_output, wid)
        assert not after.running and after.source == "history" and after.exit_code == 3
        assert "line-1\nline-2\n" in after.stdout.text
        assert (await second.call_tool("workflow_get_next_step", {"workflow_id": wid}))["step"]["id"] == "b"
    finally:
        await machine.close()


async def test_a_server_killed_before_it_committed_the_claim_leaves_the_command_to_the_next(tmp_path: Path) -> None:
    """On a store file the command starts first and its claim is committed while it runs
    (`app.launch`).  A server killed between the two leaves a command the store does not know
    of: the agent's call that completed `a` was never committed either.  The agent's call
    again, on the next server, reaches the same step, finds the command by its run
    directory's name and takes its result; it does not run it again.  A write lock on the
    store holds the window open: the claim cannot commit until the server is dead."""
    machine = Machine(tmp_path, sleep=None)
    try:
        first = await machine.server()
        wid = (await first.call_tool("workflow_start", {"workflow": "adopt"}))["workflow_id"]
        step = (await first.call_tool("workflow_get_next_step", {"workflow_id": wid}))["step"]
        lock = sqlite3.connect(machine.store, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # no other writer until it ends
        try:
            await first.send_request("tools/call", {"name": "workflow_step_complete", "arguments": {
                "workflow_id": wid, "step_id": step["id"], "result": "ok"}})
            deadline = time.monotonic() + 20
            while not machine.runs():
                assert time.monotonic() < deadline, "the command did not start before its claim was committed"
                await asyncio.sleep(0.02)
            assert not claimed(machine)
            await first.kill()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        second = await machine.server()
        again = asyncio.create_task(second.call_tool("workflow_step_complete", {
            "workflow_id": wid, "step_id": step["id"], "result": "ok"}))
        await asyncio.sleep(0.3)
        assert not again.done()  # it waits for the command of the dead server
        machine.release()
        await again
        pid = machine.runs()[0].split()[1]
        assert machine.runs() == [f"start {pid}", f"end {pid}"]  # ran once, to its end
        answer = await second.call_tool("workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "b"
        state = (await second.call_tool("workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"] == f"result-{pid}\n" and state["code"] == 1
        adopted = events(machine, wid, "shell_adopted")
        assert len(adopted) == 1 and "before the command's claim was committed" in adopted[0]["reason"]
        assert list(machine.commands.iterdir()) == []
    finally:
        await machine.close()


TWO_COMMANDS = """\
name: two
default_state:
  raw: {first: "", second: ""}
steps:
  - id: one
    type: shell_command
    command: "echo one $$ >> runs.log; until [ -e gate1 ]; do sleep 0.02; done; echo one-$$"
    state_update: {path: raw.first, value: "{{ result.stdout }}"}
  - id: two
    type: shell_command
    command: "echo two $$ >> runs.log; until [ -e gate2 ]; do sleep 0.02; done; echo two-$$"
    state_update: {path: raw.second, value: "{{ result.stdout }}"}
  - id: b
    type: agent_prompt
    prompt: "done"
"""


async def test_a_server_killed_between_two_commands_leaves_both_to_the_next(tmp_path: Path) -> None:
    """The first command's result and the second command's claim are one commit, made while
    the second command runs.  Killed before that commit, the server leaves the first command
    claimed (and ended) and the second unknown to the store: the next server, at start,
    takes the first's result, reaches the second and finds it by its run directory's name.
    Each ran once."""
    machine = Machine(tmp_path, sleep=None)
    (machine.project / ".aromcp" / "workflows" / "two.yaml").write_text(TWO_COMMANDS)
    try:
        first = await machine.server()
        wid = (await first.call_tool("workflow_start", {"workflow": "two"}))["workflow_id"]
        await first.send_request("tools/call", {"name": "workflow_get_next_step", "arguments": {"workflow_id": wid}})
        deadline = time.monotonic() + 20
        while not machine.runs() or not claimed(machine):
            assert time.monotonic() < deadline, "the first command did not start"
            await asyncio.sleep(0.02)
        lock = sqlite3.connect(machine.store, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")
        try:
            (machine.project / "gate1").touch()
            while len(machine.runs()) < 2:
                assert time.monotonic() < deadline, "the second command did not start"
                await asyncio.sleep(0.02)
            await first.kill()
        finally:
            lock.execute("ROLLBACK")
            lock.close()
        second = await machine.server()  # it takes both over at start, uncalled
        (machine.project / "gate2").touch()
        answer = await second.call_tool("workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "b"
        runs = machine.runs()
        assert [line.split()[0] for line in runs] == ["one", "two"], runs
        state = (await second.call_tool("workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["first"] == f"one-{runs[0].split()[1]}\n" and state["second"] == f"two-{runs[1].split()[1]}\n"
        adopted = events(machine, wid, "shell_adopted")
        assert len(adopted) == 2, [event["reason"][:60] for event in adopted]
        assert list(machine.commands.iterdir()) == []
    finally:
        (machine.project / "gate1").touch()
        (machine.project / "gate2").touch()
        await machine.close()


async def test_a_command_that_ended_while_no_server_ran_gives_its_result(tmp_path: Path) -> None:
    machine = Machine(tmp_path, sleep=0.3)
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        await first.kill()
        deadline = time.monotonic() + 20
        while len(machine.runs()) < 2:  # it finishes alone; nobody reaps it but init
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        second = await machine.server()
        answer = await second.call_tool("workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "b" and len(machine.runs()) == 2
        pid = machine.runs()[0].split()[1]
        state = (await second.call_tool("workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["out"] == f"result-{pid}\n"
    finally:
        await machine.close()


def person_cli(machine: Machine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "aromcp_workflows", "--project-dir", str(machine.project), *args,
                           "--store", str(machine.store)], env=server_env(machine.home, machine.store, **machine.env),
                          capture_output=True, text=True, timeout=60)


async def test_a_command_whose_server_died_is_shown_stalled_not_running(tmp_path: Path) -> None:
    """Nobody waits for it any more: the run stands still until an agent's next call takes
    it over, so `status` (and the page) must not show it as working ("command running" for
    ever, as a person-at-the-page probe saw)."""
    machine = Machine(tmp_path, sleep=None)
    try:
        first = await machine.server()
        wid, _ = await shell_started(machine, first)
        working = json.loads(person_cli(machine, "status", wid, "--json").stdout)
        (held,) = working["steps_in_hand"]
        assert held["waiting_for"] == "command" and not held.get("stalled") and working["stalled"] is False
        await first.kill()
        gone = json.loads(person_cli(machine, "status", wid, "--json").stdout)
        (held,) = gone["steps_in_hand"]
        assert held["waiting_for"] == "command" and held["stalled"] is True and gone["stalled"] is True
        text = person_cli(machine, "status", wid).stdout
        assert "its server gone — stalled (an agent's next call takes its result over)" in text, text
        assert "stalled" in next(line for line in person_cli(machine, "status").stdout.splitlines()
                                 if line.startswith(wid))
    finally:
        await machine.close()


async def test_a_stopped_server_past_its_lease_is_not_run_around(tmp_path: Path) -> None:
    """A server cut off (SIGSTOP) past its lease on the same machine: the other server takes the
    result of the command that runs on, and the stopped one, continued, does not store its own."""
    machine = Machine(tmp_path, sleep=1.5, AROMCP_SHELL_LEASE_S="0.3")
    try:
        first = await machine.server()
        wid, stalled = await shell_started(machine, first)
        os.kill(first.pid, signal.SIGSTOP)
        second = await machine.server()
        answer = await second.call_tool("workflow_get_next_step", {"workflow_id": wid})
        assert answer["step"]["id"] == "b"
        os.kill(first.pid, signal.SIGCONT)
        late = await asyncio.wait_for(stalled, 30)  # its call ends: it finds the step taken over
        assert "result" in late, late
        runs = machine.runs()
        assert [line.split()[0] for line in runs] == ["start", "end"], runs
        assert len(events(machine, wid, "shell_adopted")) == 1
        completed = [e for e in events(machine, wid, "step_completed") if e.get("type") == "shell_command"]
        assert len(completed) == 1, completed
    finally:
        await machine.close()


async def test_never_started_runs_once_and_killed_runs_again(tmp_path: Path) -> None:
    """The two ends a run directory can tell apart: a server that died before it started the
    command (its directory not even made) leaves it to run once now; a command killed before it
    recorded its exit status (no status, nothing holding its output: its machine or container
    stopped with it) runs again, at least once, as after a host death."""
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.interpreter import ShellClaim, ShellRequest
    from aromcp_workflows.shell import owner as owners

    machine = Machine(tmp_path, sleep=0)
    os.environ["AROMCP_COMMANDS_DIR"] = str(machine.commands)
    try:
        service = WorkflowService(project_dir=machine.project, store_path=machine.store, home=machine.home)
        dead = await asyncio.create_subprocess_exec("true")
        await dead.wait()
        gone = {**owners.current().data(), "pid": dead.pid, "started": 1}

        def handed_out(run_dir: Path) -> str:
            wid = service.start("adopt").workflow_id
            first = service.next_step(wid).step

            def hand_out(run: Any) -> None:
                run.complete(None, first["id"], "success", "ok")
                request = run.advance(None)
                assert isinstance(request, ShellRequest)
                run.claim_shell(request.thread_id, request.step_id, ShellClaim(
                    owner=gone, lease_until=time.time() + 60, owner_pid=dead.pid,
                    run_dir=str(run_dir), deadline=time.time() + 60))

            service.instances.transact(wid, hand_out)
            return wid

        never = handed_out(machine.commands / "never-made")
        assert service.next_step(never).step["id"] == "b"
        assert len(machine.runs()) == 2  # it ran now, once
        assert "before it started" in events(machine, never, "shell_released")[0]["reason"]

        killed_dir = machine.commands / "killed"
        killed_dir.mkdir(parents=True)
        for name in ("out", "err"):
            (killed_dir / name).write_text("")
        (killed_dir / "meta").write_text(json.dumps({"workflow_id": "?"}))
        (killed_dir / "pid").write_text(str(dead.pid))
        killed = handed_out(killed_dir)
        assert service.next_step(killed).step["id"] == "b"
        assert len(machine.runs()) == 4  # run again, to its end
        assert "killed before it recorded its exit status" in events(machine, killed, "shell_released")[0]["reason"]
        assert not killed_dir.exists()
    finally:
        os.environ.pop("AROMCP_COMMANDS_DIR", None)
        await machine.close()


async def test_a_server_started_after_a_death_takes_over_without_being_called(tmp_path: Path) -> None:
    """The next server of the machine adopts the command at start, before any call (a replica
    on another machine would otherwise see the lease run out and run it again)."""
    machine = Machine(tmp_path, sleep=1.0)
    try:
        wid = await orphaned(machine)
        await machine.server()  # started, never called
        await result_committed(machine, wid, "the orphan was not taken over")
        assert [line.split()[0] for line in machine.runs()] == ["start", "end"]
        assert len(events(machine, wid, "shell_adopted")) == 1
    finally:
        await machine.close()


async def test_orphans_of_another_store_are_left_and_of_a_deleted_store_removed(tmp_path: Path) -> None:
    """A server adopts the orphans of its own store only; one whose store file is gone can
    never be adopted, and is removed by the next server of the machine (left there, every
    server starting on the machine built its service at start to look at it)."""
    machine = Machine(tmp_path, sleep=0.2)
    try:
        first = await machine.server()
        await shell_started(machine, first)
        await first.kill()
        deadline = time.monotonic() + 20
        while len(machine.runs()) < 2:  # the command ends while no server runs
            assert time.monotonic() < deadline, "the command did not end"
            await asyncio.sleep(0.05)
        left = list(machine.commands.iterdir())
        assert len(left) == 1

        other_store = tmp_path / "other.sqlite3"
        other = await RawServer(serve_args(machine.project, other_store),
                                server_env(machine.home, other_store, **machine.env), machine.project,
                                tmp_path / "other.stderr").start()
        await other.call_tool("workflow_list", {"include_global": False})
        await other.close()
        assert left[0].exists(), "a server of another store took this store's orphan"
        assert not other_store.exists(), "a server with only another store's orphans opened its store at start"

        for suffix in ("", "-wal", "-shm"):
            Path(f"{machine.store}{suffix}").unlink(missing_ok=True)
        again = await RawServer(serve_args(machine.project, other_store),
                                server_env(machine.home, other_store, **machine.env), machine.project,
                                tmp_path / "again.stderr").start()
        await again.close()
        assert not left[0].exists(), "the orphan of a deleted store was left behind"
    finally:
        await machine.close()


async def test_the_next_server_claims_an_orphan_before_it_answers_anything(tmp_path: Path) -> None:
    """Found by the fault campaign (replicas, seeds 142 and 143): a replica killed twice in a
    row was started again each time, but killed (or, the second time, reached by the other
    replica's lease check) before its background adoption had claimed the command, so the
    other replica saw the dead server's lease run out and ran the command again although
    its host lived.  The claim (which renews the lease) is now made before the server
    answers its first request; only the wait for the command runs in the background."""
    machine = Machine(tmp_path, sleep=None)
    try:
        wid = await orphaned(machine)
        await machine.server()  # its handshake answered: nothing else asked of it
        adopted = events(machine, wid, "shell_adopted")
        assert len(adopted) == 1, "the orphan was not claimed before the server answered"
        assert [line.split()[0] for line in machine.runs()] == ["start"]  # still running: claimed, not done
        machine.release()
        await result_committed(machine, wid, "the orphan's result was not taken")
        assert [line.split()[0] for line in machine.runs()] == ["start", "end"]
        assert len(events(machine, wid, "shell_adopted")) == 1
    finally:
        await machine.close()


async def test_a_replica_listens_only_once_it_has_claimed_the_orphans(tmp_path: Path) -> None:
    """Over HTTP the port used to listen from the start, so a harness (or a load balancer)
    took a restarted replica for up and could kill it again before its claims were made
    (the campaign's CI-sized round, seed 5: killed every 4 s, the replica never claimed, and
    the other replica ran the command again after the lease).  Now the socket is bound at
    once but listens only after the claims: a connection that succeeds means they are made."""
    machine = Machine(tmp_path, sleep=None)  # the command runs until the end of the test
    try:
        wid = await orphaned(machine)
        port = free_port()
        env = server_env(machine.home, machine.store, **machine.env, AROMCP_HTTP_TOKEN=TOKEN)
        with open(tmp_path / "http.stderr", "wb") as stderr:
            replica = subprocess.Popen([PYTHON, *serve_args(machine.project, machine.store, "--http", "--port",
                                                            str(port))], cwd=machine.project, env=env,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_for_port(port, replica)
            assert len(events(machine, wid, "shell_adopted")) == 1, "it listened before it claimed the orphan"
        finally:
            stop(replica)
    finally:
        await machine.close()
