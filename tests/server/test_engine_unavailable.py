"""A server that cannot start a V8 process (out of processes, memory or file descriptors)
answers the call with a retryable error, changes nothing, and works once it can again.

The fault is real: the server's own open-file limit is lowered from outside (`prlimit`)
so that the pipes of a new V8 child cannot be made, then raised again."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest
from rawstdio import RawServer, RawToolError
from srv_helpers import make_project, serve_args, server_env

pytestmark = pytest.mark.slow

FLOW = """\
name: needs-js
default_state:
  raw: { rounds: 3 }
steps:
  - id: outer
    type: foreach
    items: "{{ Array.from({length: raw.rounds}, (_, i) => i * 2) }}"
    steps:
      - id: think
        type: agent_prompt
        prompt: "item {{ item }}"
"""


async def test_a_server_that_cannot_start_v8_says_retry_and_loses_nothing(tmp_path: Path) -> None:
    if not hasattr(resource, "prlimit") or not Path("/proc/self/fd").exists():
        pytest.skip("needs prlimit and /proc")
    project = make_project(tmp_path / "project", {"needs-js": FLOW})
    home, store = tmp_path / "home", tmp_path / "store.sqlite3"
    home.mkdir()
    server = await RawServer(serve_args(project, store), server_env(home, store), project,
                             tmp_path / "server.stderr").start()
    try:
        started = await server.call_tool("workflow_start", {"workflow": "needs-js"})
        workflow_id = started["workflow_id"]
        for child in _children(server.pid):  # the V8 children validation started: new ones are needed
            os.kill(child, 9)
        soft, hard = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{server.pid}/fd")), hard))
        try:
            with pytest.raises(RawToolError) as refused:
                await server.call_tool("workflow_get_next_step", {"workflow_id": workflow_id})
        finally:
            resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (soft, hard))
        text = str(refused.value)
        assert "could not start a V8 process" in text and "nothing was changed" in text and "Retry" in text
        assert "internal error" not in text
        step = (await server.call_tool("workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        assert (step["id"], step["definition"]["prompt"]) == ("outer.think#1", "item 0")
        status = await server.call_tool("workflow_status", {"workflow_id": workflow_id})
        assert status["status"] == "running"
    finally:
        await server.kill()


def _children(pid: int) -> list[int]:
    return [int(child) for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()]
