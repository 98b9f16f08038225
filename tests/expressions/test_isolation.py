"""V8 isolation: in a child process by default (a fatal V8 error costs one evaluation,
not the server), in this process on request (`AROMCP_V8_ISOLATION=thread`)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import pytest

from aromcp_workflows.expressions import ExpressionEngine, ExpressionError
from aromcp_workflows.expressions.isolation import ProcessV8Runtime


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_both_modes_evaluate_the_same(mode: str) -> None:
    engine = ExpressionEngine(isolation=mode)
    try:
        assert engine.render({"a": "{{ xs.map(x => x * 2) }}", "b": "n={{ n + 1 }}"}, {"xs": [1, 2], "n": 2}) == \
            {"a": [2, 4], "b": "n=3"}
        with pytest.raises(ExpressionError) as info:
            engine.test_transform("while (true) {}", None)
        assert info.value.kind == "timeout"
        assert engine.evaluate("1 + 1", {}) == 2
    finally:
        engine.close()


def test_a_fatal_v8_error_costs_one_evaluation_not_the_process() -> None:
    engine = ExpressionEngine(isolation="process")
    try:
        assert engine.evaluate("'warm'", {}) == "warm"
        epoch = engine.context_epoch
        with pytest.raises(ExpressionError) as info:
            engine.test_transform("new Array(1e9).fill(0)", None)
        assert info.value.kind == "memory"
        assert engine.context_epoch != epoch  # values cached in the dead V8 are known lost
        assert engine.evaluate("[1, 2].length", {}) == 2  # a fresh child answers
        assert engine.stats.out_of_memory >= 1
    finally:
        engine.close()


def test_unknown_isolation_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="AROMCP_V8_ISOLATION"):
        ExpressionEngine(isolation="fiber")


SLOW = "(() => { const t = Date.now(); while (Date.now() - t < 1500) {} return input + 1 })()"


def _kill_children_soon(pids: Callable[[], list[int]], after_s: float) -> threading.Thread:
    def kill() -> None:
        time.sleep(after_s)
        for pid in pids():
            os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


@pytest.mark.parametrize("how", ["transform", "template"])
def test_a_v8_child_killed_from_outside_costs_a_rerun_not_the_step(how: str) -> None:
    """A V8 child can die of something that is not its transform's doing (an operator's or the
    OOM killer's SIGKILL): the call runs once more on a fresh child before the transform is
    blamed.  Before, the first death was reported as the transform exceeding the memory limit,
    and the step (with its workflow) failed for good."""
    engine = ExpressionEngine(isolation="process", timeout_ms=10_000)  # a loaded machine: room to spare
    try:
        assert engine.evaluate("[1, 2].map(x => x * 2)", {}) == [2, 4]  # V8's child is up before the call
        runtime = engine._rt
        assert isinstance(runtime, ProcessV8Runtime) and runtime.child_pids()
        killer = _kill_children_soon(runtime.child_pids, 0.4)  # mid-call: the call runs 1.5 s
        if how == "transform":
            assert engine.test_transform(SLOW, 41) == 42
        else:
            assert engine.evaluate(SLOW.replace("input", "n"), {"n": 41}) == 42
        killer.join()
        assert engine.stats.out_of_memory == 1  # the child was lost once, and counted
    finally:
        engine.close()
