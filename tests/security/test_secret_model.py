"""Secrets by declaration and by shape, not by the look of a key (security issue "Trust, second
round", item 5).

The key pattern `token|secret|password|api_?key` used to decide alone.  It masked counts
(`max_tokens`, `token_count`, `password_min_length`, `use_token_cache`) — and their digits
then joined the process-wide list of known secrets, so another instance's error read
`wf_***_***_missing` and the year vanished from timestamps.  It missed `gh_pat`, the password
in a `database_url`, `private_key`, `api-key`, `passphrase`, `credentials`, a secret reversed or
sliced by a transform, and `GITHUB_TOKEN=…` printed by a shell step into the state.

Everything here goes through a real MCP client against the real server (in memory), and
the values are looked for in the wire text of every reply.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from mcp import Client
from srv_helpers import ok, tool_text

YEAR = datetime.datetime.now(datetime.UTC).year
COUNTS = f"""name: counts
default_state:
  raw:
    max_tokens: 4096
    token_count: {YEAR}
    tokens_used: 123456
    password_min_length: 12
    use_token_cache: true
    token_budget: 800000
steps:
  - id: ask
    type: agent_prompt
    prompt: "count"
"""

GH_PAT = "ghp_" + "R8d1" * 9
DB_PASSWORD = "Zq7-pw-ab91x"
PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
       "-----END OPENSSH PRIVATE KEY-----")
API_KEY = "k3y-51a7e0c2d9"
PASSPHRASE = "correct horse battery"
CREDENTIALS = "svc:0f3c91aa7e"
PRINTED = "gho7x2Kq91Lm0Pz"  # no token shape of its own: only `GITHUB_TOKEN=` gives it away
NAMED = """name: named
inputs:
  gh_pat: {type: string}
  database_url: {type: string}
  private_key: {type: string}
  api-key: {type: string}
  passphrase: {type: string}
  credentials: {type: string}
state_schema:
  computed:
    reversed:
      from: inputs.gh_pat
      transform: "input.split('').reverse().join('')"
    tail:
      transform: "inputs['api-key'].slice(4)"
    words:
      from: inputs.passphrase
      transform: "input.split(' ').slice(1).join('+')"
steps:
  - id: env
    type: shell_command
    command: "printf 'GITHUB_TOKEN=%s\\\\nHOME=/home/dev\\\\n' \\"$GITHUB_TOKEN\\""
    state_update: {path: raw.env_dump}
  - id: ask
    type: agent_prompt
    prompt: "done?"
"""
NAMED_INPUTS = {"gh_pat": GH_PAT, "database_url": f"postgresql://app:{DB_PASSWORD}@db.internal:5432/app",
                "private_key": PEM, "api-key": API_KEY, "passphrase": PASSPHRASE, "credentials": CREDENTIALS}

HOOK = "https://hooks.example.com/services/T0/B0/x9Y8z7W6v5"
SESSION = "sess-4f2a-9b7c-c0ffee"
BLOB = "blob-value-8c1d2e"
DECLARED = """name: declared
secrets: [raw.blob]
inputs:
  deploy_hook: {type: string, secret: true}
  pin: {type: integer, secret: true}
state_schema:
  raw:
    session: {type: string, secret: true}
  computed:
    hook_host:
      from: inputs.deploy_hook
      transform: "input.split('/').slice(3).join('/')"
    session_tail:
      from: raw.session
      transform: "input.slice(5)"
default_state:
  raw:
    blob: "BLOB"
steps:
  - id: ask
    type: agent_prompt
    prompt: "give the session"
    state_update: {path: raw.session}
  - id: say
    type: user_message
    message: "session ends {{ session_tail }} at {{ hook_host }}"
  - id: last
    type: agent_prompt
    prompt: "done?"
""".replace("BLOB", BLOB)


def wire(result: Any) -> str:
    return tool_text(result) + json.dumps(result.structured_content)


async def test_counts_stay_numbers_and_their_digits_stay_everywhere(make_server: Any) -> None:
    server, _ = make_server({"counts": COUNTS})
    async with Client(server) as client:
        workflow_id = (await ok(client, "workflow_start", {"workflow": "counts"}))["workflow_id"]
        await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        state = (await ok(client, "workflow_state_read", {"workflow_id": workflow_id}))["state"]
        assert {key: state[key] for key in ("max_tokens", "token_count", "tokens_used", "password_min_length",
                                            "use_token_cache", "token_budget")} == {
            "max_tokens": 4096, "token_count": YEAR, "tokens_used": 123456, "password_min_length": 12,
            "use_token_cache": True, "token_budget": 800000}
        info = await ok(client, "workflow_debug_info", {"workflow_id": workflow_id})
        assert str(YEAR) in json.dumps(info["step_history"]), info["step_history"]  # timestamps keep their year
        missing = f"wf_{YEAR}_123456_missing"
        error = await client.call_tool("workflow_status", {"workflow_id": missing})
        assert error.is_error and missing in tool_text(error), tool_text(error)


async def test_named_and_shaped_secrets_are_masked_everywhere(make_server: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", PRINTED)  # the server's environment, printed by a shell step
    server, _ = make_server({"named": NAMED})
    async with Client(server) as client:
        started = await client.call_tool("workflow_start", {"workflow": "named", "inputs": NAMED_INPUTS})
        assert not started.is_error, tool_text(started)
        workflow_id = started.structured_content["workflow_id"]
        step = await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id})
        assert step["step"]["id"] == "ask", step
        state = await client.call_tool("workflow_state_read", {"workflow_id": workflow_id})
        traces = await client.call_tool("workflow_trace_transformations", {"workflow_id": workflow_id})
        replies = [wire(started), json.dumps(step), wire(state), wire(traces)]
    clear = {"gh_pat": GH_PAT, "reversed gh_pat": GH_PAT[::-1], "database password": DB_PASSWORD,
             "private key": PEM.splitlines()[1], "api-key": API_KEY, "api-key sliced": API_KEY[4:],
             "passphrase": PASSPHRASE, "passphrase words": "horse+battery", "credentials": CREDENTIALS,
             "printed GITHUB_TOKEN": PRINTED}
    leaks = sorted({name for name, value in clear.items() for reply in replies if value in reply})
    assert not leaks, leaks
    shown = state.structured_content["state"]
    assert shown["inputs"]["database_url"] == "postgresql://app:***@db.internal:5432/app"  # only the password goes
    assert "HOME=/home/dev" in shown["env_dump"] and "GITHUB_TOKEN=***" in shown["env_dump"], shown["env_dump"]


async def test_declared_secrets_and_what_they_feed_are_masked(make_server: Any) -> None:
    server, _ = make_server({"declared": DECLARED})
    async with Client(server) as client:
        started = await client.call_tool("workflow_start", {"workflow": "declared",
                                                            "inputs": {"deploy_hook": HOOK, "pin": 4242}})
        assert not started.is_error, tool_text(started)
        workflow_id = started.structured_content["workflow_id"]
        step = (await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        done = await client.call_tool("workflow_step_complete", {"workflow_id": workflow_id, "step_id": step["id"],
                                                                 "result": SESSION})
        state = await client.call_tool("workflow_state_read", {"workflow_id": workflow_id})
        traces = await client.call_tool("workflow_trace_transformations", {"workflow_id": workflow_id})
        debug = await client.call_tool("workflow_debug_info", {"workflow_id": workflow_id})
        replies = [wire(started), wire(done), wire(state), wire(traces), wire(debug)]
    clear = {"deploy_hook": HOOK, "hook path": "services/T0/B0/x9Y8z7W6v5", "session": SESSION,
             "session tail": SESSION[5:], "blob": BLOB}
    leaks = sorted({name for name, value in clear.items() for reply in replies if value in reply})
    assert not leaks, leaks
    assert done.structured_content["messages"] == ["session ends *** at ***"], done.structured_content
    shown = state.structured_content["state"]
    assert shown["inputs"]["pin"] == "***" and shown["session"] == "***" and shown["blob"] == "***", shown


async def test_validate_warns_when_a_secret_reaches_a_message_or_a_prompt(make_server: Any) -> None:
    prompt = DECLARED.replace('prompt: "done?"', 'prompt: "deploy to {{ inputs.deploy_hook }}"')
    server, _ = make_server({"declared": prompt})
    async with Client(server) as client:
        report = await ok(client, "workflow_validate", {"workflow": "declared"})
    assert report["valid"], report
    messages = [w["message"] for w in report["warnings"]]
    assert any("session_tail" in m and "user_message" in m for m in messages), messages
    assert any("inputs.deploy_hook" in m and "agent_prompt" in m for m in messages), messages


async def test_a_secrets_list_that_names_nothing_is_an_error(make_server: Any) -> None:
    typo = DECLARED.replace("secrets: [raw.blob]", "secrets: [raw.blbo]")
    server, _ = make_server({"declared": typo})
    async with Client(server) as client:
        report = await ok(client, "workflow_validate", {"workflow": "declared"})
    assert not report["valid"], report
    assert any("raw.blbo" in e["message"] and "raw.blob" in e["message"] for e in report["errors"]), report


def test_the_process_wide_list_is_bounded_and_never_blind() -> None:
    """Log lines belong to no instance, so they are masked with every secret the process
    showed.  That list used to stop growing at 10,000 entries (a new instance's secrets then
    went to the logs in clear) and was sorted and scanned whole for every line."""
    from aromcp_workflows.safety.known import KnownSecrets

    known = KnownSecrets(limit=100, fresh=8)
    for batch in range(100):  # 10,000 secrets, a hundred instances' worth at a time
        known.add(f"old-{batch:03d}-secret-{n:03d}" for n in range(100))
    assert len(known) <= 100 + 8
    known.add(["old-050-secret-007"])  # seen again: masked again, as recent
    known.add([f"new-instance-secret-{n}" for n in range(20)])
    line = "new-instance-secret-19 and new-instance-secret-0 then old-050-secret-007 and old-000-secret-000"
    assert known.mask_text(line) == "*** and *** then *** and old-000-secret-000"
    assert len(known) <= 100 + 8


SUFFIX = "9f8e7d6c5b4a"
TASK_KEY = "tk-" + SUFFIX  # exists only as the task's input: declared secret there alone
TASKS = """name: tasks
inputs:
  suffixes: {type: array}
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ inputs.suffixes }}"
    sub_agent_task: use_key
sub_agent_tasks:
  use_key:
    inputs:
      deploy: {type: string, default: "{{ 'tk-' + item }}", secret: true}
    steps:
      - type: user_message
        message: "using {{ task.deploy }}"
      - id: work
        type: agent_shell_command
        command: "deploy --key {{ task.deploy }}"
"""


async def test_a_secret_task_input_is_masked_in_the_sub_agents_replies(make_server: Any) -> None:
    server, _ = make_server({"tasks": TASKS})
    async with Client(server) as client:
        workflow_id = (await ok(client, "workflow_start", {"workflow": "tasks",
                                                           "inputs": {"suffixes": [SUFFIX]}}))["workflow_id"]
        fan = (await ok(client, "workflow_get_next_step", {"workflow_id": workflow_id}))["step"]
        task_id = fan["definition"]["tasks"][0]["task_id"]
        reply = await client.call_tool("workflow_get_next_step", {"workflow_id": workflow_id, "task_id": task_id})
        state = await client.call_tool("workflow_state_read", {"workflow_id": workflow_id})
    answer = reply.structured_content
    assert answer["step"]["definition"]["command"] == f"deploy --key {TASK_KEY}"  # the agent must use it
    assert TASK_KEY not in json.dumps(answer["messages"]) and TASK_KEY not in wire(state)
    assert answer["messages"] == ["using ***"], answer["messages"]


async def test_a_declared_secret_named_like_a_reply_field_does_not_hide_that_field(make_server: Any) -> None:
    """Declared names are masked wherever they appear inside a reply, but not as the reply's
    own fields: a state field `status` declared secret must not hide the instance's status."""
    clash = """name: clash
state_schema:
  raw:
    status: {type: string, secret: true}
default_state:
  raw:
    status: "vendor-status-code-77"
steps:
  - id: ask
    type: agent_prompt
    prompt: "go"
"""
    server, _ = make_server({"clash": clash})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "clash"})
        step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
        state = (await ok(client, "workflow_state_read", {"workflow_id": started["workflow_id"]}))["state"]
    assert started["status"] == "running" and step["status"] == "running", (started, step)
    assert state["status"] == "***", state
