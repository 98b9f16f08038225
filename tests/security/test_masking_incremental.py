"""Issue 13: the instance masker re-walks only the state values that changed since it last
looked (`masking.SecretIndex`), so a step's cost does not grow with a big list it does not
touch.  Masking must stay exactly as strong: a secret written in a later step — nested
inside a container that existed before, appended to a list, or exposed by a computed
field — is masked in the very reply that could show it.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from srv_helpers import ok, tool_text

from aromcp_workflows.expressions import ExpressionEngine
from aromcp_workflows.safety.masking import SecretIndex, secret_values
from aromcp_workflows.state import ComputedFieldSpec, StateError, StateTiers, Update

LATER = {"token": "tok-4417-later-nested", "password": "pw-9931-appended", "derived": "code-5521-computed"}
WORKFLOW = """name: later
default_state:
  raw:
    creds: {user: "bob"}
    accounts: [{name: "a"}]
    data: {code: "none"}
    big: [1, 2, 3, 4, 5]
state_schema:
  computed:
    session_token:
      from: raw.data.code
      transform: "input"
steps:
  - id: first
    type: agent_prompt
    prompt: "give the token"
    state_update: {path: raw.creds.api_token}
  - id: echo_token
    type: user_message
    message: "token {{ raw.creds.api_token }}"
  - id: second
    type: agent_prompt
    prompt: "give an account"
    state_update: {path: raw.accounts, operation: append}
  - id: echo_password
    type: user_message
    message: "password {{ raw.accounts[1].password }}"
  - id: third
    type: agent_prompt
    prompt: "give a code"
    state_update: {path: raw.data.code}
  - id: echo_code
    type: user_message
    message: "code {{ raw.data.code }}"
  - id: last
    type: agent_prompt
    prompt: "done?"
"""


async def test_a_secret_written_in_a_later_step_is_masked(make_server):
    server, _ = make_server({"later": WORKFLOW})
    replies = []
    async with Client(server) as client:
        workflow_id = (await ok(client, "workflow_start", {"workflow": "later"}))["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        for result in (LATER["token"], {"name": "b", "password": LATER["password"]}, LATER["derived"]):
            await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})  # the masker looks again
            reply = await client.call_tool("workflow_step_complete", {"workflow_id": workflow_id,
                                                                      "step_id": step["id"], "result": result})
            assert not reply.is_error, tool_text(reply)
            replies.append(tool_text(reply) + json.dumps(reply.structured_content))
            assert reply.structured_content is not None
            step = reply.structured_content["next_step"]
            assert any("***" in message for message in reply.structured_content["messages"]), reply
        state = await ok(client, "workflow_state_read", {"workflow_id": workflow_id})
        replies.append(json.dumps(state))
    leaks = [(secret, reply[:300]) for reply in replies for secret in LATER.values() if secret in reply]
    assert not leaks, leaks


# -- the index against a full walk, over random copy-on-write changes -----------------------------
KEYS = ["a", "api_token", "list", "password", "n"]
PATHS = [f"{tier}.{key}" for tier in ("raw", "state") for key in KEYS] + [
    "raw.a.api_token", "raw.a.b", "raw.list", "state.a.password", "raw.n.secret_key"]
VALUES = st.one_of(st.sampled_from(["short", "secret-one", "secret-two", "secret-three"]), st.integers(1000, 1010),
                   st.sampled_from([1000.0, True, 12, 12.0, [1000], [1000.0], [{"token": 1000.0}], [{"token": 1000}]]),
                   st.just({"password": "nested-pw"}), st.just([{"token": "in-a-list"}]), st.just({"x": "plain"}))
UPDATES = st.lists(st.tuples(st.sampled_from(PATHS), st.sampled_from(["set", "append", "merge", "delete"]), VALUES),
                   min_size=1, max_size=25)
ENGINE: list[ExpressionEngine] = []


def engine() -> ExpressionEngine:
    if not ENGINE:
        ENGINE.append(ExpressionEngine())
    return ENGINE[0]


def roots(store: StateTiers) -> list[Any]:
    return [store.raw, store.state, store.computed, store.inputs]


@settings(max_examples=150, deadline=None)
@given(UPDATES)
def test_the_index_finds_what_a_full_walk_finds(updates: list[tuple[str, str, Any]]) -> None:
    store = StateTiers(engine(), computed=[ComputedFieldSpec(name="copy_token", sources=["raw.a"],
                                                             source_is_list=False, transform="input")],
                       inputs={"api_key": "input-secret", "other": {"passwd": "input-nested"}})
    store.initialize({"raw": {"a": {"b": 1}, "list": []}, "state": {"n": 0}})
    index = SecretIndex()
    assert index.secrets(*roots(store)) == secret_values(*roots(store))
    for path, operation, value in updates:
        try:
            store.apply([Update(path=path, operation=operation, value=value)])  # type: ignore[arg-type]
        except StateError:
            continue
        assert index.secrets(*roots(store)) == secret_values(*roots(store)), (path, operation, value)


def test_a_list_that_grew_is_walked_from_its_new_items_only(monkeypatch: Any) -> None:
    """The 100,000-item list an agent appends to each step: only the appended items are
    walked, and a secret among them is found."""
    import aromcp_workflows.safety.masking as masking

    walked: list[int] = []
    collect = masking._collect

    def counting(node: Any, found: set[str], under_secret: bool) -> None:
        walked.append(len(node) if isinstance(node, list) else -1)
        collect(node, found, under_secret)

    big = [f"item-{n}" for n in range(10_000)]
    index = SecretIndex()
    assert index.secrets({"big": big}) == set()
    monkeypatch.setattr(masking, "_collect", counting)
    grown = [*big, {"token": "tok-1234-appended"}]
    assert index.secrets({"big": grown}) == {"tok-1234-appended"}
    assert walked[0] == 1, walked[:3]  # the new item alone, not 10,001


def test_a_list_that_held_secrets_keeps_them_and_numbers_are_never_secrets() -> None:
    """Numbers under secret keys are never secrets (their digits would vanish from every
    count), so equal lists hold equal secrets and an appended list is walked from its new
    items even when the old items held secrets."""
    index = SecretIndex()
    assert index.secrets({"l": [{"token": 1000.0}, {"token": 1000}, True]}) == set()
    held = [{"api_key": "abcd-key-1"}]
    assert index.secrets({"l": held}) == {"abcd-key-1"}
    assert index.secrets({"l": [*held, 1.0, {"api_key": "abcd-key-2"}]}) == {"abcd-key-1", "abcd-key-2"}
    assert index.secrets({"l": [{"api_key": "abcd-key-2"}]}) == {"abcd-key-2"}  # not a prefix: walked again
