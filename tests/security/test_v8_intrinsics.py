"""Issue 10 item 3: a transform cannot patch what another evaluation will use.

The attack walks every object reachable from `globalThis`, from `function*(){}`,
`async function(){}`, `async function*(){}` and from every kind of iterator, and tries to
write a property on each, wrap each method and redefine each accessor.  Another call,
and another instance, must see nothing of it: no marker, no wrapper, no recorded log.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from v8_attack_js import CHECK, PATCH, READ_BACK

from aromcp_workflows.expressions import ExpressionEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from srv_helpers import make_project, ok

SECRET = ["s3cr3t-token-value", "second"]


@pytest.fixture(params=["process", "thread"])
def engine(request: pytest.FixtureRequest) -> Any:
    eng = ExpressionEngine(isolation=request.param)
    yield eng
    eng.close()


def test_patching_every_reachable_object_leaves_no_trace_for_later_calls(engine: ExpressionEngine) -> None:
    patched = engine.test_transform(PATCH, None, origin="attacker")
    assert patched["objects"] > 500  # the walk really reached the intrinsics
    seen = engine.test_transform(CHECK, SECRET, origin="victim instance")
    assert seen["found"] == [], f"patches visible to a later call: {seen['found'][:20]}"
    back = engine.test_transform(READ_BACK, None, origin="attacker again")
    assert back["recorded"] is None
    assert "native code" in back["next"]


def test_hidden_intrinsics_are_frozen(engine: ExpressionEngine) -> None:
    probes = {
        "array iterator": "Object.getPrototypeOf([][Symbol.iterator]())",
        "iterator": "Object.getPrototypeOf(Object.getPrototypeOf([][Symbol.iterator]()))",
        "generator function": "Object.getPrototypeOf(function* () {})",
        "generator": "Object.getPrototypeOf(function* () {}).prototype",
        "async function": "Object.getPrototypeOf(async function () {})",
        "async generator": "Object.getPrototypeOf(async function* () {}).prototype",
        "async iterator": "Object.getPrototypeOf(Object.getPrototypeOf(async function* () {}).prototype)",
        "regexp string iterator": "Object.getPrototypeOf('a'.matchAll(/a/g))",
        "map iterator": "Object.getPrototypeOf(new Map().keys())",
        "set iterator": "Object.getPrototypeOf(new Set().keys())",
        "string iterator": "Object.getPrototypeOf(''[Symbol.iterator]())",
        "iterator helper": "Object.getPrototypeOf([].values().map(x => x))",
        "promise": "Object.getPrototypeOf((async () => 1)())",
        "throw type error": "Object.getOwnPropertyDescriptor(Function.prototype, 'caller').get",
        "global prototype": "Object.getPrototypeOf(globalThis)",
    }
    for name, expr in probes.items():
        assert engine.test_transform(f"Object.isFrozen({expr})", None) is True, name


def test_regexp_legacy_statics_do_not_carry_one_call_s_match_into_the_next(engine: ExpressionEngine) -> None:
    engine.test_transform("/token=(\\w+)/.exec(input) && 1", "token=hunter2", origin="instance A")
    leaked = engine.test_transform(
        "[typeof RegExp.$1 === 'string' ? RegExp.$1 : null, typeof RegExp.lastMatch === 'string' ? "
        "RegExp.lastMatch : null, typeof RegExp.input === 'string' ? RegExp.input : null]", None, origin="instance B")
    assert "hunter2" not in repr(leaked)


def test_prelude_helpers_and_ordinary_transforms_still_work(engine: ExpressionEngine) -> None:
    assert engine.test_transform("[...new Set(input)].map(x => x * 2)", [1, 1, 2]) == [2, 4]
    assert engine.test_transform("function* g() { yield* input; } return [...g()]", [1, 2]) == [1, 2]
    assert engine.test_transform("Object.fromEntries(new Map([['a', 1]]))", None) == {"a": 1}
    assert engine.test_transform("'a-b'.replace(/-/g, '_') + [...'xy'.matchAll(/./g)].length", None) == "a_b2"
    assert engine.test_transform("path_to_key(input) + uuid().length", "src/a.ts") == "src_a_ts36"
    assert engine.test_transform("class A { m() { return 1; } } return new A().m()", None) == 1


WORKFLOW = """
name: iterates_secret
description: "A computed field that iterates a secret input"
version: "1.0.0"
inputs:
  payload:  # a plain name: a field fed by a secret is masked whole, and the test reads this one back
    type: string
    required: true
default_state:
  raw:
    n: 0
state_schema:
  computed:
    joined:
      from: raw.n
      transform: "[...inputs.payload.split('-')].map(x => x.length).join(',') + '#' + input"
steps:
  - id: bump
    type: state_update
    path: raw.n
    value: 1
  - type: user_message
    message: "{{ joined }}"
"""


def test_over_mcp_a_patch_in_one_call_is_invisible_to_the_next_and_to_an_instance(tmp_path: Path) -> None:
    from aromcp_workflows.app.service import WorkflowService
    from aromcp_workflows.server.mcp import build_server

    project = make_project(tmp_path / "project", {"iterates_secret": WORKFLOW})
    (tmp_path / "home").mkdir()
    server = build_server(lambda: WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3",
                                                  home=tmp_path / "home"))

    async def scenario() -> None:
        async with Client(server, mode="legacy") as client:
            attack = await ok(client, "workflow_test_transformation", {"transform": PATCH})
            assert attack["success"] is True, attack
            started = await ok(client, "workflow_start", {"workflow": "iterates_secret",
                                                          "inputs": {"payload": "tok-" + SECRET[0]}})
            step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
            assert "3,6,5,5#1" in str(step), step  # the instance computed undisturbed
            check = await ok(client, "workflow_test_transformation", {"transform": CHECK, "input": SECRET})
            assert check["success"] is True and check["output"]["found"] == [], check
            back = await ok(client, "workflow_test_transformation", {"transform": READ_BACK})
            assert back["output"]["recorded"] is None, back

    asyncio.run(scenario())
