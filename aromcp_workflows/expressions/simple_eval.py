"""Evaluating a simple expression (`simple_parse`) in Python, with exactly JavaScript's result.

Values are what JSON gives Python — None (null), MISSING (undefined), bool, int/float (a
JS number), str, list, dict — and every operation below is defined only where JavaScript's
answer is certain for them.  Everywhere else it raises `NeedsV8` and V8 evaluates the whole
expression, as it would have without this module: a coercion (`"1" == 1`, `[] + 1`), an
object compared by identity, a number beyond 2**53 (V8 would round it), a division by
zero or anything else that makes NaN or Infinity, a string with characters beyond the
Basic Multilingual Plane where JavaScript counts UTF-16 units (`length`, `<`), a member of
null (V8 words the TypeError), a key that an object inherits (`toString`), a JS global.
The property test in `tests/expressions/test_simple_eval.py` holds it to V8's results.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from aromcp_workflows.expressions.analysis import JS_GLOBALS, js_truthy
from aromcp_workflows.expressions.errors import MISSING
from aromcp_workflows.expressions.simple_parse import Node
from aromcp_workflows.expressions.template import NeedsV8, js_number

SAFE_INTEGER = 2**53
MAX_TEXT = 100_000  # longer concatenations are left to V8 and its result limit
# Keys every object inherits (Object.prototype): reading one that an object lacks gives a function.
INHERITED = frozenset({"__proto__", "constructor", "prototype", "hasOwnProperty", "isPrototypeOf",
                       "propertyIsEnumerable", "toString", "toLocaleString", "valueOf", "__defineGetter__",
                       "__defineSetter__", "__lookupGetter__", "__lookupSetter__"})


def evaluate(node: Node, scope: Mapping[str, Any]) -> Any:
    """The value of `node` in `scope` (names missing from it are undefined), normalised as
    V8's JSON would bring it back: an integral number written without an exponent (below
    1e21) is an int, -0 is 0."""
    value = _eval(node, scope)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NeedsV8
        if value.is_integer() and abs(value) < 1e21:  # JSON.stringify writes its shortest digits
            return int(value) if abs(value) < SAFE_INTEGER else int(js_number(value))
    return value


def _eval(node: Node, scope: Mapping[str, Any]) -> Any:
    op, args = node.op, node.args
    if op == "lit":
        return args[0]
    if op == "name":
        return _name(args[0], scope)
    if op == "group":
        return _eval(args[0], scope)
    if op == "member":
        return _member(_eval(args[0], scope), _eval(args[1], scope), args[2])
    if op == "call":
        return _call(_eval(args[0], scope), args[1], _eval(args[2], scope), args[3])
    if op == "unary":
        return _unary(args[0], _eval(args[1], scope))
    if op == "cond":
        return _eval(args[1] if js_truthy(_eval(args[0], scope)) else args[2], scope)
    return _binary(args[0], args[1], args[2], scope)


def _name(name: str, scope: Mapping[str, Any]) -> Any:
    value = scope.get(name, MISSING)
    if value is MISSING and name in JS_GLOBALS:
        raise NeedsV8
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _safe(value: Any) -> Any:
    """A number V8 would hold exactly (a finite double, an integer within 2**53)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NeedsV8
    elif abs(value) >= SAFE_INTEGER:
        raise NeedsV8
    return value


def _bmp(text: str) -> str:
    """`text`, when JavaScript's UTF-16 units are Python's characters one for one."""
    if not text.isascii() and any(ord(c) > 0xFFFF for c in text):
        raise NeedsV8
    return text


def _whole(text: str) -> str:
    """`text`, when it holds no lone surrogate (searching one inside a pair finds it in
    JavaScript's units but not in Python's characters)."""
    if not text.isascii() and any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        raise NeedsV8
    return text


# -- members and methods -----------------------------------------------------------------------
def _member(target: Any, key: Any, optional: bool) -> Any:
    if target is None or target is MISSING:
        if optional:
            return MISSING
        raise NeedsV8  # a TypeError: V8 words it
    if isinstance(key, str) and key in INHERITED:
        raise NeedsV8
    if isinstance(target, dict):
        if not isinstance(key, str):
            raise NeedsV8  # a number key is its String(): rare enough to leave to V8
        return target.get(key, MISSING)
    if isinstance(target, list):
        if key == "length":
            return len(target)
        if is_number(key) and not isinstance(key, float) and key >= 0:
            return target[key] if key < len(target) else MISSING
        raise NeedsV8  # methods, string indices, fractions
    if isinstance(target, str) and key == "length":
        return len(_bmp(target))
    raise NeedsV8  # string indexing, members of numbers and booleans


def _call(target: Any, method: str, argument: Any, optional: bool) -> Any:
    if target is None or target is MISSING:
        if optional:
            return MISSING
        raise NeedsV8
    if isinstance(target, str) and isinstance(argument, str):
        target, argument = _whole(target), _whole(argument)
        if method == "includes":
            return argument in target
        return target.startswith(argument) if method == "startsWith" else target.endswith(argument)
    if isinstance(target, list) and method == "includes" and _primitive(argument):
        return any(_same_value_zero(item, argument) for item in target)
    raise NeedsV8


def _primitive(value: Any) -> bool:
    return value is None or value is MISSING or isinstance(value, (bool, str)) or is_number(value)


def _same_value_zero(item: Any, value: Any) -> bool:
    """Array.prototype.includes' comparison, for a primitive `value`."""
    if isinstance(item, (dict, list)):
        return False
    return _strict_equal(item, value)


# -- operators ----------------------------------------------------------------------------------
def _unary(op: str, value: Any) -> Any:
    if op == "!":
        return not js_truthy(value)
    if op == "typeof":
        return _typeof(value)
    if is_number(value):
        return -_safe(value)
    raise NeedsV8


def _typeof(value: Any) -> str:
    if value is MISSING:
        return "undefined"
    if isinstance(value, bool):
        return "boolean"
    if is_number(value):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"  # null, arrays, objects


def _binary(op: str, left_node: Node, right_node: Node, scope: Mapping[str, Any]) -> Any:
    left = _eval(left_node, scope)
    if op == "&&":
        return _eval(right_node, scope) if js_truthy(left) else left
    if op == "||":
        return left if js_truthy(left) else _eval(right_node, scope)
    if op == "??":
        return _eval(right_node, scope) if left is None or left is MISSING else left
    right = _eval(right_node, scope)
    if op in ("===", "!=="):
        return _strict_equal(left, right) == (op == "===")
    if op in ("==", "!="):
        return _loose_equal(left, right) == (op == "==")
    if op in ("<", "<=", ">", ">="):
        return _compare(op, left, right)
    if op == "+":
        return _plus(left, right)
    return _arithmetic(op, left, right)


def _strict_equal(left: Any, right: Any) -> bool:
    if is_number(left) and is_number(right):
        return _safe(left) == _safe(right)
    if isinstance(left, (dict, list)) or isinstance(right, (dict, list)):
        raise NeedsV8  # identity of objects: not knowable from here
    if type(left) is not type(right):
        return False
    return bool(left == right)


def _loose_equal(left: Any, right: Any) -> bool:
    nullish = (left is None or left is MISSING, right is None or right is MISSING)
    if all(nullish):
        return True
    if any(nullish):
        return False  # null and undefined equal only each other
    if (is_number(left) and is_number(right)) or (type(left) is type(right) and isinstance(left, (str, bool))):
        return _strict_equal(left, right)
    raise NeedsV8  # coercion between types


def _compare(op: str, left: Any, right: Any) -> bool:
    if is_number(left) and is_number(right):
        a, b = _safe(left), _safe(right)
    elif isinstance(left, str) and isinstance(right, str):
        a, b = _bmp(left), _bmp(right)
    else:
        raise NeedsV8  # coercion (null < 1, "2" < 10, ...)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    return bool(a > b) if op == ">" else bool(a >= b)


def _plus(left: Any, right: Any) -> Any:
    if is_number(left) and is_number(right):
        return _safe(_safe(left) + _safe(right))
    if isinstance(left, str) or isinstance(right, str):
        text = _to_string(left) + _to_string(right)
        if len(text) > MAX_TEXT:
            raise NeedsV8  # V8 applies its own limit on the size of a result
        return text
    raise NeedsV8  # booleans, null, undefined, objects: ToNumber or ToPrimitive


def _to_string(value: Any) -> str:
    """String(value) for the primitives whose text is certain."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if value is MISSING:
        return "undefined"
    if is_number(value):
        return js_number(float(_safe(value))) if isinstance(value, float) else str(_safe(value))
    raise NeedsV8  # arrays and objects


def _arithmetic(op: str, left: Any, right: Any) -> Any:
    if not (is_number(left) and is_number(right)):
        raise NeedsV8
    a, b = _safe(left), _safe(right)
    if op == "-":
        return _safe(a - b)
    if op == "*":
        return _safe(a * b) if isinstance(a, int) and isinstance(b, int) else a * b
    if b == 0:
        raise NeedsV8  # Infinity or NaN
    if op == "/":
        return a / b
    result = math.fmod(a, b)  # JavaScript's % keeps the dividend's sign, as fmod does
    return int(result) if isinstance(a, int) and isinstance(b, int) else result
