"""Simple expressions evaluated in Python give exactly what V8 gives, or go to V8.

The property test builds random expressions of the subset (and some just outside it) over
random JSON values, evaluates each in Python and in real V8 (an engine with the Python
path switched off), and requires the same value and type wherever Python answered; where
V8 throws, Python must not have answered.  A check keeps it from passing vacuously: most
of what it draws is answered in Python.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.expressions import MISSING, ExpressionEngine, ExpressionError
from aromcp_workflows.expressions.simple_eval import evaluate
from aromcp_workflows.expressions.simple_parse import parse_simple
from aromcp_workflows.expressions.template import NeedsV8

SCOPE_NAMES = ("n", "m", "x", "s", "t", "b", "nil", "arr", "obj", "nope")
ANSWERED = {"python": 0, "v8": 0}


@pytest.fixture(scope="module")
def v8() -> ExpressionEngine:
    return ExpressionEngine(python_simple=False)


def python_value(source: str, scope: dict[str, Any]) -> Any:
    node = parse_simple(source)
    if node is None:
        raise NeedsV8
    return evaluate(node, scope)


def same(a: Any, b: Any) -> bool:
    """Equal values of the same JSON type (True is not 1; 1 is 1.0, and an integer beyond 2**53
    equals the float it rounds to, as both are one double in JavaScript)."""
    if a is MISSING or b is MISSING or a is None or b is None or isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):  # one JavaScript number: the same double
        return float(a) == float(b) and not math.isnan(float(a))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def check(v8: ExpressionEngine, source: str, scope: dict[str, Any]) -> None:
    try:
        mine = python_value(source, scope)
    except NeedsV8:
        ANSWERED["v8"] += 1
        return
    ANSWERED["python"] += 1
    try:
        theirs = v8.evaluate(source, scope)
    except ExpressionError as exc:
        pytest.fail(f"{source!r} with {scope}: Python answered {mine!r}, V8 threw {exc}")
    assert same(mine, theirs), f"{source!r} with {scope}: Python {mine!r}, V8 {theirs!r}"


# -- hand-picked cases ------------------------------------------------------------------------------
CASES = [
    "n < m", "n <= 3 && !b", "n + m", "n - m * 2", "n / m", "n % m", "-n % m", "-4 % 2", "7 / 2",
    "0.1 + 0.2", "x * 3", "s + n", "s + x", "n + s + b", "s + nil + nope", "s.length", "t.length",
    "arr.length", "arr[1]", "arr[9]", "obj.k", "obj.missing", "obj?.k?.deep", "nil?.k", "nope ?? 5",
    "nil || 'd'", "0 || ''", "b ? n : m", "typeof nope", "typeof arr", "typeof nil", "typeof s",
    "n === 2", "n !== '2'", "nil == nope", "nil == 0", "s == 'abc'", "s < t", "'a' < 'b'",
    "arr.includes(2)", "arr.includes('2')", "s.includes('b')", "s.startsWith('a')", "s.endsWith('c')",
    "(n ?? 1) || 2", "!arr", "!''", "1e3 + .5", "'a\\nb'.length", "9007199254740991 + 0",
]
SCOPE = {"n": 2, "m": 3, "x": 1.5, "s": "abc", "t": "a\U0001F600", "b": False, "nil": None,
         "arr": [1, 2, 3], "obj": {"k": {"deep": 1}}}


@pytest.mark.parametrize("source", CASES)
def test_hand_picked_cases_agree_with_v8(v8: ExpressionEngine, source: str) -> None:
    check(v8, source, SCOPE)


@pytest.mark.parametrize("source", ["'1' == 1", "null < 1", "[] + 1", "arr === arr", "1 / 0", "nope.k",
                                    "obj.toString", "arr.map", "t < s", "big + 1", "Math.max(1, 2)",
                                    "s[0]", "f(1)", "a ?? b || c", "`x${n}`", "n = 3"])
def test_what_python_cannot_be_sure_of_goes_to_v8(source: str) -> None:
    with pytest.raises(NeedsV8):
        python_value(source, {**SCOPE, "a": 1, "c": 2, "f": 1, "big": 2**53 + 1})


def test_the_engine_answers_simple_expressions_without_v8() -> None:
    engine = ExpressionEngine()
    before = engine.stats.v8_calls
    assert engine.evaluate("n < inputs.n && !done", {"n": 1, "inputs": {"n": 3}, "done": False}) is True
    assert engine.render("{{ n + 1 }} of {{ total }}", {"n": 1, "total": 4}) == "2 of 4"
    assert engine.stats.v8_calls == before and engine.python_evaluations == 2
    assert engine.evaluate("[1, 2].map(x => x * n)", {"n": 2}) == [2, 4]  # outside the subset: V8
    assert engine.stats.v8_calls == before + 1


def test_the_switch_sends_everything_to_v8() -> None:
    engine = ExpressionEngine(python_simple=False)
    assert engine.evaluate("n < 3", {"n": 1}) is True
    assert engine.stats.v8_calls == 1 and engine.python_evaluations == 0


# -- random expressions ----------------------------------------------------------------------------
numbers = st.one_of(st.integers(-20, 20), st.sampled_from([0, -0.0, 0.5, -2.5, 1e-7, 2**53 - 1, 2**53, 2**53 + 2,
                                                           1e21, 3.000000000000001]),
                    st.floats(allow_nan=False, allow_infinity=False, width=64))
texts = st.one_of(st.sampled_from(["", "a", "abc", "A", "10", "2", "é", "\U0001F600", "a\ud800"]),
                  st.text(max_size=4))
primitives = st.one_of(numbers, texts, st.booleans(), st.none())
values = st.recursive(primitives, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.sampled_from(["k", "j", "length"]), inner,
                                                                          max_size=2)), max_leaves=6)


def literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return repr(value) if isinstance(value, float) else str(value)


leaves = st.one_of(st.sampled_from(SCOPE_NAMES), st.sampled_from(["undefined", "null", "true", "false"]),
                   st.integers(-5, 5).map(str), st.sampled_from(["0.5", "2.5e1", "'ab'", "''", "'2'"]))


def combine(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%", "<", "<=", ">", ">=", "===", "!==",
                                               "==", "!=", "&&", "||", "??"]), inner)
    return st.one_of(
        binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["!", "-", "typeof "]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        st.tuples(inner, st.sampled_from([".length", ".k", "?.k", "[0]", "[1]", "?.[0]", ".includes('a')",
                                          ".includes(1)", ".startsWith('a')", ".endsWith('')"])).map(
            lambda t: f"({t[0]}){t[1]}"),
    )


expressions = st.recursive(leaves, combine, max_leaves=8)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=expressions, scope=st.fixed_dictionaries(dict.fromkeys(SCOPE_NAMES[:-1], values)))
def test_random_expressions_agree_with_v8(v8: ExpressionEngine, source: str, scope: dict[str, Any]) -> None:
    check(v8, source, scope)


def test_most_random_expressions_were_answered_in_python() -> None:
    """Runs after the property test (same module, in order): it was not vacuous."""
    total = ANSWERED["python"] + ANSWERED["v8"]
    assert total > 500
    assert ANSWERED["python"] >= 0.3 * total, ANSWERED
