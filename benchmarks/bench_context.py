"""Bytes an orchestrator agent reads, per shipped workflow.

An orchestrator model reads the tool list in every request and each reply once, so for a
run of N tool calls it reads N x `tools/list` + every result.  Claude Code shows the model
a tool's name, description and input schema (not the rest of the listing) and, of a
result, only its structured content as JSON; other clients show the text content.  So
the table gives the listing on the wire and the part of it a model sees, each result's
structured content and text, and the total read as N x listing + results.

Each run is the headless runner (the same agent the CLI uses) over an in-memory MCP
session with the real server, on a fresh project and store; shell commands run for real.

    python benchmarks/bench_context.py            # this tree
    python benchmarks/bench_context.py --tree DIR # another checkout of the project (before/after)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

RUNS: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    # (label, workflow, inputs, answers)
    ("standards:fix", "standards:fix", {}, {"file": "examples/answers/standards-fix.yaml"}),
    ("standards:check", "standards:check", {}, {"check_typescript": {"errors": 0}, "lint_project": {"errors": 0}}),
    ("deps:analyze (review)", "deps:analyze", {"review": "true"}, {"review": {"findings": ["pin the versions"]}}),
    ("ci:retry-tests (3 failing attempts)", "ci:retry-tests", {"command": "false", "max_attempts": "3"}, {}),
    ("examples:parallel-batches", "examples/examples:parallel-batches.yaml",
     {"files": '["a.py", "b.py", "c.py", "d.py", "e.py"]', "batch_size": "2"},
     {"review": {"findings": ["an off-by-one in the loop"]}}),
]


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


class Recorder:
    """An MCP client that counts the bytes of every result it hands the agent."""

    def __init__(self, client: Any):
        self.client = client
        self.calls = 0
        self.structured = 0
        self.text = 0

    async def call_tool(self, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
        result = await self.client.call_tool(name, args, **kwargs)
        self.calls += 1
        self.structured += compact(result.structured_content) if result.structured_content is not None else 0
        self.text += sum(len(getattr(c, "text", "").encode()) for c in result.content)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def demo_project(where: Path) -> Path:
    subprocess.run([sys.executable, str(REPO / "examples" / "demo_project.py"), str(where)], check=True,
                   capture_output=True)
    return where


async def measure(workflow: str, inputs: dict[str, Any], answers: dict[str, Any]) -> dict[str, Any]:
    from mcp import Client

    from aromcp_workflows.runner.agent import HeadlessAgent
    from aromcp_workflows.runner.answers import AnswerBook
    from aromcp_workflows.runner.report import Printer
    from aromcp_workflows.server.holder import default_service_factory
    from aromcp_workflows.server.mcp import build_server

    with tempfile.TemporaryDirectory() as tmp:
        project = demo_project(Path(tmp) / "project")
        book = AnswerBook.load(REPO / answers["file"]) if "file" in answers else AnswerBook(answers)
        target = str(REPO / workflow) if workflow.endswith(".yaml") else workflow
        server = build_server(default_service_factory(str(project), str(Path(tmp) / "store.sqlite3")),
                              allowed_files=(target,) if target.endswith(".yaml") else ())
        os.chdir(project)
        async with Client(server, mode="legacy") as client:
            listed = (await client.list_tools()).tools
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
            listing = compact({"tools": tools})
            seen = compact([{k: t.get(k) for k in ("name", "description", "inputSchema")} for t in tools])
            recorder = Recorder(client)
            agent = HeadlessAgent(recorder, book, project, Printer(io.StringIO(), True))
            outcome = await agent.run(target, inputs)
        os.chdir(REPO)
    return {"status": outcome.status, "calls": recorder.calls, "tools_list": listing, "tools_seen": seen,
            "structured": recorder.structured, "text": recorder.text,
            "read": recorder.calls * listing + recorder.structured,
            "read_seen": recorder.calls * seen + recorder.structured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", help="measure another checkout of the project (its package is imported)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.tree:
        sys.path.insert(0, str(Path(args.tree).resolve()))
    rows = {label: asyncio.run(measure(workflow, inputs, answers)) for label, workflow, inputs, answers in RUNS}
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'workflow':<36} {'status':<9} {'calls':>5} {'list':>6} {'seen':>6} {'results':>8} "
          f"{'/call':>5} {'text':>7} {'read':>7} {'read seen':>9}")
    for label, row in rows.items():
        print(f"{label:<36} {row['status']:<9} {row['calls']:>5} {row['tools_list']:>6} {row['tools_seen']:>6} "
              f"{row['structured']:>8} {row['structured'] / max(row['calls'], 1):>5.0f} {row['text']:>7} "
              f"{row['read']:>7} {row['read_seen']:>9}")
    print("list = tools/list on the wire; seen = its name, description and input schema (what Claude Code "
          "hands the model); results = the structured content of every reply; text = their text content; "
          "read = calls x list + results; read seen = calls x seen + results")


if __name__ == "__main__":
    main()
