"""V8 isolation: in a child process by default (a fatal V8 error costs one evaluation,
not the server), in this process on request (`AROMCP_V8_ISOLATION=thread`)."""

from __future__ import annotations

import pytest

from aromcp_workflows.expressions import ExpressionEngine, ExpressionError


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
