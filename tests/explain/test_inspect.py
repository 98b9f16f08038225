"""`workflow_trace_transformations` and `workflow_debug_info` (and the CLI's `trace` and
`debug`): what an instance did, read back from its history in the store, with secrets
masked.  Instances are driven through `WorkflowService` as the MCP tools drive it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from explain_helpers import Project

TOKEN = "tok-ABCDEF-0123456789"
PASSWORD = "hunter2-very-secret"

TRACED = f"""
name: "test:traced"
inputs:
  api_token: {{type: string, required: true}}
default_state:
  raw:
    count: 0
    db_password: "{PASSWORD}"
    items: []
state_schema:
  computed:
    doubled:
      from: raw.count
      transform: "input * 2"
    quadrupled:
      from: computed.doubled
      transform: "input * 2"
    auth:
      from: raw.count
      transform: "'Bearer ' + inputs.api_token + ' n=' + input"
    fragile:
      from: raw.items
      transform: "input[0].name.toUpperCase()"
      on_error: use_fallback
      fallback: "none"
    conn:
      from: raw.count
      transform: "'postgres://u:' + db_password + '@db/' + input"
steps:
  - id: bump
    type: state_update
    path: raw.count
    operation: increment
    value: 1
  - id: never
    type: user_message
    when: "{{{{ false }}}}"
    message: "never shown"
  - id: ask
    type: user_input
    prompt: "Name?"
    state_update: {{path: raw.items, value: "{{{{ [{{name: result}}] }}}}"}}
  - id: failing
    type: shell_command
    command: "echo 'bad {{{{ inputs.api_token }}}}' >&2; exit 3"
    on_error: continue
  - id: wait_here
    type: user_input
    prompt: "Last question"
    state_update: {{path: raw.last}}
"""


@pytest.fixture
def traced(project: Project, service: Any) -> str:
    """An instance that ran bump (state_update), skipped `never`, answered ask, failed the
    shell command (continuing), and now waits at `wait_here`."""
    project.put("test:traced", TRACED)
    workflow_id = service.start("test:traced", {"api_token": TOKEN}).workflow_id
    step = service.next_step(workflow_id).step
    assert step["id"] == "ask"
    reply = service.step_complete(workflow_id, "ask", result="bob")
    assert reply.next_step is not None and reply.next_step["id"] == "wait_here"
    service.state_update(workflow_id, [{"path": "raw.count", "value": 5}])
    return str(workflow_id)


def by_field(traces: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [t for t in traces if t["field"] == name]


# -- traces ------------------------------------------------------------------------------
def test_traces_name_the_trigger_and_carry_input_and_output(service: Any, traced: str) -> None:
    traces = service.trace_transformations(traced).traces
    doubled = by_field(traces, "doubled")
    assert [(t["trigger"], t["input"], t["output"]) for t in doubled] == [
        ("initialize", 0, 0), ("step bump", 1, 2), (doubled[2]["trigger"], 5, 10)]
    assert doubled[2]["trigger"] == "workflow_state_update"
    quad = by_field(traces, "quadrupled")  # downstream of doubled: same trigger, doubled's output as input
    assert [(t["trigger"], t["input"], t["output"]) for t in quad][1] == ("step bump", 2, 4)
    assert all(set(t) == {"field", "timestamp", "trigger", "input", "output"} for t in doubled)
    assert [t["timestamp"] for t in traces] == sorted(t["timestamp"] for t in traces)


def test_failing_transform_with_fallback_records_the_error(service: Any, traced: str) -> None:
    fragile = by_field(service.trace_transformations(traced).traces, "fragile")
    first, second = fragile[0], fragile[1]
    assert first["trigger"] == "initialize" and first["output"] == "none"  # the fallback
    assert "TypeError" in first["error"]["message"] and first["error"]["origin"] == "computed field fragile"
    assert second["trigger"] == "step ask" and second["output"] == "BOB" and "error" not in second


def test_field_filter_and_timing(service: Any, traced: str) -> None:
    only = service.trace_transformations(traced, "doubled").traces
    assert {t["field"] for t in only} == {"doubled"} and len(only) == 3
    assert service.trace_transformations(traced, "computed.doubled").traces == only
    assert service.trace_transformations(traced, "nosuch").traces == []
    timed = service.trace_transformations(traced, include_timing=True).traces
    assert all(isinstance(t["duration_ms"], (int, float)) and t["duration_ms"] >= 0 for t in timed)
    assert all("duration_ms" not in t for t in service.trace_transformations(traced).traces)


def test_traces_survive_a_restart(project: Project, service: Any, traced: str) -> None:
    before = service.trace_transformations(traced).traces
    assert project.service().trace_transformations(traced).traces == before


def test_unknown_instance_is_an_error(service: Any) -> None:
    from aromcp_workflows.instances.errors import ServiceError

    with pytest.raises(ServiceError, match="wf_nope"):
        service.trace_transformations("wf_nope").model_dump()
    with pytest.raises(ServiceError, match="wf_nope"):
        service.debug_info("wf_nope").model_dump()


# -- debug info --------------------------------------------------------------------------
def test_debug_step_history_statuses(service: Any, traced: str) -> None:
    info = service.debug_info(traced).model_dump()
    assert info["current_step"] == "wait_here" and info["current_steps"] == {"main": "wait_here"}
    assert info["status"] == "running"
    history = {h["step_id"]: h for h in info["step_history"]}
    assert [h["step_id"] for h in info["step_history"]] == ["bump", "never", "ask", "failing", "wait_here"]
    assert (history["bump"]["type"], history["bump"]["status"]) == ("state_update", "success")
    assert (history["never"]["type"], history["never"]["status"]) == ("user_message", "skipped")
    assert history["ask"]["status"] == "success"
    assert history["ask"]["started_at"] <= history["ask"]["completed_at"]
    failing = history["failing"]
    assert failing["status"] == "failed" and "code 3" in failing["error"] and failing["handled"] == "continue"
    assert failing["duration_ms"] >= 0
    assert history["wait_here"]["status"] == "running" and history["wait_here"]["completed_at"] is None


def test_debug_state_size_and_performance(service: Any, traced: str) -> None:
    info = service.debug_info(traced).model_dump()
    size = info["state_size"]
    assert size["raw_bytes"] > len(PASSWORD) and size["computed_bytes"] > 0
    traces = service.trace_transformations(traced, include_timing=True).traces
    assert size["total_transformations"] == len(traces)
    perf = info["performance"]
    durations = [t["duration_ms"] for t in traces]
    assert perf["avg_transformation_time"] == pytest.approx(sum(durations) / len(durations), abs=0.01)
    rows = perf["slowest_transformations"]
    assert rows == sorted(rows, key=lambda r: -r["avg_ms"]) and len(rows) <= 5
    for row in rows:
        mine = [t["duration_ms"] for t in traces if t["field"] == row["field"]]
        assert row["count"] == len(mine)
        assert row["avg_ms"] == pytest.approx(sum(mine) / len(mine), abs=0.01)


def test_debug_of_a_failed_workflow(project: Project, service: Any) -> None:
    project.put("test:fails", """
        name: "test:fails"
        steps:
          - id: boom
            type: shell_command
            command: "echo broken >&2; exit 7"
        """)
    workflow_id = service.start("test:fails", {}).workflow_id
    assert service.next_step(workflow_id).status == "failed"
    info = service.debug_info(workflow_id).model_dump()
    assert info["status"] == "failed" and "boom" in info["error"]
    [boom] = info["step_history"]
    assert boom["status"] == "failed" and "code 7" in boom["error"]


def test_debug_of_sub_agent_tasks(project: Project, service: Any) -> None:
    project.put("test:fan", """
        name: "test:fan"
        inputs:
          files: {type: array, default: ["a", "b"]}
        default_state:
          raw: {done: {}}
        state_schema:
          computed:
            done_count: {from: raw.done, transform: "Object.keys(input).length"}
        steps:
          - id: fan
            type: parallel_foreach
            items: "{{ inputs.files }}"
            sub_agent_task: work
        sub_agent_tasks:
          work:
            steps:
              - id: ask
                type: agent_prompt
                prompt: "do {{ item }}"
                state_update: {path: "raw.done.{{ item }}"}
        """)
    workflow_id = service.start("test:fan", {}).workflow_id
    tasks = service.next_step(workflow_id).step["definition"]["tasks"]
    for task in tasks:
        step = service.next_step(workflow_id, task["task_id"]).step
        service.step_complete(workflow_id, step["id"], result="ok", task_id=task["task_id"])
    info = service.debug_info(workflow_id).model_dump()
    rows = [(h["step_id"], h["task_id"], h["status"]) for h in info["step_history"]]
    assert rows == [("fan", None, "running"), ("work_0.ask", "work_0", "success"), ("work_1.ask", "work_1", "success")]
    triggers = [t["trigger"] for t in service.trace_transformations(workflow_id).traces]
    assert triggers == ["initialize", "step work_0.ask", "step work_1.ask"]


# -- masking -------------------------------------------------------------------------------
def assert_no_secret(text: str) -> None:
    for secret in (TOKEN, PASSWORD):
        assert secret not in text, f"secret leaked: {text[:600]}"
        assert secret[4:14] not in text


def test_secrets_are_masked_in_traces_and_debug(service: Any, traced: str) -> None:
    traces = service.trace_transformations(traced, include_timing=True).model_dump()
    info = service.debug_info(traced).model_dump()
    assert_no_secret(json.dumps(traces))
    assert_no_secret(json.dumps(info))
    # fed by a secret (inputs.api_token, raw.db_password): masked whole, past values too
    assert {t["output"] for t in by_field(traces["traces"], "auth") + by_field(traces["traces"], "conn")} == {"***"}
    assert [t["output"] for t in by_field(traces["traces"], "doubled")] == [0, 2, 10]  # numbers stay numbers


def test_a_sensitive_computed_field_is_masked_whole_even_after_it_changed(project: Project, service: Any) -> None:
    project.put("test:keys", """
        name: "test:keys"
        default_state:
          raw: {seed: "first-seed-value"}
        state_schema:
          computed:
            session_token: {from: raw.seed, transform: "'st-' + input + '-xyz'"}
            echo: {from: computed.session_token, transform: "'token is ' + input"}
        steps:
          - id: rotate
            type: state_update
            path: raw.seed
            value: "second-seed-value"
          - id: ask
            type: user_input
            prompt: "?"
        """)
    workflow_id = service.start("test:keys", {}).workflow_id
    assert service.next_step(workflow_id).step["id"] == "ask"  # rotate ran
    traces = service.trace_transformations(workflow_id).traces
    text = json.dumps(traces)
    assert "st-first-seed-value-xyz" not in text  # a past value, no longer in state
    assert "st-second-seed-value-xyz" not in text
    assert all(t["output"] == "***" for t in by_field(traces, "session_token"))
    assert [t["output"] for t in by_field(traces, "echo")] == ["***", "***"]  # fed by session_token


def test_cli_trace_and_debug_mask_secrets(cli: Any, traced: str) -> None:
    for args in (["trace", traced], ["trace", traced, "--json"], ["debug", traced], ["debug", traced, "--json"]):
        code, out, err = cli(*args)
        assert code == 0, err
        assert_no_secret(out + err)


def test_masker_unit() -> None:
    from aromcp_workflows.safety.masking import MASK, Masker, is_sensitive, secret_values

    for key in ("api_token", "GITHUB_TOKEN", "db_password", "client_secret", "api_key", "apiKey", "passwd",
                "gh_pat", "api-key", "x-api-key", "private_key", "passphrase", "credentials", "PGPASSWORD"):
        assert is_sensitive(key), key
    for key in ("count", "files", "author", "keyboard", "max_tokens", "token_count", "tokens_used",
                "password_min_length", "use_token_cache", "secret_name", "token_url", "database_url", "PWD"):
        assert not is_sensitive(key), key
    state = {"raw": {"creds": {"api_key": "k-123456"}, "secrets": ["aaaa-11", "bb"], "n": 3},
             "inputs": {"db_password": 98765432, "password": "2026-11-25"}}
    secrets = secret_values(state)
    assert secrets == {"k-123456", "aaaa-11"}  # "bb" is too short, numbers and dates are never looked for
    masker = Masker(secrets, secret_keys={"pin"})
    masked = masker({**state, "log": "used k-123456 and 98765432", "n": 98765432, "pin": 1234})
    assert masked["raw"]["creds"]["api_key"] == MASK
    assert masked["raw"]["secrets"] == [MASK, MASK]
    assert masked["inputs"] == {"db_password": 98765432, "password": MASK}  # a string under a secret's name
    assert masked["log"] == "used *** and 98765432"
    assert masked["pin"] == MASK  # declared secret: masked whole, whatever its type
    assert masker.mask_all({"a": [1, None, "x"]}) == {"a": [MASK, None, MASK]}
    assert masker.with_secrets(["zzzz-9"]).mask_text("zzzz-9") == MASK
    assert masker.with_secrets(["k-123456"]) is masker
    assert masker.mask_text("GITHUB_TOKEN=gho7x2Kq91 and https://u:pw-123@h/x") == "GITHUB_TOKEN=*** and https://u:***@h/x"
