"""What leaves the server: every tool reply, every tool error, every log line.

All tool calls pass `GuardedServer.call_tool`, the one place where results and errors leave,
so masking and error shaping cannot be forgotten by a tool:

- secrets are masked with the instance's masker (values under sensitive keys of its inputs
  and state, wherever they appear) plus any secret in the call's own arguments; the step
  handed to the agent keeps its `definition` (the agent must use those values) but not
  its instructions, which may echo an answer;
- a wrong argument is the client's error, said in one line per field, never "internal";
- no error echoes more than MAX_ECHO characters of any one value, nor MAX_ERROR in all.

Logs get the same treatment through a record factory installed by `serve()`: known secrets
(every secret a reply was masked with, in a bounded list that always holds the newest) and
secrets recognised by their shape (`GITHUB_TOKEN=…`, `ghp_…`) are masked, and each record
is capped, so a debug log of HTTP bodies shows their shape without their secrets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import traceback
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from aromcp_workflows.instances import (
    CommitFailed,
    CommitLost,
    Confirmations,
    collecting,
    confirm_save,
    confirmed_quietly,
)
from aromcp_workflows.observe import Observer
from aromcp_workflows.safety import KNOWN_SECRETS, MAX_ECHO, MAX_LOG, Masker, redact, secret_values

ANSWER_WAIT_S = 0.05  # how long the loop waits for a deferred save's answer before a thread does
STEP_KEYS = ("step", "next_step")
MaskerFor = Callable[[str | None], Masker | None]


class GuardedServer(MCPServer):
    """MCPServer whose tool replies and errors are masked and shaped in one place.
    `service`: what builds (once) and returns the service its tools call, for a web view
    served beside them (`serve --http --ui`)."""

    def __init__(self, *args: Any, masker_for: MaskerFor, service: Callable[[], Any] | None = None,
                 observer: Observer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._masker_for = masker_for
        self.service = service
        self.observer = observer  # tracing (observe/), when on: the call's span gets the workflow's attributes

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        """The tool's reply, let out only once what it acknowledges is committed: the saves the
        call sent without waiting (`app.confirm`) are confirmed here, while the reply is already
        built.  A save that lost to another writer kept nothing of the call: it runs again,
        this time waiting for each save (its conflicts retried inside, with back-off)."""
        if self.observer is not None:
            self.observer.tool_call(name, arguments)
        from aromcp_workflows.expressions import not_text  # not at start: it brings the engine

        problem = not_text(arguments)
        if problem is not None:  # text no store can encode: refused here, before anything is changed
            raise ToolError(f"{name}: {problem}; send well-formed text. Nothing was changed.")
        for defer in (True, False):
            with collecting(defer) as pending:
                try:
                    result = await super().call_tool(name, arguments, context)
                except ToolError as exc:
                    await _quietly(pending)
                    raise type(exc)(self.error_text(name, arguments, exc)) from exc.__cause__
            try:
                await _confirmed(pending, arguments)
            except CommitLost:
                continue
            except CommitFailed as exc:
                raise ToolError(self.error_text(name, arguments, ToolError(str(exc)))) from None
            break
        if isinstance(result, CallToolResult):
            return self.masked(arguments, result)
        return result

    async def run_stdio_async(self) -> None:
        """Serve stdio with every line answered (see stdio_guard), then as the SDK does."""
        from mcp.server.stdio import stdio_server

        from aromcp_workflows.server.stdio_guard import AnsweringReader

        async with stdio_server() as (read_stream, write_stream):
            await self._lowlevel_server.run(AnsweringReader(read_stream, write_stream), write_stream,
                                            self._lowlevel_server.create_initialization_options())

    def _masker(self, arguments: dict[str, Any], workflow_id: Any = None) -> Masker:
        wid = workflow_id if isinstance(workflow_id, str) else arguments.get("workflow_id")
        masker = None
        if isinstance(wid, str) and len(wid) <= MAX_ECHO:
            try:
                masker = self._masker_for(wid)
            except Exception:
                masker = None
        masker = masker or Masker()
        KNOWN_SECRETS.add(masker.secrets)
        return masker

    def error_text(self, name: str, arguments: dict[str, Any], exc: ToolError) -> str:
        """The error a client sees: its own mistake said plainly, secrets masked, echoes capped."""
        cause = exc.__cause__
        text = _invalid_arguments(name, cause) if isinstance(cause, ValidationError) else str(exc)
        masker = self._masker(arguments).with_secrets(_argument_secrets(arguments))
        return redact(text, masker)

    def masked(self, arguments: dict[str, Any], result: CallToolResult) -> CallToolResult:
        """The result with secrets masked, its text content the same JSON written compactly
        (a client that shows the text instead of the structured content reads no more than
        it must: the SDK's text is indented)."""
        data = result.structured_content
        if not isinstance(data, dict):
            return result
        masker = self._masker(arguments, data.get("workflow_id"))
        masked = {key: _mask_step(masker, value) if key in STEP_KEYS else masker.mask(value, key)
                  for key, value in data.items()}
        text = json.dumps(masked, separators=(",", ":"), ensure_ascii=False)
        return result.model_copy(update={"structured_content": masked,
                                         "content": [TextContent(type="text", text=text)]})


async def _confirmed(pending: Confirmations, arguments: dict[str, Any]) -> None:
    """Confirm each deferred save: on the event loop when its answer comes within
    `ANSWER_WAIT_S` (the usual case: it traveled while the reply was built), else — a slow
    or broken connection, which may wait for PostgreSQL to come back — in a worker thread."""
    workflow_id = str(arguments.get("workflow_id", ""))[:MAX_ECHO]
    for item in pending:
        if await _answered(item):
            confirm_save(item, workflow_id)
        else:
            await anyio.to_thread.run_sync(confirm_save, item, workflow_id)


async def _answered(item: Any) -> bool:
    """Whether the save's answer is in: waits (on the loop, for its socket) while it travels."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ANSWER_WAIT_S
    while (state := item.poll()) == "waiting":
        left = deadline - loop.time()
        fd = item.watch() if left > 0 else None
        if fd is None:
            return False
        readable: asyncio.Future[None] = loop.create_future()
        try:
            loop.add_reader(fd, _resolve, readable)
            timer = loop.call_later(left, _resolve, readable)
            try:
                await readable
            finally:
                timer.cancel()
                loop.remove_reader(fd)
        finally:
            os.close(fd)  # our duplicate (`watch`): the connection's own socket is not ours to close
    return state == "in"


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _quietly(pending: Confirmations) -> None:
    if pending:
        await anyio.to_thread.run_sync(confirmed_quietly, pending)


def _mask_step(masker: Masker, step: dict[str, Any] | None) -> dict[str, Any] | None:
    if not isinstance(step, dict):
        return step
    return {k: masker.mask(v, k) if k != "definition" else v for k, v in step.items()}


def _argument_secrets(arguments: dict[str, Any]) -> set[str]:
    try:
        return secret_values(arguments)
    except RecursionError:
        return set()


def _invalid_arguments(name: str, error: ValidationError) -> str:
    """One line per wrong argument: where, what was expected, what came (its type only)."""
    lines = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item.get("loc", ())) or "(arguments)"
        got = type(item.get("input")).__name__
        lines.append(f"- `{where}`: {item.get('msg', 'invalid')} (got {got})")
    return (f"invalid arguments for {name}:\n" + "\n".join(lines) +
            "\nFix the arguments to match the tool's input schema (tools/list) and call again.")


def install_log_masking() -> None:
    """Mask and cap every log record of this process at creation (all loggers, all handlers)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "aromcp_masking", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            record.msg, record.args = redact(record.getMessage(), limit=MAX_LOG), None
            if record.exc_info:
                text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
                record.exc_text = redact(text, limit=MAX_LOG)
        except Exception:  # a record that cannot be formatted is left to logging's own handling
            pass
        return record

    factory.aromcp_masking = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
