"""The fault-free run of the same plans: what every instance must end as.

The same agent (`agent.Agent`) drives the same plans through the real tool layer
(`server.mcp.build_server`, called in memory, no process, no fault) on a SQLite store in
a project of its own made the same way.  Its final states, step sequences and side
effects are what the checker compares the campaign's with.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from chaoslib.agent import Agent, CallLog, Outcome
from chaoslib.transport import Reply
from chaoslib.workload import Answers, Plan, make_project


class InMemoryTransport:
    def __init__(self, server: Any) -> None:
        self.server = server

    async def call(self, tool: str, args: dict[str, Any]) -> Reply:
        from mcp.server.mcpserver.exceptions import ToolError

        try:
            result = await self.server.call_tool(tool, args)
        except ToolError as exc:
            return Reply(False, {}, str(exc))
        text = " ".join(getattr(block, "text", "") for block in result.content or [])
        return Reply(not result.is_error, result.structured_content or {}, text)


class Reference:
    """The fault-free run: a project, a store, and the outcome of each plan."""

    def __init__(self, root: Path) -> None:
        from aromcp_workflows.server.mcp import build_server

        self.project = make_project(root / "project")
        self.store = root / "store.sqlite3"
        project, store = self.project, self.store

        def factory() -> Any:
            from aromcp_workflows.app.service import WorkflowService

            return WorkflowService(project_dir=project, store_path=store, home=root / "home")

        self.server = build_server(factory)
        self.transport = InMemoryTransport(self.server)
        self.outcomes: dict[str, Outcome] = {}

    async def run(self, plans: list[Plan], answers: Answers, concurrency: int = 24) -> dict[str, Outcome]:
        """Mostly waiting (the commands' pauses, the tool threads): 200 plans took 10.0 s eight at
        a time and 6.4-7.4 s with 16 to 64 at a time on 2 cores."""
        gate = asyncio.Semaphore(concurrency)
        log = CallLog()

        async def one(plan: Plan) -> None:
            async with gate:
                agent = Agent(self.transport, plan, answers, log, time.monotonic() + 600)
                self.outcomes[plan.key] = await agent.run()

        await asyncio.gather(*(one(plan) for plan in plans if plan.key not in self.outcomes))
        return self.outcomes
