"""Commands started before their claim is committed (`app.launch`), with real processes.

On a store file a command starts inside the transaction that claims it, and the claim is
committed while it runs.  What makes that safe is tested here on the launcher itself: the
run directory named after the run is found again (by an attempt tried again, or by the next
server), a leftover of a committed run is not taken for it, another live server's command is
waited for, and a command whose transaction went elsewhere is stopped.  The end-to-end cases
(a server SIGKILLed between the spawn and the commit) are in `test_adoption.py`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from aromcp_workflows.app.launch import Launcher, StartingElsewhere
from aromcp_workflows.interpreter import ShellRequest
from aromcp_workflows.shell import RunDir, owner, wait_command


@pytest.fixture
def commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "commands"
    monkeypatch.setenv("AROMCP_COMMANDS_DIR", str(folder))
    return folder


def request(tmp_path: Path, command: str, delay_ms: int = 0) -> ShellRequest:
    return ShellRequest("main", "sh", command, tmp_path, {}, 10_000, delay_ms)


def launcher(one_host: bool = True) -> Launcher:
    return Launcher(lambda: one_host, lambda: "/stores/a.sqlite3")


def meta() -> dict[str, object]:
    return {"workflow_id": "wf_1", "thread_id": "main", "step_id": "sh", "server": owner.current().data()}


def runs(tmp_path: Path) -> list[str]:
    log = tmp_path / "runs.log"
    return log.read_text().split() if log.exists() else []


def gone(pid: int, within_s: float = 2.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_an_attempt_tried_again_finds_its_own_command(tmp_path: Path, commands: Path) -> None:
    launch = launcher()
    first = launch.launch("wf_1", request(tmp_path, "echo ran >> runs.log"), meta)
    again = launch.launch("wf_1", request(tmp_path, "echo ran >> runs.log"), meta)
    assert first is not None and again is first and first.started is not None
    assert wait_command(first.started).exit_code == 0
    assert runs(tmp_path) == ["ran"]  # started once
    assert first.run_dir.path.parent == commands


def test_a_command_the_committed_change_does_not_claim_is_stopped(tmp_path: Path, commands: Path) -> None:
    """A conflict, and the attempt tried again finds the instance cancelled: the command the
    first attempt started is killed, background children included, and its directory removed."""
    told: list[object] = []
    launch = Launcher(lambda: True, lambda: "/stores/a.sqlite3", stopped=told.append)
    with launch.attempts() as keep:
        started = launch.launch("wf_1", request(tmp_path, "sleep 30 & sleep 30"), meta)
        keep(None)  # the committed attempt claimed nothing
    assert started is not None and started.started is not None
    assert gone(started.started.process.pid)
    assert not started.run_dir.path.exists()
    assert told == [started] and started.key == ("wf_1", "main", "sh")  # the driver ends its in-flight mark


def test_a_command_the_committed_change_claims_runs_on(tmp_path: Path, commands: Path) -> None:
    launch = launcher()
    with launch.attempts() as keep:
        started = launch.launch("wf_1", request(tmp_path, "echo ran >> runs.log"), meta)
        keep(started)
    assert started is not None and started.started is not None
    assert wait_command(started.started).exit_code == 0 and runs(tmp_path) == ["ran"]


def test_a_command_another_call_claimed_is_not_stopped_by_the_call_that_started_it(tmp_path: Path,
                                                                                    commands: Path) -> None:
    """Found by the fault campaign (an impatient client's resent call, a conflict): call 1
    starts the command; call 2, on another thread, finds it by its run directory and commits
    its claim; call 1's attempt, tried again after the conflict, finds the step busy and
    claims nothing.  The command is call 2's now: call 1 must not stop it (it did, and the
    step recorded exit 137)."""
    launch = launcher()
    started = threading.Event()
    claimed = threading.Event()

    def second_call() -> None:
        started.wait(10)
        with launch.attempts() as keep:
            found = launch.launch("wf_1", request(tmp_path, "sleep 0.5; echo ran >> runs.log"), meta)
            keep(found)  # committed: the store names this command now
        claimed.set()

    other = threading.Thread(target=second_call)
    other.start()
    with launch.attempts() as keep:
        first = launch.launch("wf_1", request(tmp_path, "sleep 0.5; echo ran >> runs.log"), meta)
        started.set()
        assert claimed.wait(10)
        keep(None)  # tried again after the conflict: the step is busy, nothing claimed here
    other.join(10)
    assert first is not None and first.started is not None
    result = wait_command(first.started)
    assert result.exit_code == 0 and runs(tmp_path) == ["ran"]


def test_a_command_a_call_found_and_left_is_stopped_when_the_last_one_leaves_it(tmp_path: Path,
                                                                                commands: Path) -> None:
    """Two calls held the command (one started it, one found it) and neither committed a
    claim of it: the one that leaves last stops it, not the first."""
    launch = launcher()
    found_it = threading.Event()
    leave = threading.Event()
    seen: list[object] = []

    def second_call() -> None:
        with launch.attempts() as keep:
            seen.append(launch.launch("wf_1", request(tmp_path, "sleep 30"), meta))
            found_it.set()
            leave.wait(10)
            keep(None)

    with launch.attempts() as keep:
        first = launch.launch("wf_1", request(tmp_path, "sleep 30"), meta)
        other = threading.Thread(target=second_call)
        other.start()
        assert found_it.wait(10)
        keep(None)
    assert first is not None and first.started is not None and seen == [first]
    assert not gone(first.started.process.pid, within_s=0.3)  # the second call still holds it
    leave.set()
    other.join(10)
    assert gone(first.started.process.pid)
    assert not first.run_dir.path.exists()


def test_a_failed_transaction_leaves_its_command_to_the_next_call(tmp_path: Path, commands: Path) -> None:
    launch = launcher()
    with pytest.raises(RuntimeError), launch.attempts():
        started = launch.launch("wf_1", request(tmp_path, "echo ran >> runs.log"), meta)
        raise RuntimeError("the store could not save")
    assert started is not None and started.started is not None
    assert launch.launch("wf_1", request(tmp_path, "echo ran >> runs.log"), meta) is started
    wait_command(started.started)
    assert runs(tmp_path) == ["ran"]


def test_a_dead_servers_unclaimed_directory_is_adopted_not_run_again(tmp_path: Path, commands: Path) -> None:
    launch = launcher()
    req = request(tmp_path, "echo ran >> runs.log")
    run_dir = RunDir.for_command(launch.identity("wf_1", req))
    run_dir.path.mkdir(parents=True)
    dead = {**owner.current().data(), "pid": 2**22 + 17, "started": 1}
    (run_dir.path / "meta").write_text(json.dumps({**meta(), "server": dead}))
    found = launch.launch("wf_1", req, meta)
    assert found is not None and found.adopted and found.run_dir == run_dir
    assert runs(tmp_path) == []


def test_a_live_servers_directory_is_waited_for(tmp_path: Path, commands: Path) -> None:
    """Another server of this machine made it and is committing the claim: a conflict, tried
    again until its claim shows."""
    launch = launcher()
    req = request(tmp_path, "true")
    run_dir = RunDir.for_command(launch.identity("wf_1", req))
    run_dir.path.mkdir(parents=True)
    parent = {**owner.current().data(), "pid": os.getppid(), "started": owner.start_time(os.getppid())}
    (run_dir.path / "meta").write_text(json.dumps({**meta(), "server": parent}))
    with pytest.raises(StartingElsewhere, match="another server of this machine"):
        launch.launch("wf_1", req, meta)
    (run_dir.path / "meta").unlink()  # made a moment ago, its meta not written yet: the same
    with pytest.raises(StartingElsewhere):
        launch.launch("wf_1", req, meta)


def test_a_leftover_of_a_committed_run_is_removed_and_the_command_runs(tmp_path: Path, commands: Path) -> None:
    launch = launcher()
    req = request(tmp_path, "echo ran >> runs.log")
    run_dir = RunDir.for_command(launch.identity("wf_1", req))
    run_dir.path.mkdir(parents=True)
    (run_dir.path / "status").write_text("0")
    run_dir.mark_claimed()
    found = launch.launch("wf_1", req, meta)
    assert found is not None and found.started is not None
    assert wait_command(found.started).exit_code == 0 and runs(tmp_path) == ["ran"]
    assert not (run_dir.path / "claimed").exists()  # a fresh directory


def test_the_claim_comes_first_on_a_shared_store_and_after_a_delay(tmp_path: Path, commands: Path) -> None:
    assert launcher(one_host=False).launch("wf_1", request(tmp_path, "true"), meta) is None
    assert launcher().launch("wf_1", request(tmp_path, "true", delay_ms=50), meta) is None
    assert not commands.exists() or list(commands.iterdir()) == []


def test_each_run_of_a_command_has_its_own_name(tmp_path: Path) -> None:
    launch = launcher()
    names = {launch.identity(wf, ShellRequest(thread, step, command, tmp_path, env, None))
             for wf, thread, step, command, env in [
                 ("wf_1", "main", "sh", "true", {}), ("wf_2", "main", "sh", "true", {}),
                 ("wf_1", "t1", "sh", "true", {}), ("wf_1", "main", "sh#2", "true", {}),
                 ("wf_1", "main", "sh", "false", {}), ("wf_1", "main", "sh", "true", {"A": "1"})]}
    assert len(names) == 6


ONE_COMMAND = """\
name: one
steps:
  - id: sh
    type: shell_command
    command: "echo ran >> runs.log"
"""


def test_a_command_another_server_is_starting_leaves_no_mark_here(tmp_path: Path, commands: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """While another server of this machine starts the same run, this call tries again (a
    conflict) and, out of patience, says the instance is busy.  It leaves no in-flight mark
    behind: with one, its later calls would wait on this process forever instead of adopting
    the command if that other server died."""
    import aromcp_workflows.app.launch as launch_module
    import aromcp_workflows.instances.registry as registry
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.errors import KindedError

    def made_a_moment_ago(*_args: object, **_options: object) -> None:
        raise FileExistsError("another server made it")

    project = tmp_path / "project"
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "one.yaml").write_text(ONE_COMMAND)
    (tmp_path / "home").mkdir()
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path / "home")
    wid = service.start("one").workflow_id
    monkeypatch.setattr(registry, "CONFLICT_PATIENCE_S", 0.3)
    monkeypatch.setattr(launch_module, "start_command", made_a_moment_ago)
    with pytest.raises(KindedError) as refused:
        service.next_step(wid)
    assert refused.value.kind == "busy"
    assert service.driver.in_flight.event((wid, "main", "sh")) is None
    assert not (project / "runs.log").exists()
