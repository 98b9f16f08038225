"""Who runs a server-side command, across processes and hosts: owner identity and lease.

Each test puts an instance in the state another server leaves it in when it hands out a
command — the pending shell step with that server's claim (owner identity, lease), the
command not run here — through the real instance layer and SQLite store, then asks
this server for the next step with a second `WorkflowService` on the same store (another
replica).  The command is real bash writing to `runs.log`, so a test sees how often it
ran.  What is checked:

- an owner on another host whose lease expired: released and run again, once;
- a live owner on another host with a valid lease: waited for (its result is used, the
  command never runs here);
- a dead owner on this host: released at once, whatever its lease says;
- a recycled pid (alive, other start time): not mistaken for the owner;
- instances stored by older versions (`owner_pid` only): judged by that pid, as before;
- a long command renews its lease while it runs; a release that finds the claim renewed
  meanwhile does nothing.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aromcp_workflows.app.results import NextStep
from aromcp_workflows.app.service import WorkflowService
from aromcp_workflows.interpreter import ShellClaim, ShellRequest, ShellResult
from aromcp_workflows.shell import owner as owners

OWNED = """
name: owned
default_state:
  raw: {out: ""}
steps:
  - id: a
    type: agent_prompt
    prompt: "first"
  - id: sh
    type: shell_command
    command: "echo ran >> runs.log; sleep SLEEP; echo ran-here"
    state_update: {path: raw.out}
  - id: b
    type: agent_prompt
    prompt: "second"
"""
ELSEWHERE = {"host": "replica-b.example", "boot": "6f1c2c1e-0000-4000-8000-000000000000",
             "pidns": "pid:[4026531836]", "pid": 4242, "started": 1234}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".aromcp" / "workflows").mkdir(parents=True)
    (root / ".aromcp" / "workflows" / "owned.yaml").write_text(OWNED.replace("SLEEP", "0"))
    (root / ".aromcp" / "workflows" / "owned-long.yaml").write_text(
        OWNED.replace("name: owned", "name: owned-long").replace("SLEEP", "1.6"))
    return root


def replica(project: Path, tmp_path: Path) -> WorkflowService:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=home)


def claimed(service: WorkflowService, claim: dict[str, Any]) -> tuple[str, ShellRequest]:
    """An instance whose command `sh` was handed out by a server that wrote `claim` and has
    not finished it (it may be running it, or be dead)."""
    workflow_id = service.start("owned").workflow_id
    first = service.next_step(workflow_id).step

    def hand_out(run: Any) -> ShellRequest:
        run.complete(None, first["id"], "success", "ok")
        request = run.advance(None)
        assert isinstance(request, ShellRequest), request
        run.claim_shell(request.thread_id, request.step_id, ShellClaim.from_data(claim))
        return request

    return workflow_id, service.instances.transact(workflow_id, hand_out)


def runs(project: Path) -> int:
    log = project / "runs.log"
    return log.read_text().count("ran") if log.exists() else 0


def released(service: WorkflowService, workflow_id: str) -> list[str]:
    return [event.data["reason"] for event in service.instances.history(workflow_id, ["shell_released"])]


class Call:
    """`next_step` on another thread, as a client of another replica would make it."""

    def __init__(self, service: WorkflowService, workflow_id: str):
        self.answer: NextStep | None = None
        self.thread = threading.Thread(target=self._run, args=(service, workflow_id), daemon=True)
        self.thread.start()

    def _run(self, service: WorkflowService, workflow_id: str) -> None:
        self.answer = service.next_step(workflow_id)

    def finished_within(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return not self.thread.is_alive()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process on this host that is not a server (stands for another local replica)."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def local_owner(pid: int, started: int | None) -> dict[str, Any]:
    return {**owners.current().data(), "pid": pid, "started": started}


def dead_pid() -> tuple[int, int | None]:
    process = subprocess.Popen(["sleep", "0.2"])
    started = owners.start_time(process.pid)
    process.wait()
    return process.pid, started


def test_the_owner_is_host_boot_namespace_pid_and_start_time() -> None:
    import os
    import socket

    me = owners.current()
    assert me.host == socket.gethostname() and me.pid == os.getpid()
    assert me.boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert me.pidns == os.readlink("/proc/self/ns/pid")
    assert me.started == int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_a_claim_records_the_owner_and_a_lease(project: Path, tmp_path: Path) -> None:
    service = replica(project, tmp_path)
    workflow_id = service.start("owned-long").workflow_id
    first = service.next_step(workflow_id).step
    before = time.time()
    call = threading.Thread(target=service.step_complete, args=(workflow_id, first["id"]), kwargs={"result": "x"})
    call.start()
    try:
        claim = wait_for_claim(replica(project, tmp_path), workflow_id)
        assert claim["owner"] == owners.current().data() and claim["owner_pid"] == owners.current().pid
        assert before + owners.DEFAULT_LEASE_S - 1 <= claim["lease_until"] <= time.time() + owners.DEFAULT_LEASE_S
    finally:
        call.join(30)


def wait_for_claim(reader: WorkflowService, workflow_id: str) -> dict[str, Any]:
    for _ in range(500):
        pending = stored_pending(reader, workflow_id)
        if pending and pending["kind"] == "shell":
            return dict(pending["data"])
        time.sleep(0.01)
    raise AssertionError("the command was never claimed")


def stored_pending(reader: WorkflowService, workflow_id: str) -> dict[str, Any] | None:
    record = reader.instances.store.load(workflow_id)
    main = record.threads["main"] if isinstance(record.threads, dict) else record.threads[0]
    return main.get("pending")


def test_an_owner_on_another_host_whose_lease_expired_is_released_and_run_again(project: Path,
                                                                                 tmp_path: Path) -> None:
    workflow_id, _ = claimed(replica(project, tmp_path), {"owner": ELSEWHERE, "lease_until": time.time() - 5,
                                                          "owner_pid": 4242})
    here = replica(project, tmp_path)
    call = Call(here, workflow_id)
    assert call.finished_within(30), "waited for an owner whose lease expired"
    assert call.answer is not None and call.answer.step is not None and call.answer.step["id"] == "b"
    assert runs(project) == 1
    reasons = released(here, workflow_id)
    assert len(reasons) == 1 and "lease" in reasons[0] and "replica-b.example" in reasons[0], reasons


@pytest.mark.parametrize("where", ["another host", "this host"])
def test_a_live_owner_with_a_valid_lease_is_waited_for(project: Path, tmp_path: Path, where: str,
                                                       sleeper: subprocess.Popen[bytes]) -> None:
    owner = ELSEWHERE if where == "another host" else local_owner(sleeper.pid, owners.start_time(sleeper.pid))
    elsewhere = replica(project, tmp_path)
    workflow_id, request = claimed(elsewhere, {"owner": owner, "lease_until": time.time() + 3600})
    call = Call(replica(project, tmp_path), workflow_id)
    assert not call.finished_within(0.6), f"did not wait for the owner: {call.answer}"
    elsewhere.instances.transact(workflow_id, lambda run: run.finish_shell(
        request, ShellResult("ran-there\n", "", 0, 600.0)))  # the owner finishes and commits
    assert call.finished_within(30)
    assert call.answer is not None and call.answer.step is not None and call.answer.step["id"] == "b"
    assert runs(project) == 0, "the command ran here while its owner was running it"
    assert released(elsewhere, workflow_id) == []
    assert "ran-there" in elsewhere.state_read(workflow_id, ["raw.out"]).state["raw.out"]


def test_a_dead_owner_on_this_host_is_released_at_once(project: Path, tmp_path: Path) -> None:
    pid, started = dead_pid()
    workflow_id, _ = claimed(replica(project, tmp_path),
                             {"owner": local_owner(pid, started), "lease_until": time.time() + 3600})
    here = replica(project, tmp_path)
    call = Call(here, workflow_id)
    assert call.finished_within(30), "waited for a lease although its owner is dead"
    assert call.answer is not None and call.answer.step is not None and call.answer.step["id"] == "b"
    assert runs(project) == 1
    assert f"process {pid}" in released(here, workflow_id)[0]


def test_a_recycled_pid_is_not_taken_for_the_owner(project: Path, tmp_path: Path,
                                                   sleeper: subprocess.Popen[bytes]) -> None:
    started = owners.start_time(sleeper.pid)
    assert started is not None
    workflow_id, _ = claimed(replica(project, tmp_path),  # the owner had this pid, but started earlier
                             {"owner": local_owner(sleeper.pid, started - 100), "lease_until": time.time() + 3600})
    call = Call(replica(project, tmp_path), workflow_id)
    assert call.finished_within(30), "a live process that reused the owner's pid was taken for the owner"
    assert runs(project) == 1


@pytest.mark.parametrize("owner_alive", [False, True])
def test_instances_stored_with_only_owner_pid_still_work(project: Path, tmp_path: Path, owner_alive: bool,
                                                         sleeper: subprocess.Popen[bytes]) -> None:
    pid = sleeper.pid if owner_alive else dead_pid()[0]
    elsewhere = replica(project, tmp_path)
    workflow_id, request = claimed(elsewhere, {"owner_pid": pid})
    call = Call(replica(project, tmp_path), workflow_id)
    if owner_alive:
        assert not call.finished_within(0.6)
        elsewhere.instances.transact(workflow_id, lambda run: run.finish_shell(request, ShellResult("x", "", 0, 1.0)))
    assert call.finished_within(30)
    assert runs(project) == (0 if owner_alive else 1)


def test_a_long_command_renews_its_lease(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(owners.LEASE_ENV, "0.6")  # renewed every 0.2 s; the command takes 1.6 s
    service = replica(project, tmp_path)
    workflow_id = service.start("owned-long").workflow_id
    first = service.next_step(workflow_id).step
    call = threading.Thread(target=service.step_complete, args=(workflow_id, first["id"]), kwargs={"result": "x"})
    call.start()
    reader = replica(project, tmp_path)
    leases = {wait_for_claim(reader, workflow_id)["lease_until"]}
    while call.is_alive():
        pending = stored_pending(reader, workflow_id)
        if pending and pending["kind"] == "shell":
            leases.add(pending["data"]["lease_until"])
        time.sleep(0.05)
    assert len(leases) >= 3, f"the lease was not renewed while the command ran: {sorted(leases)}"
    assert runs(project) == 1 and released(reader, workflow_id) == []
    assert service.next_step(workflow_id).step["id"] == "b"


def test_a_release_does_nothing_when_the_claim_was_renewed_meanwhile(project: Path, tmp_path: Path) -> None:
    service = replica(project, tmp_path)
    judged = {"owner": ELSEWHERE, "lease_until": time.time() - 1}
    workflow_id, request = claimed(service, judged)
    service.instances.transact(workflow_id, lambda run: run.renew_shell(
        request.thread_id, request.step_id, ELSEWHERE, time.time() + 30))  # the owner renews in between
    assert not service.instances.transact(workflow_id, lambda run: run.release_shell(
        request.thread_id, request.step_id, "lease expired", ShellClaim.from_data(judged)))
    assert stored_pending(service, workflow_id) is not None
    assert not service.instances.transact(workflow_id, lambda run: run.renew_shell(
        request.thread_id, request.step_id, {**ELSEWHERE, "pid": 1}, time.time() + 30)), \
        "a server renewed a lease that is not its own"


def test_judging_a_claim_by_identity_and_lease() -> None:
    me, now = owners.current(), time.time()
    valid, expired = now + 30, now - 1

    def judge(owner: dict[str, Any], lease_until: float) -> str | None:
        return owners.abandoned(ShellClaim.from_data({"owner": owner, "lease_until": lease_until,
                                                      "owner_pid": owner["pid"]}), me, now)

    assert "this server process" in str(judge(me.data(), valid))
    assert "this server process" in str(judge({**me.data(), "host": "renamed-since"}, valid))
    # a host with the same name but another boot: another machine (or a reboot) — its pids mean nothing here
    namesake = {**me.data(), "boot": "00000000-0000-4000-8000-000000000000", "pid": 1, "started": 1}
    assert judge(namesake, valid) is None, "a live owner on a namesake host was judged by a local pid"
    assert "expired" in str(judge(namesake, expired))
    # another pid namespace on this kernel (a container): not judged by pid either
    assert judge({**me.data(), "pidns": "pid:[1]", "pid": 1, "started": 1}, valid) is None
    assert judge(ELSEWHERE, valid) is None and "expired" in str(judge(ELSEWHERE, expired))
    assert "no server process is recorded" in str(owners.abandoned(ShellClaim(), me, now))  # no claim at all


def test_a_claim_of_any_version_reads_back() -> None:
    """The claim is a typed record whose stored form is the flat keys every version wrote: a
    claim of today round-trips, one stored before owners and leases reads as its `owner_pid`
    (judged as it was then), and values of the wrong type read as absent."""
    me = owners.current()
    today = ShellClaim(owner=me.data(), lease_until=12.5, owner_pid=me.pid, run_dir="/run/x", deadline=99.0,
                       started_at=10.0)
    assert ShellClaim.from_data(today.to_data()) == today
    assert set(today.to_data()) == {"owner", "lease_until", "owner_pid", "run_dir", "deadline", "started_at"}
    legacy = ShellClaim.from_data({"attempt": 0, "command": "make", "owner_pid": me.pid})
    assert legacy == ShellClaim(owner_pid=me.pid)
    assert "this server process" in str(owners.abandoned(legacy, me, time.time()))
    assert ShellClaim.from_data({"owner": "x", "lease_until": "soon", "owner_pid": True, "run_dir": 3}) == ShellClaim()
