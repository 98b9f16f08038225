"""`workflow_start(idempotency_key=...)`: a start whose answer was lost is safe to send again.

A client whose `workflow_start` reply was
lost (its server killed between commit and reply) could only start again, making a second
instance.  With a key, the same request answers the instance the key started, as it stands
now; another request under the same key is refused; and the key is kept in the store with
the instance, so a server started afterwards on the same store knows it too.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from srv_helpers import fails, ok

from aromcp_workflows.server.mcp import build_server


def start_args(key: str | None, prefix: str = "hello", **more: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"workflow": "messages", "inputs": {"who": prefix}, **more}
    return args | ({"idempotency_key": key} if key is not None else {})


def another_server(project: Path, store_path: Path, home: Path) -> Any:
    """A second server on the same store file: a restarted process, or another window."""
    def factory() -> Any:
        from aromcp_workflows.app.service import WorkflowService

        return WorkflowService(project_dir=project, store_path=store_path, home=home)

    return build_server(factory)


async def test_the_same_key_answers_the_same_instance(server: Any, mode: str) -> None:
    async with Client(server, mode=mode) as client:
        first = await ok(client, "workflow_start", start_args("key-1"))
        again = await ok(client, "workflow_start", start_args("key-1"))
        assert again == first  # nothing happened in between: the very same answer
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": first["workflow_id"]}))["step"]
        assert step is not None
        later = await ok(client, "workflow_start", start_args("key-1"))
        assert later["workflow_id"] == first["workflow_id"]
        other = await ok(client, "workflow_start", start_args("key-2"))
        plain = await ok(client, "workflow_start", start_args(None))
        listed = await ok(client, "workflow_status", {})
    ids = [row["workflow_id"] for row in listed["instances"]]
    assert sorted(ids) == sorted({first["workflow_id"], other["workflow_id"], plain["workflow_id"]})


async def test_another_request_under_a_used_key_is_refused(server: Any) -> None:
    async with Client(server) as client:
        first = await ok(client, "workflow_start", start_args("key-1"))
        text = await fails(client, "workflow_start", start_args("key-1", prefix="other"))
        assert "idempotency_key 'key-1' was already used" in text and first["workflow_id"] in text
        assert "nothing was started" in text and "use a new key" in text
        listed = await ok(client, "workflow_status", {})
    assert [row["workflow_id"] for row in listed["instances"]] == [first["workflow_id"]]


@pytest.mark.parametrize("key", ["", "tab\there", "x" * 201])
async def test_a_malformed_key_is_refused_before_anything_starts(server: Any, key: str) -> None:
    async with Client(server) as client:
        text = await fails(client, "workflow_start", start_args(key))
        assert "idempotency_key must be 1 to 200 characters without control characters" in text
        assert (await ok(client, "workflow_status", {}))["instances"] == []


async def test_a_server_started_later_knows_the_key(server: Any, project: Path, store_path: Path,
                                                    home: Path) -> None:
    async with Client(server) as client:
        first = await ok(client, "workflow_start", start_args("key-1"))
    async with Client(another_server(project, store_path, home)) as client:
        again = await ok(client, "workflow_start", start_args("key-1"))
        assert again["workflow_id"] == first["workflow_id"]
        assert "was already used" in await fails(client, "workflow_start", start_args("key-1", prefix="x"))


async def test_resends_racing_on_two_servers_make_one_instance(server: Any, project: Path, store_path: Path,
                                                               home: Path) -> None:
    """Eight copies of one start, sent at once to two servers sharing a store: one instance."""
    async with Client(server) as one, Client(another_server(project, store_path, home)) as two:
        answers = await asyncio.gather(*(ok(client, "workflow_start", start_args("key-race"))
                                          for client in (one, two) * 4))
        listed = await ok(one, "workflow_status", {})
    assert len({answer["workflow_id"] for answer in answers}) == 1
    assert len(listed["instances"]) == 1
