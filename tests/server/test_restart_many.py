"""A server restarted on a store full of waiting instances of two versions of one workflow.

Instances share one parsed bundle per definition content (definition/shared.py); this
checks over real stdio that sharing never mixes versions up: 40 instances are started
(20 before the workflow file is edited, 20 after), the server is killed with SIGKILL and
started again on the same store, and every instance answers with its own version's step,
advances on its own, and leaves the others where they were.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rawstdio import RawServer
from srv_helpers import make_project, serve_args, server_env

pytestmark = pytest.mark.slow

WAITING = """
name: waiting
description: "one agent step that waits"
default_state:
  raw:
    files: ["a.py", "b.md", "c.py"]
state_schema:
  computed:
    py_files:
      from: raw.files
      transform: "input.filter(f => f.endsWith('.py'))"
steps:
  - id: ask
    type: agent_prompt
    prompt: "VERSION: {{ py_files.length }} python files"
  - id: done
    type: agent_prompt
    prompt: "VERSION done"
"""


async def boot(root: Path) -> RawServer:
    project, home, store = root / "project", root / "home", root / "store.sqlite3"
    return await RawServer(serve_args(project, store), server_env(home, store), project,
                           root / "server.stderr").start()


async def started(server: RawServer, count: int) -> list[str]:
    replies = await asyncio.gather(*(server.call_tool("workflow_start", {"workflow": "waiting"})
                                     for _ in range(count)))
    return [r["workflow_id"] for r in replies]


async def prompt_of(server: RawServer, workflow_id: str) -> str:
    answer = await server.call_tool("workflow_get_next_step", {"workflow_id": workflow_id})
    return str(answer["step"]["definition"]["prompt"])


def test_restarted_server_answers_each_instance_with_its_own_definition(tmp_path: Path) -> None:
    async def scenario() -> None:
        folder = make_project(tmp_path / "project") / ".aromcp" / "workflows"
        (tmp_path / "home").mkdir()
        (folder / "waiting.yaml").write_text(WAITING.replace("VERSION", "one"))
        server = await boot(tmp_path)
        old = await started(server, 20)
        (folder / "waiting.yaml").write_text(WAITING.replace("VERSION", "two"))
        new = await started(server, 20)
        assert await prompt_of(server, old[0]) == "one: 2 python files"
        assert await prompt_of(server, new[0]) == "two: 2 python files"
        await server.kill()

        server = await boot(tmp_path)
        try:
            tools = await server.request("tools/list", {})
            assert any(t["name"] == "workflow_get_next_step" for t in tools["tools"])
            prompts = await asyncio.gather(*(prompt_of(server, i) for i in old + new))
            assert prompts == ["one: 2 python files"] * 20 + ["two: 2 python files"] * 20
            done = await server.call_tool("workflow_step_complete",
                                          {"workflow_id": new[5], "step_id": "ask", "result": "ok"})
            assert done["next_step"]["definition"]["prompt"] == "two done"
            done = await server.call_tool("workflow_step_complete",
                                          {"workflow_id": old[5], "step_id": "ask", "result": "ok"})
            assert done["next_step"]["definition"]["prompt"] == "one done"
            assert await prompt_of(server, old[6]) == "one: 2 python files"
            assert await prompt_of(server, new[6]) == "two: 2 python files"
        finally:
            await server.close()

    asyncio.run(scenario())
