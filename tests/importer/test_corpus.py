"""A corpus of AroMCP-dialect workflows covering every construct the importer translates.

Each file (tests/fixtures/aromcp/corpus, written for these tests) is imported, validated by
this project's validator and run to its end by the headless runner; the assertions check
the *meaning* AroMCP gives the construct (which branch, which value, which name).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.importer.importer_helpers import CORPUS, import_and_run, translate

CONSTRUCTS = {
    "then_steps → then": "corpus:branches", "else_steps → else": "corpus:branches",
    "type: while_loop → type: while": "corpus:loops", "body → steps": "corpus:loops",
    "variable_name: result → item": "corpus:scopes", "state_updates → updates": "corpus:loops",
    "this.path_taken → state.path_taken": "corpus:branches", "this.numbers → state.numbers": "corpus:computed",
    "tool → method": "corpus:agents", "parameters → params": "corpus:agents",
    "user_message state_update → a state_update step after the message": "corpus:agents",
    "stdout → {{ result.stdout }}": "corpus:results", "returncode → {{ result.exit_code }}": "corpus:results",
    "stderr → {{ result.stderr }}": "corpus:results",
    "result → {{ ({stdout: result.stdout, stderr: result.stderr, returncode: result.exit_code}) }}": "corpus:results",
    "state_updates → state_update": "corpus:results",
    "{{ output.toUpperCase() }} → {{ result.output.toUpperCase() }}": "corpus:results",
    "{{ input }} → {{ result }}": "corpus:agents",
    "{{ response.steps.length }} → {{ result.steps.length }}": "corpus:agents",
    "mode: string → mode: {type: string, required: true}": "corpus:branches",
    "type: break → type: exit": "corpus:branches",
    "level (required not given) → required: true": "corpus:branches",
    "this.files → {{ this.files }}": "corpus:tasks",
    "(no max_iterations) → max_iterations: 100": "corpus:loops",
    "default_state.inputs.label → inputs.label.default: 'from default_state'": "corpus:scopes",
    "default_state.inputs.rounds → inputs.rounds: {default: 2}": "corpus:scopes",
    "state.items[loop.idx].qty → state.items[{{ idx }}].qty": "corpus:scopes",
    "state.items[loop.idx].qty + loop.qty → {{ state.items[idx].qty + qty }}": "corpus:scopes",
    "{} → {{ {} }}": "corpus:scopes", "5 → {{ 5 }}": "corpus:scopes",
    "{{ loop.result + '!' }} → {{ item + '!' }}": "corpus:scopes",
    "type: mcp_call → type: state_update": "corpus:scopes",
    "state.by_key[{{ computed.key === 'k0' ? 'p' : 'q' }}] === 'p!' && state.spins < inputs....": "corpus:scopes",
}


@pytest.mark.parametrize(("rewrite", "name"), sorted(CONSTRUCTS.items()))
def test_every_construct_is_rewritten_and_reported(rewrite: str, name: str):
    result = translate(CORPUS / f"{name}.yaml")
    assert result.ok, result.lines()
    printed = "\n".join(result.lines())
    assert f": {rewrite}" in printed, printed


def test_branches_fast(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:branches.yaml", tmp_path, inputs={"mode": "fast", "level": 2})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["took fast at 2"]


def test_branches_slow_reads_the_bare_input(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:branches.yaml", tmp_path, inputs={"mode": "slow", "level": 9})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["took slow for slow"]


def test_branches_break_outside_a_loop_ends_the_workflow(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:branches.yaml", tmp_path, inputs={"mode": "stop", "level": 1})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == []


def test_branches_inputs_are_required_as_in_aromcp(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:branches.yaml", tmp_path, inputs={"mode": "fast"})
    assert outcome.status == "not_started"
    assert "level" in (outcome.error or "")


def test_loops(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:loops.yaml", tmp_path)
    assert outcome.status == "completed", outcome.error
    # AroMCP's `loop.iteration < 3` in the condition counts finished iterations: 3 rounds
    assert outcome.messages == ["ticks 1,2,3; countdown 2; visited A.TS,B.PY; pairs 0:a.ts:a.ts 1:b.py:b.py",
                                "spun 100 times"]  # AroMCP's default cap ends the loop; the workflow goes on


def test_loops_with_other_files(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:loops.yaml", tmp_path, inputs={"files": ["x.md"]})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages[0].endswith("visited X.MD; pairs 0:x.md:x.md")


def test_results(tmp_path: Path):
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    outcome = import_and_run(CORPUS / "corpus:results.yaml", tmp_path, project=project)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["out=hello err=oops code=3 dir=sub echoed=hello-3 listing=ONE TWO"]
    state = outcome.final_state or {}
    assert state["code"] == 3 and state["whole"]["returncode"] == 0 and state["whole"]["stderr"] == ""
    assert [(e.step_id.split("#")[0], e.type) for e in outcome.transcript] == [("agent_echo", "agent_shell_command")]


def test_agents(tmp_path: Path):
    answers = {"search_code": {"files": ["a.ts", "b.ts"]}, "ask_plan": {"steps": ["x", "y", "z"]},
               "ask": ["maybe", "yes"]}
    outcome = import_and_run(CORPUS / "corpus:agents.yaml", tmp_path, answers=answers)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["Looking at src", "greeted=true files=a.ts,b.ts steps=3 answer=yes"]
    assert (outcome.final_state or {})["plan"] == {"steps": ["x", "y", "z"]}
    types = [e.type for e in outcome.transcript]
    assert types == ["mcp_call", "agent_prompt", "user_input", "user_input"]  # "maybe" is not a choice


def test_agents_response_schema_from_expected_response(tmp_path: Path):
    answers = {"search_code": {"files": []}, "ask_plan": [{"no_steps": 1}, {"steps": []}], "ask": "no"}
    outcome = import_and_run(CORPUS / "corpus:agents.yaml", tmp_path, answers=answers)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages[-1] == "greeted=true files= steps=0 answer=no"
    assert [e.type for e in outcome.transcript].count("agent_prompt") == 2


def test_computed(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:computed.yaml", tmp_path)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["total=10 scaled=30 labelled=x30/10 parsed=unparsed g=10"]


def test_computed_reads_the_input(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:computed.yaml", tmp_path, inputs={"factor": 2})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["total=10 scaled=20 labelled=x20/10 parsed=unparsed g=10"]


def test_tasks(tmp_path: Path):
    answers = {"lint_file": [{"when_params": {"path": "a.ts", "strict": True}, "result": {"errors": 0}},
                             {"when_params": {"path": "b.ts", "strict": True}, "result": {"errors": 2}}]}
    outcome = import_and_run(CORPUS / "corpus:tasks.yaml", tmp_path, answers=answers)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ["checked a_ts,a_ts_task,b_ts,b_ts_task; loop outside a loop: []"]
    results = (outcome.final_state or {})["results"]
    assert results == {"a_ts": 0, "b_ts": 2, "a_ts_task": "check_file_0", "b_ts_task": "check_file_1"}


def test_scopes(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:scopes.yaml", tmp_path)
    assert outcome.status == "completed", outcome.error
    assert outcome.messages == ['from default_state rounds=2 qty=3,4 pairs=0:x:3 0:y:3 1:x:4 1:y:4 '
                                'keys={"p":"p!","q":"q!"} meta={"m_0":[],"m_1":[]} note=src/a-b.ts spins=2']
    assert outcome.transcript == []  # workflow_state_update is applied by the server: no agent step


def test_scopes_inputs_from_default_state_can_be_given(tmp_path: Path):
    outcome = import_and_run(CORPUS / "corpus:scopes.yaml", tmp_path, inputs={"label": "given", "rounds": 1})
    assert outcome.status == "completed", outcome.error
    assert outcome.messages[0].startswith("given rounds=1 ") and outcome.messages[0].endswith(" spins=1")
