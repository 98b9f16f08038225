"""Which files and packages of ours one `workflow_get_next_step` runs code in.

The call is the first step of a new instance (an agent step with one template), made in
process through a real MCP client; a profiler is set on the event loop's thread and on the
worker thread the tool runs in.  docs/architecture.md quotes what it prints.

    python benchmarks/call_road.py [--tree DIR]   # DIR: another checkout to measure (default: this one)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

WORKFLOW = """name: demo
default_state: {raw: {n: 0}}
state_schema:
  computed:
    double: {from: raw.n, transform: "input * 2"}
steps:
  - {type: agent_prompt, prompt: "Do {{ double }} things", state_update: {path: raw.done}}
  - {type: agent_prompt, prompt: "Again {{ n }}"}
"""


async def measure(root: Path) -> dict[str, set[str]]:
    import anyio.to_thread
    from mcp import Client

    from aromcp_workflows.server.holder import default_service_factory
    from aromcp_workflows.server.mcp import build_server

    calls: dict[str, set[str]] = defaultdict(set)

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(str(root)):
            calls[frame.f_code.co_filename].add(frame.f_code.co_name)

    project = Path(tempfile.mkdtemp())
    (project / ".aromcp" / "workflows").mkdir(parents=True)
    (project / ".aromcp" / "workflows" / "demo.yaml").write_text(WORKFLOW)
    server = build_server(default_service_factory(project_dir=str(project), store=str(project / "s.sqlite3")))
    real = anyio.to_thread.run_sync

    async def traced(function: Any, *args: Any, **options: Any) -> Any:
        def inner(*values: Any) -> Any:
            sys.setprofile(profile)
            try:
                return function(*values)
            finally:
                sys.setprofile(None)
        return await real(inner, *args, **options)

    async with Client(server, mode="legacy") as client:
        started = await client.call_tool("workflow_start", {"workflow": "demo"})
        workflow_id = started.structured_content["workflow_id"]
        await client.call_tool("workflow_list", {})
        anyio.to_thread.run_sync = traced
        sys.setprofile(profile)
        try:
            answer = await client.call_tool("workflow_get_next_step", {"workflow_id": workflow_id})
        finally:
            sys.setprofile(None)
            anyio.to_thread.run_sync = real
        assert answer.structured_content["step"] is not None, answer
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    tree = parser.parse_args().tree.resolve()
    sys.path.insert(0, str(tree))
    root = tree / "aromcp_workflows"
    calls = asyncio.run(measure(root))
    files = sorted(Path(f).relative_to(root) for f in calls)
    packages = sorted({f.parts[0] for f in files if len(f.parts) > 1})
    print(f"{len(files)} files in {len(packages)} packages: {', '.join(packages)}")
    for file in files:
        print(f"  {file}")


if __name__ == "__main__":
    main()
