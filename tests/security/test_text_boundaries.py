"""Text no store can encode: half of a UTF-16 surrogate pair.

Found by probing the command line and the tools with bad input: a computed field that cut
an emoji in two (`'caf😀 ok'.slice(0, 4)`, a valid workflow) made the commit fail, the run
abort and the instance end cancelled; a lone `"\\ud800"` in a tool's JSON, or in `fork
--set`, surfaced as an internal error or a traceback.  Now V8's values are made well formed
as JavaScript's `toWellFormed()` does (U+FFFD for each half), and a half given from outside
is refused with one clear line, nothing changed.  `fork --set` also refuses NaN,
infinities and nesting too deep to store, with a usage error instead of a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from srv_helpers import fails, ok

from tests.test_cli_hints import cli, project, started  # noqa: F401  (project: a fixture)

CUT = """
name: cut
description: "a transform that cuts an emoji in two"
version: "1.0.0"
default_state: {raw: {n: 0}}
state_schema:
  computed:
    bad: {from: raw.n, transform: "input > 0 ? 'caf😀 ok'.slice(0, 4) : 'ok'"}
steps:
  - {type: state_update, path: raw.n, value: 1}
  - {id: say, type: agent_prompt, prompt: "bad is {{ bad }}"}
"""


async def test_a_transform_that_cuts_a_character_in_two_gives_well_formed_text(make_server: Any) -> None:
    server, _project = make_server({"cut": CUT})
    async with Client(server) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "cut"}))["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["id"] == "say" and "bad is caf\ufffd" in step["instructions"] + str(step["definition"]), step
        state = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        assert state["bad"] == "caf\ufffd"
        status = await ok(client, "workflow_status", {"workflow_id": wid})
        assert status["status"] == "running"


@pytest.mark.parametrize("tool,arguments", [
    ("workflow_state_update", {"updates": [{"path": "raw.x", "value": "a\ud800b"}]}),
    ("workflow_step_complete", {"step_id": "say", "result": "\udc00"}),
    ("workflow_fork", {"at": "say", "edits": {"raw.x": "\ud800"}}),
])
async def test_half_a_surrogate_pair_from_a_client_is_refused_and_nothing_changes(make_server: Any, tool: str,
                                                                                  arguments: dict[str, Any]) -> None:
    server, _project = make_server({"cut": CUT})
    async with Client(server) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "cut"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": wid})
        before = (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"]
        error = await fails(client, tool, {"workflow_id": wid, **arguments})
        assert "half of a UTF-16 surrogate pair" in error and "Nothing was changed" in error, error
        assert "internal error" not in error
        assert (await ok(client, "workflow_state_read", {"workflow_id": wid}))["state"] == before
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": wid}))["step"]
        assert step["id"] == "say"  # still waiting on the same step


@pytest.mark.slow
@pytest.mark.parametrize("value,expected", [
    ('"\\ud800"', "half of a UTF-16 surrogate pair"),
    ("NaN", "NaN is not a JSON value"),
    ("-Infinity", "-Infinity is not a JSON value"),
    ("1e999", "1e999 is beyond the largest number"),
    ("[" * 5000 + "]" * 5000, "nested too deeply"),
])
def test_fork_set_refuses_what_cannot_be_stored(project: Path, value: str, expected: str) -> None:  # noqa: F811
    workflow_id = started(project)
    done = cli(project, "fork", workflow_id, "--set", f"raw.x={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]


async def test_a_path_deeper_than_any_state_is_refused_with_its_reason(make_server: Any) -> None:
    """A 5,000-name path overran Python's recursion limit: an internal error."""
    server, _project = make_server({"cut": CUT})
    async with Client(server) as client:
        wid = (await ok(client, "workflow_start", {"workflow": "cut"}))["workflow_id"]
        error = await fails(client, "workflow_state_update", {"workflow_id": wid, "updates": [
            {"path": "raw" + ".a" * 5000, "value": 1}]})
        assert "deeper than 64 names" in error and "internal error" not in error, error[:300]
