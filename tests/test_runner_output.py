"""The runner's printer and stop, alone: a stream that fails is dropped and reported once
(the run then stops as on a signal), the final lines reach stderr, and the exit status
says which signal stopped the run (tests/e2e/test_run_ends_cleanly.py does it for real)."""

from __future__ import annotations

import asyncio
import io
import signal

import pytest

from aromcp_workflows.runner.report import Printer, RunOutcome
from aromcp_workflows.runner.run import Stop, interrupted_reason


class Closing(io.StringIO):
    """A stream whose reader went away after `keep` writes."""

    def __init__(self, keep: int, error: OSError) -> None:
        super().__init__()
        self.keep, self.error = keep, error

    def write(self, text: str) -> int:
        if self.keep <= 0:
            raise self.error
        self.keep -= 1
        return super().write(text)


def test_a_failing_stream_is_dropped_and_reported_once(capsys: pytest.CaptureFixture[str]):
    lost: list[OSError] = []
    stream = Closing(1, BrokenPipeError(32, "Broken pipe"))
    printer = Printer(stream, on_lost=lost.append)
    printer.write("first")
    printer.write("second")
    printer.message("third")
    assert stream.getvalue() == "first\n" and len(lost) == 1 and isinstance(lost[0], BrokenPipeError)
    printer.final(RunOutcome(workflow="w", workflow_id="wf_1", status="interrupted", error="interrupted by SIGPIPE"))
    assert capsys.readouterr().err.splitlines()[:2] == ["status: interrupted (wf_1)", "error: interrupted by SIGPIPE"]


@pytest.mark.parametrize("error,signum", [(BrokenPipeError(32, "Broken pipe"), signal.SIGPIPE),
                                          (OSError(5, "Input/output error"), signal.SIGHUP)])
async def test_a_lost_output_stops_the_run_like_a_signal(error: OSError, signum: int):
    stop = Stop()

    async def run() -> None:
        stop.bind()
        Printer(Closing(0, error), on_lost=stop.output_lost).write("line")
        await asyncio.sleep(30)

    task = asyncio.create_task(run())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stop.signum == signum
    stop.trigger(signal.SIGHUP)  # a later hang-up changes nothing (and does not leave at once)
    assert stop.signum == signum


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 130), (signal.SIGHUP, 129),
                                         (signal.SIGPIPE, 141)])
def test_the_exit_status_says_which_signal(signum: int, code: int):
    assert RunOutcome(workflow="w", workflow_id="wf_1", status="interrupted", signal=signum).exit_code == code


def test_the_reason_names_the_signal_the_steps_and_why():
    assert interrupted_reason(signal.SIGINT, ["long"]) == "interrupted by SIGINT during long"
    assert interrupted_reason(signal.SIGHUP) == "interrupted by SIGHUP: the terminal went away"
    assert interrupted_reason(signal.SIGPIPE, ["a", "b"]).startswith("interrupted by SIGPIPE during a, b: its output")
