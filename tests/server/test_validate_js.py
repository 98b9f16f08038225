"""`workflow_validate` over MCP runs the same JavaScript and scope checks as the CLI."""

from __future__ import annotations

from mcp import Client
from srv_helpers import ok

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
