"""The `interrupted` status over MCP: what `run` leaves after Ctrl-C, seen by a client.

The instance is marked by `WorkflowService.interrupt` (what the runner calls once its
server has stopped); a real client then sees it in `workflow_status`, `workflow_resume`
puts it back to running, and `workflow_complete(status="cancelled")` ends one instead."""

from __future__ import annotations

from typing import Any

from mcp import Client
from srv_helpers import ok


def service_of(store_path: Any, project: Any, home: Any) -> Any:
    from aromcp_workflows.app.service import WorkflowService

    return WorkflowService(project_dir=project, store_path=store_path, home=home)


async def test_interrupted_is_shown_resumed_and_cancellable(server, mode, project, store_path, home):
    async with Client(server, mode=mode) as client:
        first = (await ok(client, "workflow_start", {"workflow": "failing"}))["workflow_id"]
        second = (await ok(client, "workflow_start", {"workflow": "failing"}))["workflow_id"]
        outside = service_of(store_path, project, home)  # another process: the runner after Ctrl-C
        for wid in (first, second):
            assert outside.interrupt(wid, "interrupted by SIGINT during boom").status == "interrupted"
        status = await ok(client, "workflow_status", {"workflow_id": first})
        assert status["status"] == "interrupted" and status["error"] == "interrupted by SIGINT during boom"
        listed = {row["workflow_id"]: row["status"] for row in (await ok(client, "workflow_status"))["instances"]}
        assert listed == {first: "interrupted", second: "interrupted"}

        resumed = await ok(client, "workflow_resume", {"workflow_id": first})
        assert resumed["status"] == "running"
        status = await ok(client, "workflow_status", {"workflow_id": first})
        assert status["status"] == "running" and "error" not in status
        await ok(client, "workflow_complete", {"workflow_id": second, "status": "cancelled"})
        assert (await ok(client, "workflow_status", {"workflow_id": second}))["status"] == "cancelled"
        # a finished instance is never marked interrupted
        assert outside.interrupt(second).status == "cancelled"
