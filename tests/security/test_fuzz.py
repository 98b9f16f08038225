"""Fuzzing what a client or an author controls: MCP tool arguments, YAML files, templates.

For the tools, random JSON-ish arguments (wrong types, unknown keys, huge strings, lone
surrogates, deep nesting) go to all 20 tools through a real in-memory `mcp.Client`; every
call must get a well-formed reply (a result with content, `isError` a bool, structured
content a dict on success) and a trivial call must still succeed afterwards.  The YAML
loader and the template parser must answer any text with a result or their own error
type, never another exception.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from srv_helpers import make_project

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver
from aromcp_workflows.definition.errors import DefinitionError
from aromcp_workflows.expressions import ExpressionError, parse_template
from aromcp_workflows.expressions.engine import command_plan
from aromcp_workflows.expressions.shell_context import ShellContextError

REPLY_WITHIN = 60  # seconds: a hang guard, not a speed measurement
TEXT = st.text(max_size=40) | st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3) \
    | st.sampled_from(["messages", "wf_0", "raw.x", "{{ x }}", "", "../../etc/passwd", "/etc/passwd",
                       "x" * 300_000, "input", "inputs.who"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | TEXT
JSONISH = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


class _Loop:
    """One server and client on a background event loop, shared by every example."""

    def __init__(self, server: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.ready: asyncio.Future[Any] = asyncio.run_coroutine_threadsafe(self._open(server), self.loop)
        self.client = self.ready.result(REPLY_WITHIN)

    async def _open(self, server: Any) -> Any:
        self.stop = asyncio.Event()
        opened: asyncio.Future[Any] = self.loop.create_future()

        async def hold() -> None:
            async with Client(server, mode="legacy") as client:
                opened.set_result(client)
                await self.stop.wait()

        self.task = self.loop.create_task(hold())
        return await opened

    def call(self, name: str, args: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(self.client.call_tool(name, args), self.loop).result(REPLY_WITHIN)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        asyncio.run_coroutine_threadsafe(asyncio.wait_for(self.task, 30), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[_Loop, dict[str, list[str]]]]:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    root = tmp_path_factory.mktemp("fuzz")
    project, home = make_project(root / "project"), root / "home"
    home.mkdir()
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=root / "s.sqlite3", home=home))
    runner = _Loop(server)
    tools = asyncio.run_coroutine_threadsafe(runner.client.list_tools(), runner.loop).result(REPLY_WITHIN)
    params = {tool.name: sorted(tool.input_schema.get("properties", {})) for tool in tools.tools}
    try:
        yield runner, params
    finally:
        runner.close()


def test_all_twenty_tools_are_fuzzed(session):
    assert len(session[1]) == 20


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_arguments_get_a_well_formed_reply(session, data):
    runner, params = session
    name = data.draw(st.sampled_from(sorted(params)))
    known = st.fixed_dictionaries({}, optional=dict.fromkeys(params[name], JSONISH))
    args = data.draw(known | st.dictionaries(st.text(max_size=10), JSONISH, max_size=3))
    try:
        result = runner.call(name, args)
    except UnicodeEncodeError:
        return  # the client cannot put a lone surrogate on the wire: nothing reached the server
    assert isinstance(result.is_error, bool) and result.content, result
    assert all(isinstance(getattr(block, "text", None), str) for block in result.content)
    if not result.is_error:
        assert isinstance(result.structured_content, dict), result
    else:
        assert len(result.content[0].text) < 20_000, "an error echoed a flood"
    alive = runner.call("workflow_list", {"include_global": False})
    assert not alive.is_error and alive.structured_content["workflows"]


# -- the YAML loader and the template parser -------------------------------------------
YAML_PIECES = st.sampled_from(["name: x\n", "steps:\n", "  - type: shell_command\n", "    command: \"{{ a }}\"\n",
                               "&a ", "*a ", "[", "]", "{", "}", "!foo ", "!!python/object:os.system ", "<<: *a\n",
                               "- ", ": ", "\t", "'", "\"", "---\n", "\n", "  ", "#", "|\n", "? "])
YAML_TEXT = st.lists(YAML_PIECES | st.text(max_size=6), max_size=40).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=YAML_TEXT)
def test_yaml_loader_answers_any_text(tmp_path_factory, text):
    root: Path = tmp_path_factory.mktemp("yaml")
    path = root / "w.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    loader = WorkflowLoader(WorkflowResolver(project_dir=root))
    try:
        loaded = loader.load_file(path)
    except DefinitionError as exc:
        assert exc.problems and all(p.message for p in exc.problems)
        return
    assert loaded


TEMPLATE_PIECES = st.sampled_from(["{{", "}}", " x ", "| raw", "| json", "|", "'", '"', "`", "$(", ")", "${",
                                   "}", "<<EOF\n", "\nEOF", "<<'E'\n", "#", "\\", "$", "((", "))", "\n", " ", "case "])
TEMPLATE_TEXT = st.lists(TEMPLATE_PIECES | st.text(max_size=4), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TEMPLATE_TEXT)
def test_template_parser_and_shell_lexer_answer_any_text(text):
    try:
        parse_template(text)
        command_plan(text)
    except (ExpressionError, ShellContextError) as exc:
        assert str(exc)
