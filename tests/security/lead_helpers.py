"""Helpers for the security tests: a project with given workflows, a server over a given
store, and tool-call assertions — everything through a real MCP client (in memory)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def project_with(root: Path, workflows: dict[str, str]) -> Path:
    target = root / ".aromcp" / "workflows"
    target.mkdir(parents=True, exist_ok=True)
    for name, text in workflows.items():
        (target / f"{name}.yaml").write_text(text, encoding="utf-8")
    return root


def service_for(project: Path, store: Path, home: Path) -> Any:
    from aromcp_workflows.app.service import WorkflowService

    return WorkflowService(project_dir=project, store_path=store, home=home)


def server_for(service: Any) -> Any:
    from aromcp_workflows.server.mcp import build_server

    return build_server(lambda: service)


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content or [])


async def ok(client: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, f"{name}({str(args)[:200]}) failed: {text_of(result)}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def fails(client: Any, name: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error, f"{name} should have failed, got {result.structured_content}"
    return text_of(result)
