"""`workflow_validate` over MCP runs the same JavaScript and scope checks as the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from rawstdio import RawServer
from srv_helpers import make_project, ok, serve_args, server_env

FLOW = """\
name: typo
default_state:
  raw: { count: 0 }
steps:
  - type: user_message
    message: "{{ conut }} and {{ count * }}"
  - type: user_message
    message: "{{ item }}"
"""


async def test_validate_reports_syntax_scope_and_typos_with_positions(server, mode):
    async with Client(server, mode=mode) as client:
        report = await ok(client, "workflow_validate", {"yaml": FLOW})
    assert report["valid"] is False
    assert [(e["line"], e["column"], e["message"]) for e in report["errors"]] == [
        (6, 5, "template {{ count * }} is not valid JavaScript: SyntaxError: unexpected end of the "
               "expression (something is missing at its end)"),
        (6, 5, "template {{ conut }} reads 'conut', which is not defined here (did you mean 'count'?)"),
        (8, 5, "template {{ item }} reads 'item', which exists only inside a foreach or a sub-agent "
               "task; here (outside any loop or task) it is undefined"),
    ]
    assert {e["file"] for e in report["errors"]} == {"<yaml>"}


@pytest.mark.slow
async def test_a_server_compiles_workflow_javascript_in_its_v8_child(tmp_path):
    """Validation (every workflow_start and workflow_validate) compiles JavaScript in the
    server's V8 child processes: V8 mapped into the server process itself cost it ~50 MB
    (libmini_racer.so and a second isolate)."""
    def maps_v8(pid: int) -> bool:
        return "libmini_racer" in Path(f"/proc/{pid}/maps").read_text()

    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc")
    project, home, store = make_project(tmp_path / "project"), tmp_path / "home", tmp_path / "store.sqlite3"
    home.mkdir()
    server = await RawServer(serve_args(project, store), server_env(home, store), project,
                             tmp_path / "server.stderr").start()
    try:
        report = await server.call_tool("workflow_validate", {"yaml": FLOW})
        assert "SyntaxError" in report["errors"][0]["message"]  # V8 compiled it
        children = [child for task in Path(f"/proc/{server.pid}/task").iterdir()
                    for child in (task / "children").read_text().split()]
        assert any(maps_v8(int(child)) for child in children), "no V8 child compiled it"
        assert not maps_v8(server.pid), "V8 is loaded into the server process"
    finally:
        await server.kill()
