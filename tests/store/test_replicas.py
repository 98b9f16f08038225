"""Two server replicas on one real PostgreSQL: any replica serves any instance, and a replica
killed with SIGKILL mid-run loses nothing that it acknowledged.

The replicas are real `aromcp-workflows serve --http` subprocesses on free loopback ports.
Many instances run at once; every call goes to a replica picked at random, as a load
balancer without affinity would send it.  Part-way through, one replica is SIGKILLed and
everything finishes on the other.  A call that was in flight to the killed replica gets no
answer (its connection dies): the client then asks the survivor where the instance stands
(`workflow_get_next_step`, which only reads) and carries on, as a client behind a load
balancer retries.  The final state of every instance must be exact: each answer appended
once, in order, every round counted once.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pg_cluster import free_port

from aromcp_workflows.store import PostgresStore

REPO = Path(__file__).resolve().parents[2]
INSTANCES = 8
ROUNDS = 12
CALL_TIMEOUT_S = 60.0
TOKEN = "replicas-share-this-token-0123456789"  # every replica checks the same bearer token

RELAY = """\
name: relay
description: "rounds of agent prompts; every answer appended, every round counted"
version: "1.0.0"
inputs:
  rounds:
    type: integer
    default: 3
  tag:
    type: string
    default: "x"
default_state:
  raw:
    answers: []
    count: 0
steps:
  - id: loop
    type: foreach
    items: "{{ Array.from({length: inputs.rounds}, (_, i) => i) }}"
    steps:
      - id: think
        type: agent_prompt
        prompt: "{{ inputs.tag }} round {{ item }}"
        state_update:
          path: raw.answers
          operation: append
      - id: tally
        type: state_update
        path: raw.count
        operation: increment
        value: 1
  - type: user_message
    message: "{{ inputs.tag }} done after {{ count }} rounds"
"""

FANOUT = """\
name: fanout
description: "sub-agents of one fan-out, each appending its answers"
version: "1.0.0"
inputs:
  items:
    type: array
    default: ["a", "b"]
default_state:
  raw:
    shared: []
    count: 0
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ inputs.items }}"
    max_parallel: 50
    sub_agent_task: work
sub_agent_tasks:
  work:
    description: "three prompts, each followed by an increment"
    inputs:
      name:
        type: string
        default: "{{ item }}"
    steps:
      - id: each
        type: foreach
        items: "{{ [0, 1, 2] }}"
        steps:
          - id: think
            type: agent_prompt
            prompt: "{{ task.name }} part {{ item }}"
            state_update:
              path: raw.shared
              operation: append
          - id: tally
            type: state_update
            path: raw.count
            operation: increment
            value: 1
"""


def make_project(root: Path) -> Path:
    workflows = root / ".aromcp" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "relay.yaml").write_text(RELAY, encoding="utf-8")
    (workflows / "fanout.yaml").write_text(FANOUT, encoding="utf-8")
    return root


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"replica exited with {proc.returncode}: {log.read_text()}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"replica not listening on {port} after {timeout}s: {log.read_text()}")


@dataclass
class Replica:
    name: str
    proc: subprocess.Popen[bytes]
    url: str
    dead: bool = False


@asynccontextmanager
async def replicas(tmp_path: Path, store_url: str, count: int) -> AsyncIterator[list[Replica]]:
    """`count` replicas serving one project on one store."""
    project = make_project(tmp_path / "project")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", AROMCP_WORKFLOWS_STORE=store_url,
               AROMCP_HTTP_TOKEN=TOKEN)
    started: list[Replica] = []
    logs = []
    try:
        for n in range(count):
            port, log = free_port(), tmp_path / f"replica{n}.log"
            logs.append(log.open("wb"))
            proc = subprocess.Popen(
                [sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "serve", "--http",
                 "--port", str(port), "--store", store_url],
                cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=logs[-1], stderr=subprocess.STDOUT)
            started.append(Replica(f"replica{n}", proc, f"http://127.0.0.1:{port}/mcp"))
            wait_for_port(port, proc, log)
        yield started
    finally:
        for replica in started:
            if replica.proc.poll() is None:
                replica.proc.send_signal(signal.SIGINT)
                try:
                    replica.proc.wait(10)
                except subprocess.TimeoutExpired:
                    replica.proc.kill()
                    replica.proc.wait()
        for log in logs:
            log.close()


@dataclass
class Balancer:
    """Sends each call to a random live replica; tells tool errors from lost answers."""

    replicas: list[Replica]
    rng: random.Random
    calls: int = 0
    tool_errors: list[str] = field(default_factory=list)  # what a client saw: must stay empty
    lost: list[str] = field(default_factory=list)  # calls whose replica died under them

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """The structured answer, or None when the replica was killed before it answered."""
        replica = self.rng.choice([r for r in self.replicas if not r.dead])
        self.calls += 1
        try:
            result = await asyncio.wait_for(self._send(replica, tool, args), CALL_TIMEOUT_S)
        except Exception as exc:
            if not replica.dead:
                raise
            self.lost.append(f"{tool} on {replica.name}: {type(exc).__name__}")
            return None
        if result.is_error:
            text = " ".join(getattr(block, "text", "") for block in result.content or [])
            self.tool_errors.append(f"{tool}({args}) on {replica.name}: {text}")
            return None
        return dict(result.structured_content)

    @staticmethod
    async def _send(replica: Replica, tool: str, args: dict[str, Any]) -> Any:
        """One call on its own connection, as a load balancer forwards a request: a
        connection to a killed replica dies alone, without taking other calls with it."""
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                                      timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(replica.url, http_client=http)) as client:
                return await client.call_tool(tool, args)


def answer(step: dict[str, Any]) -> str:
    return f"did: {step['definition']['prompt']}"


async def drive(balancer: Balancer, workflow_id: str, task_id: str | None = None) -> None:
    """Run one instance (or one sub-agent task) to its end; resync after a lost answer."""
    base = {"workflow_id": workflow_id, **({"task_id": task_id} if task_id else {})}
    step: dict[str, Any] | None = None
    pending = True  # we do not know the current step: ask
    for _ in range(ROUNDS * 20):
        if pending:
            answer_ = await balancer.call("workflow_get_next_step", base)
            if answer_ is None:
                if balancer.tool_errors:
                    return
                continue
            step, pending = answer_["step"], False
        if step is None:
            return
        assert step["type"] == "agent_prompt", step
        reply = await balancer.call("workflow_step_complete", {**base, "step_id": step["id"], "result": answer(step)})
        if reply is None:  # lost (or refused): ask again where it stands
            if balancer.tool_errors:
                return
            pending = True
            continue
        step = reply["next_step"]
    raise AssertionError(f"{workflow_id} {task_id}: did not finish")


async def kill_when(balancer: Balancer, victim: Replica, after_calls: int) -> None:
    while balancer.calls < after_calls:
        await asyncio.sleep(0.005)
    victim.dead = True  # no new call goes there; calls in flight lose their answer
    os.kill(victim.proc.pid, signal.SIGKILL)


def read_back(store_url: str, workflow_ids: list[str]) -> dict[str, Any]:
    store = PostgresStore(store_url)
    try:
        return {wid: store.load(wid) for wid in workflow_ids}
    finally:
        store.close()


@pytest.mark.slow
async def test_two_replicas_one_killed_mid_run_exact_final_states(tmp_path: Path, pg_url: str) -> None:
    balancer = Balancer([], random.Random(1313))
    async with replicas(tmp_path, pg_url, 2) as (first, second):
        balancer.replicas = [first, second]
        ids = []
        for n in range(INSTANCES):  # every start acknowledged before the kill
            started = await balancer.call("workflow_start", {"workflow": "relay",
                                                             "inputs": {"rounds": ROUNDS, "tag": f"i{n}"}})
            assert started is not None, balancer.tool_errors
            ids.append(started["workflow_id"])
        total = balancer.calls + INSTANCES * (ROUNDS + 1)
        killer = asyncio.create_task(kill_when(balancer, second, after_calls=total // 2))
        await asyncio.gather(*(drive(balancer, wid) for wid in ids))
        await killer
        assert balancer.tool_errors == [], "a client saw an error:\n" + "\n".join(balancer.tool_errors)
        assert second.proc.wait(10) == -signal.SIGKILL
        finals = [await balancer.call("workflow_state_read", {"workflow_id": wid}) for wid in ids]
        assert first.proc.poll() is None  # the survivor served everything after the kill
    assert balancer.tool_errors == []
    for n, final in enumerate(finals):
        expected = [f"did: i{n} round {r}" for r in range(ROUNDS)]
        assert final is not None and final["state"]["answers"] == expected and final["state"]["count"] == ROUNDS
    for n, (wid, record) in enumerate(read_back(pg_url, ids).items()):
        assert record.status == "completed", (wid, record.status, record.error)
        stored = json.dumps(record.state)  # the layout is the interpreter's; each answer once
        assert all(stored.count(f'"did: i{n} round {r}"') == 1 for r in range(ROUNDS)), stored
    print(f"{balancer.calls} calls, {len(balancer.lost)} lost with the killed replica: {balancer.lost}")


@pytest.mark.slow
async def test_sub_agents_of_one_fanout_on_different_replicas(tmp_path: Path, pg_url: str) -> None:
    """Concurrent writers of ONE instance on two replicas: their saves conflict, and only the
    server's conflict retry (reload, apply again) keeps the clients from seeing it."""
    balancer = Balancer([], random.Random(7))
    items = [f"t{n}" for n in range(6)]
    async with replicas(tmp_path, pg_url, 2) as pair:
        balancer.replicas = pair
        started = await balancer.call("workflow_start", {"workflow": "fanout", "inputs": {"items": items}})
        assert started is not None, balancer.tool_errors
        wid = started["workflow_id"]
        first = await balancer.call("workflow_get_next_step", {"workflow_id": wid})
        assert first is not None and first["step"]["type"] == "parallel_tasks"
        tasks = [t["task_id"] for t in first["step"]["definition"]["tasks"]]
        await asyncio.gather(*(drive(balancer, wid, task) for task in tasks))
        assert balancer.tool_errors == [], "a client saw an error:\n" + "\n".join(balancer.tool_errors)
        done = await balancer.call("workflow_step_complete", {"workflow_id": wid, "step_id": "fan"})
        assert done is not None and done["status"] == "completed", balancer.tool_errors
        final = await balancer.call("workflow_state_read", {"workflow_id": wid})
    assert final is not None
    assert sorted(final["state"]["shared"]) == sorted(f"did: {i} part {p}" for i in items for p in range(3))
    assert final["state"]["count"] == len(items) * 3
    assert read_back(pg_url, [wid])[wid].status == "completed"
