"""Issue 10 item 8: over MCP, only workflows named in the workflow directories run.

`workflow_start` with an absolute path or a `../` path used to load and run any YAML file
on disk.  Every MCP tool that takes a workflow now resolves a *name* in the project,
global and built-in directories; the command line keeps accepting files (`validate`,
`run`), where the person typing is the author.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from srv_helpers import fails, ok

EVIL = """name: evil
steps:
  - type: shell_command
    command: "touch {target}"
"""

TOOLS = [("workflow_start", {"inputs": {}}), ("workflow_get_info", {}), ("workflow_load_definition", {}),
         ("workflow_validate", {}), ("workflow_explain_plan", {})]


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    target = tmp_path / "PWNED"
    evil = tmp_path / "outside" / "evil.yaml"
    evil.parent.mkdir()
    evil.write_text(EVIL.format(target=target))
    return evil, target


@pytest.mark.parametrize("tool,extra", TOOLS, ids=[t for t, _ in TOOLS])
async def test_mcp_tools_refuse_file_paths(make_server, tmp_path: Path, tool: str, extra: dict):
    evil, target = _outside(tmp_path)
    server, project = make_server()
    relative = "../../../outside/evil.yaml"
    assert (project / ".aromcp" / "workflows" / relative).resolve() == evil.resolve()
    async with Client(server) as client:
        for spelling in (str(evil), relative, "../../../outside/evil", str(evil.with_suffix(""))):
            result = await client.call_tool(tool, {"workflow": spelling, **extra})
            text = "\n".join(getattr(b, "text", "") for b in result.content or [])
            assert result.is_error or (result.structured_content or {}).get("valid") is False, (spelling, text)
            assert "evil" not in str(result.structured_content or {}).replace(spelling, ""), text
            assert "only workflows in the workflow directories" in text or "invalid workflow name" in text, text
            if tool == "workflow_start":
                step = await client.call_tool("workflow_status", {})
                assert not step.is_error
        listed = await ok(client, "workflow_list", {"include_global": False})
    assert not target.exists()
    assert "evil" not in [w["name"] for w in listed["workflows"]]


async def test_names_in_the_workflow_directories_still_run(make_server):
    server, _ = make_server({"fine": "name: fine\nsteps:\n  - type: user_message\n    message: hi\n"})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "fine", "inputs": {}})
        step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
        assert step["messages"] == ["hi"]
        assert "only workflows" in await fails(client, "workflow_start", {"workflow": "/etc/passwd"})


@pytest.mark.slow  # starts a subprocess
def test_cli_validate_still_accepts_a_file(tmp_path: Path):
    evil, target = _outside(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(tmp_path), "validate",
                           str(evil)], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not target.exists()
