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
from aromcp_workflows.shell.dialect import dash_text, sh_path

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
    # a program, not a builtin: these run under dash when the escaped text lets them
    "dq_program": '/usr/bin/printf %s "v={{ inputs.x }}"',
    "sq_program": "/usr/bin/printf %s 'v={{ inputs.x }}'",
    "bare_program": "/usr/bin/printf %s v={{ inputs.x }}",
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


PROGRAM_CASES = {
    "bare": ("/usr/bin/printf %s {{ x }}", "{v}"),
    "bare_in_word": ("/usr/bin/printf %s a{{ x }}b", "a{v}b"),
    "dq": ('/usr/bin/printf %s "v={{ x }}."', "v={v}."),
    "sq": ("/usr/bin/printf %s 'v={{ x }}.'", "v={v}."),
    "two_values": ('/usr/bin/printf %s "{{ x }}"\'{{ x }}\'{{ x }}', "{v}{v}{v}"),
}
DASH_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C"}


def _under_dash(command: str, cwd: Path) -> str | None:
    """What dash prints for `command` when the server would run it with dash, else None."""
    text = dash_text(command, DASH_ENV, cwd)
    if text is None:
        return None
    dash = sh_path()
    assert dash is not None
    run = subprocess.run(["bash", "-c", text], executable=dash, cwd=cwd, env=DASH_ENV, capture_output=True,
                         check=False)
    return run.stdout.decode()


@pytest.mark.skipif(sh_path() is None, reason="/bin/sh is not dash")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(value=VALUES, case=st.sampled_from(sorted(PROGRAM_CASES)))
def test_a_command_run_by_dash_carries_any_value_literally_too(value: str, case: str, tmp_path: Path):
    """The escaping is bash's; the server hands a command to dash only when its text, values
    included, means the same to both shells.  Whatever dash is given prints the value."""
    template, expected = PROGRAM_CASES[case]
    _, command = ENGINE.render_with_command({}, template, {"x": value})
    if "\x00" in value:
        return
    out = _under_dash(command, tmp_path)
    if out is not None:
        assert out == expected.format(v=value), f"{case}: {command!r}"


@pytest.mark.skipif(sh_path() is None, reason="/bin/sh is not dash")
def test_injection_payloads_do_reach_dash_and_stay_data(tmp_path: Path):
    """Not vacuous: most attack payloads, escaped, leave a text dash may run, and none runs."""
    target = tmp_path / "PWNED"
    reached = 0
    for payload in PAYLOADS:
        value = payload.format(p=target)
        for template, expected in PROGRAM_CASES.values():
            _, command = ENGINE.render_with_command({}, template, {"x": value})
            out = _under_dash(command, tmp_path)
            if out is not None:
                reached += 1
                assert out == expected.format(v=value)
    assert not target.exists()
    assert reached >= len(PAYLOADS) * len(PROGRAM_CASES) // 2, reached


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
