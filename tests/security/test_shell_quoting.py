"""Issue 10 item 1: a value inserted into a shell command stays data in every quoting context.

`command: "echo \"v={{ inputs.x }}\""` with `x = $(touch PWNED)` used to run `touch`: the value
was quoted as if it stood bare, and the author's own double quotes undid that.  These tests
run the attack through a real MCP client (server-side `shell_command` and the command handed
to the agent for `agent_shell_command`, run with `bash -c`), prove with a property test over
real bash that every context carries any value literally, and check that the contexts no
escaping can make safe are refused when the workflow loads, with the line and the fix.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from srv_helpers import fails, ok

from aromcp_workflows.expressions import ExpressionEngine, ExpressionError

PAYLOADS = ['$(touch {p})', '`touch {p}`', '"; touch {p}; "', "'; touch {p}; '", "x\ntouch {p}",
            "\\\"; touch {p}; \\\"", "$'\\x27'; touch {p}"]
COMMANDS = {
    "dq": 'printf %s "v={{ inputs.x }}"',
    "sq": "printf %s 'v={{ inputs.x }}'",
    "bare": "printf %s v={{ inputs.x }}",
    "subst_in_dq": 'printf %s "v=$(printf %s {{ inputs.x }})"',
    "dq_in_subst_in_dq": 'printf %s "v=$(printf %s "{{ inputs.x }}")"',
    "heredoc": "cat <<EOF\nv={{ inputs.x }}\nEOF",
    "heredoc_quoted": "cat <<'EOF'\nv={{ inputs.x }}\nEOF",
}


def _workflow(kind: str, command: str) -> str:
    quoted = command.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f"""name: quoting
inputs:
  x:
    type: string
    required: true
steps:
  - id: run
    type: {kind}
    command: "{quoted}"
    state_update:
      path: raw.out
"""


@pytest.mark.parametrize("context", sorted(COMMANDS))
@pytest.mark.parametrize("payload", PAYLOADS)
async def test_shell_command_never_runs_a_value(make_server, tmp_path: Path, context: str, payload: str):
    target = tmp_path / "PWNED"
    value = payload.format(p=target)
    server, _ = make_server({"quoting": _workflow("shell_command", COMMANDS[context])})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "quoting", "inputs": {"x": value}})
        step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
        assert step["status"] == "completed", step
        state = await ok(client, "workflow_state_read", {"workflow_id": started["workflow_id"]})
    assert not target.exists(), f"{context}: the value ran as shell code"
    assert state["state"]["out"] == f"v={value}"


@pytest.mark.parametrize("context", sorted(COMMANDS))
async def test_agent_shell_command_text_is_safe_for_bash(make_server, tmp_path: Path, context: str):
    target = tmp_path / "PWNED"
    value = f"$(touch {target}) `touch {target}` \"; touch {target}; \" '; touch {target}; '"
    server, _ = make_server({"quoting": _workflow("agent_shell_command", COMMANDS[context])})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "quoting", "inputs": {"x": value}})
        step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
    command = step["step"]["definition"]["command"]
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False).stdout
    assert not target.exists(), f"{context}: the command handed to the agent runs the value: {command!r}"
    assert out.rstrip("\n") == f"v={value}"


# -- property: any value, every context, real bash ----------------------------------------
ENGINE = ExpressionEngine(isolation="thread")
VALUES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.text(
    st.sampled_from(list("$`\"'\\\n\t ;|&(){}<>#!*?~=EOF-\x00")), max_size=30)


def _cases() -> dict[str, tuple[str, str]]:
    return {
        "bare": ("printf %s {{ x }}", "{v}"),
        "bare_in_word": ("printf %s a{{ x }}b", "a{v}b"),
        "dq": ('printf %s "v={{ x }}."', "v={v}."),
        "sq": ("printf %s 'v={{ x }}.'", "v={v}."),
        "subst": ("printf %s \"$(printf %s {{ x }})\"", "{v}"),
        "dq_in_subst_in_dq": ('printf %s "<$(printf %s "{{ x }}")>"', "<{v}>"),
        "sq_in_subst": ("printf %s \"$(printf %s '{{ x }}')\"", "{v}"),
        "two_values": ('printf %s "{{ x }}"\'{{ x }}\'{{ x }}', "{v}{v}{v}"),
        "heredoc": ("cat <<EOF\n[{{ x }}]\nEOF", "[{v}]\n"),
        "heredoc_quoted": ("cat <<'EOF'\n[{{ x }}]\nEOF", "[{v}]\n"),
        "heredoc_dash": ("cat <<-EOF\n\t[{{ x }}]\n\tEOF", "[{v}]\n"),
    }


def _strip_trailing_newlines(text: str) -> str:
    return text.rstrip("\n")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=VALUES, case=st.sampled_from(sorted(_cases())))
def test_every_context_carries_any_value_literally(value: str, case: str):
    template, expected = _cases()[case]
    try:
        _, command = ENGINE.render_with_command({}, template, {"x": value})
    except ExpressionError as exc:
        assert exc.kind == "shell"
        refused_for_delimiter = case.startswith("heredoc") and any(
            line.strip("\t[]") == "EOF" or line.lstrip("\t") == "EOF" for line in value.split("\n"))
        assert refused_for_delimiter, f"refused a carriable value: {exc}"
        return
    if "\x00" in value:  # no program can receive it: the spawn fails the step (test below)
        return
    out = subprocess.run(["bash", "-c", command], capture_output=True, check=False).stdout.decode()
    want = expected.format(v=value)
    if case == "subst" or case == "dq_in_subst_in_dq" or case == "sq_in_subst":
        # $(…) drops trailing newlines of its output: that is bash, not the quoting
        prefix, _, suffix = expected.partition("{v}")
        want = prefix + _strip_trailing_newlines(value) + suffix
    if case == "heredoc_dash":
        want = "[" + "\n".join(line.lstrip("\t") if i else line for i, line in enumerate(value.split("\n"))) + "]\n"
    assert out == want, f"{case}: {command!r}"


# -- contexts that cannot be made safe are refused at load --------------------------------
REFUSED = {
    "backticks": ("echo `echo {{ inputs.x }}`", "$(…) instead of backticks"),
    "param": ("echo ${HOME:-{{ inputs.x }}}", "inside ${…}"),
    "arith": ("echo $(( {{ inputs.x }} + 1 ))", "arithmetic"),
    "ansi": ("echo $'{{ inputs.x }}'", "inside $'…'"),
    "comment": ("echo hi # {{ inputs.x }}", "comment"),
    "after_dollar": ('echo "${{ inputs.x }}"', "after a `$`"),
    "after_backslash": ("echo \\{{ inputs.x }}", "backslash"),
    "delimiter": ("cat <<{{ inputs.x }}\nhi\n", "delimiter"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
async def test_unsafe_contexts_are_refused_at_load_with_line_and_fix(make_server, name: str):
    command, words = REFUSED[name]
    server, _ = make_server({"quoting": _workflow("shell_command", command)})
    async with Client(server) as client:
        report = await ok(client, "workflow_validate", {"workflow": "quoting"})
        text = await fails(client, "workflow_start", {"workflow": "quoting", "inputs": {"x": "a"}})
    assert not report["valid"]
    problems = [e for e in report["errors"] if "literally" in e["message"]]
    assert problems, report
    assert problems[0]["line"] == 9, problems[0]
    assert words in problems[0]["message"]
    assert "literally" in text


def test_raw_stays_the_explicit_opt_out():
    _, command = ENGINE.render_with_command({}, "echo {{ x | raw }} `echo {{ y | raw }}`", {"x": "a && b", "y": "c"})
    assert command == "echo a && b `echo c`"


async def test_nul_in_an_input_fails_the_step_with_a_clear_message(make_server):
    server, _ = make_server({"quoting": _workflow("shell_command", COMMANDS["dq"])})
    async with Client(server) as client:
        started = await ok(client, "workflow_start", {"workflow": "quoting", "inputs": {"x": "a\x00b"}})
        step = await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
    assert step["status"] == "failed"
    assert "NUL byte" in step["error"] and "run" in step["error"], step["error"]
