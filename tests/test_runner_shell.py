"""The runner's own `agent_shell_command`, stopped: Ctrl-C cancels the step wherever it
is, even while the command is still being started, and the command's whole group stops
with it (tests/e2e/test_stop_resume.py does it through `aromcp-workflows run`).

A cancel that landed while `asyncio.create_subprocess_exec` was still connecting the
pipes used to kill only the shell and then wait for the pipes to close, which a
background grandchild holds open: the run hung until it ended (a CI run waited 60 s).
A timed-out step waited, unbounded, for a child that had left the group."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from aromcp_workflows.runner.agent import HeadlessAgent
from aromcp_workflows.runner.answers import AnswerBook
from aromcp_workflows.runner.report import Printer
from tests.processes import running

GRANDCHILD = "sleep 97.5"  # a duration no other test uses: found by its command line in /proc


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("loop_steps", [1, 2, 3, 4, 8, 40])
async def test_a_cancel_at_any_point_of_the_spawn_stops_the_group_at_once(tmp_path: Path, loop_steps: int):
    agent = HeadlessAgent(None, AnswerBook(), tmp_path, Printer(None, quiet=True))
    step = {"id": "long", "type": "agent_shell_command",
            "definition": {"command": f"{GRANDCHILD} & touch started; wait"}}
    task = asyncio.create_task(agent.run_shell(step))
    for _ in range(loop_steps):  # 1-3: inside create_subprocess_exec; later: in communicate
        await asyncio.sleep(0)
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), 20)  # the grandchild would hold it for 97 s
    finally:
        survivors = running(GRANDCHILD)
        for pid in survivors:
            os.kill(pid, 9)
    assert task.cancelled()
    assert not survivors, f"still running after the cancel: {survivors}"


ESCAPED = "sleep 98.5"  # started in a session of its own: out of the group's reach


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
async def test_a_timeout_does_not_wait_for_a_child_that_left_the_group(tmp_path: Path):
    """A child that left the command's group (`setsid`) keeps its pipes open after the group
    is killed: the timed-out step is answered after a bounded wait, not when that child ends."""
    agent = HeadlessAgent(None, AnswerBook(), tmp_path, Printer(None, quiet=True))
    step = {"id": "slow", "type": "agent_shell_command",
            "definition": {"command": f"setsid {ESCAPED} & sleep 31.25", "timeout": 300}}
    try:
        answer = await asyncio.wait_for(agent.run_shell(step), 20)  # the escaped child lives 98 s
    finally:
        for pid in running(ESCAPED):
            os.kill(pid, 9)
    assert answer.status == "failed" and answer.error == "timed out after 300 ms"
    assert not running("sleep 31.25")  # the group itself was killed
