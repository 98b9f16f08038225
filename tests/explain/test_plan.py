"""`workflow_explain_plan` / `aromcp-workflows explain`: what a workflow will do, shown
without running anything (no shell command runs, no instance is created)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from explain_helpers import REPO, Project

from aromcp_workflows.definition.resolver import is_workflow_file_name
from aromcp_workflows.instances.errors import ServiceError
from aromcp_workflows.interpreter import InputError

SHIPPED = sorted(p.stem for p in (REPO / "workflows").glob("*.yaml") if is_workflow_file_name(p.name))
EXAMPLES = sorted(str(p) for p in (REPO / "examples").glob("*.yaml"))
EXAMPLE_INPUTS = {"examples:parallel-batches": {"files": ["a.py", "b.py", "c.py"]}}


def steps_by_id(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["step_id"]: s for s in plan["steps"]}


def run_ids(listing: list[str]) -> list[str]:
    """Step ids of the RUN instructions of a program listing (its last column)."""
    return [line.split()[-1] for line in listing if re.match(r"\s*\d+\s+RUN\s", line)]


# -- the shipped workflows and the examples ---------------------------------------------
@pytest.mark.parametrize("name", SHIPPED + EXAMPLES)
def test_plan_of_every_shipped_workflow_and_example(service: Any, name: str) -> None:
    stem = name.rsplit("/", 1)[-1].removesuffix(".yaml")
    plan = service.explain_plan(name, EXAMPLE_INPUTS.get(stem, {})).model_dump()
    assert plan["workflow"] == stem
    assert plan["steps"] and all({"step_id", "type", "side"} <= set(s) for s in plan["steps"])
    assert all(s["side"] in ("server", "agent", "message") for s in plan["steps"])
    ids = [s["step_id"] for s in plan["steps"]]
    assert len(ids) == len(set(ids)), "step ids in a plan are unique"
    assert plan["program"][stem]["main"][-1].split()[-1] == "END"
    # the plan and the compiled program name the same main-list steps
    main_ids = {s["step_id"] for s in plan["steps"] if not re.match(r"(\[|task |on failure)", s["step_id"])}
    assert set(run_ids(plan["program"][stem]["main"])) <= main_ids
    assert plan["required_tools"] == sorted({s["mcp_method"] for s in plan["steps"] if "mcp_method" in s})
    assert set(plan["state_paths_written"]) >= {p for s in plan["steps"] for p in s.get("writes", [])}
    assert plan["state_paths_written"] == sorted(plan["state_paths_written"])
    json.dumps(plan)  # JSON-safe as it is


def test_standards_fix_plan(service: Any) -> None:
    plan = service.explain_plan("standards:fix", {"batch_size": 2}).model_dump()
    steps = steps_by_id(plan)
    assert plan["required_tools"] == ["hints_for_file", "lint_project"]
    assert steps["detect_files"]["writes"] == ["raw.git_files"] and steps["detect_files"]["side"] == "server"
    then = steps["nothing_to_do.then_exit_2"]
    assert then["conditions"] == ["if {{ filtered_files.length === 0 }}"]
    assert steps["announce"]["side"] == "message"
    fan = steps["fix_batches"]
    assert (fan["sub_agent_task"], fan["max_parallel"]) == ("fix_batch", 10)
    # the items are computed from what detect_files writes: unknown before the run, and it says why
    assert isinstance(fan["estimated_sub_agents"], str)
    assert fan["estimated_sub_agents"].startswith("unknown:")
    assert "raw.git_files" in fan["estimated_sub_agents"] and "detect_files" in fan["estimated_sub_agents"]
    assert plan["estimated_sub_agents"] == {"total": None, "by_step": {"fix_batches": fan["estimated_sub_agents"]}}
    lint = steps["task fix_batch: fix_files.lint"]
    assert lint["mcp_method"] == "lint_project" and lint["loops"] == ["foreach {{ task.files }}"]
    assert lint["side"] == "agent"
    assert "task fix_batch (cleanup): cleanup_on_error.state_update_1" in steps
    for path in ("raw.git_files", "raw.sub_agent_errors", "raw.batch_status.{{ task.batch_id }}",
                 "raw.file_results.{{ item | path_to_key }}.hints"):
        assert path in plan["state_paths_written"]
    assert set(plan["program"]["standards:fix"]) == {"main", "task:fix_batch", "cleanup:fix_batch"}
    assert run_ids(plan["program"]["standards:fix"]["task:fix_batch"]) == [
        "fix_files.get_hints", "fix_files.apply", "fix_files.lint", "mark_done"]


def test_ci_retry_tests_plan_shows_the_loop_and_the_break(service: Any) -> None:
    plan = service.explain_plan("ci:retry-tests", {"command": "true"}).model_dump()
    steps = steps_by_id(plan)
    assert steps["retry_loop"]["type"] == "while"
    assert steps["retry_loop.run_tests"]["loops"] == ["while {{ can_retry }} (max 20)"]
    [brk] = [s for s in plan["steps"] if s["type"] == "break"]
    assert brk["conditions"] == ["if {{ last_exit_code === 0 }}"]
    listing = "\n".join(plan["program"]["ci:retry-tests"]["main"])
    assert "LOOP_ENTER   while retry_loop (max 20)" in listing
    assert re.search(r"BREAK +retry_loop → 9", listing) and re.search(r"10 +RUN +user_message +report", listing)
    assert re.search(r"11 +WHEN +\{\{ !passed \}\} else → 13 +\(give_up\)", listing)
    assert re.search(r"12 +EXIT +failed +\(give_up\)", listing)
    assert brk["step_id"] == "retry_loop.check_passed.then_break_2"


def test_deps_analyze_plan_shows_when_guards(service: Any) -> None:
    steps = steps_by_id(service.explain_plan("deps:analyze", {}).model_dump())
    assert steps["review"]["conditions"] == ["when {{ inputs.review }}"]
    assert steps["count_each.count"]["loops"] == ["foreach {{ manifests }}"]


def test_standards_check_plan_includes_the_imported_workflow(service: Any) -> None:
    plan = service.explain_plan("standards:check", {}).model_dump()
    steps = steps_by_id(plan)
    assert steps["run_checks"]["includes"] == "shared:check-standards"
    assert steps["run_checks"]["writes"]
    # the child's steps, listed after the include with the ids the agent will see
    ids = list(steps)
    assert ids[ids.index("run_checks") + 1:ids.index("run_checks") + 5] == [
        "run_checks.check_typescript", "run_checks.check_typescript.tsc", "run_checks.check_lint",
        "run_checks.check_lint.lint"]
    assert steps["run_checks.check_lint.lint"]["loops"] == ["foreach {{ inputs.files }}"]
    assert not any(i.startswith("[shared:check-standards] ") for i in steps)  # not listed twice
    assert set(plan["program"]) == {"standards:check", "shared:check-standards"}


def test_error_handling_example_lists_the_failure_handler(service: Any) -> None:
    plan = service.explain_plan("examples/examples:error-handling.yaml", {}).model_dump()
    steps = steps_by_id(plan)
    assert steps["on failure: on_failure.state_update_1"]["writes"] == ["raw.status"]
    assert "raw.workflow_errors" in plan["state_paths_written"]  # error_collection.state_path
    assert run_ids(plan["program"]["examples:error-handling"]["on_failure"]) == [
        "on_failure.state_update_1", "on_failure.user_message_2"]


def test_parallel_batches_estimate_follows_the_inputs(service: Any) -> None:
    three = service.explain_plan("examples/examples:parallel-batches.yaml", {"files": ["a", "b", "c"]}).model_dump()
    assert steps_by_id(three)["fan_out"]["estimated_sub_agents"] == 2  # batch_size 2 by default
    assert three["estimated_sub_agents"] == {"total": 2, "by_step": {"fan_out": 2}}
    ones = service.explain_plan("examples/examples:parallel-batches.yaml",
                                {"files": ["a", "b", "c"], "batch_size": 1}).model_dump()
    assert ones["estimated_sub_agents"]["total"] == 3


# -- the estimate, construct by construct ---------------------------------------------------
ESTIMATES = """
name: "test:estimates"
inputs:
  files: {type: array, default: []}
default_state:
  raw: {late: [1, 2], early: [], fixed: ["x"]}
state_schema:
  computed:
    pairs:
      from: inputs.files
      transform: "input.filter((f, i) => i % 2 === 0)"
steps:
  - id: from_inputs
    type: parallel_foreach
    items: "{{ inputs.files }}"
    sub_agent_task: t
  - id: literal
    type: parallel_foreach
    items: [1, 2, 3, 4]
    sub_agent_task: t
  - id: via_computed
    type: parallel_foreach
    items: "{{ pairs }}"
    sub_agent_task: t
  - id: write_early
    type: state_update
    path: raw.early
    value: [1, 2, 3]
  - id: after_write
    type: parallel_foreach
    items: "{{ early }}"
    sub_agent_task: t
  - id: written_later
    type: parallel_foreach
    items: "{{ late }}"
    sub_agent_task: t
  - id: via_this
    type: parallel_foreach
    items: "{{ this.early }}"
    sub_agent_task: t
  - id: via_tier
    type: parallel_foreach
    items: "{{ computed.pairs.concat(raw.late) }}"
    sub_agent_task: t
  - id: touched_by_task
    type: parallel_foreach
    items: "{{ raw.fixed }}"
    sub_agent_task: t
  - id: each
    type: foreach
    items: "{{ inputs.files }}"
    steps:
      - id: per_item
        type: parallel_foreach
        items: "{{ [item, item] }}"
        sub_agent_task: t
  - id: polling
    type: while
    condition: "{{ late.length < 5 }}"
    max_iterations: 3
    body:
      - id: in_loop
        type: parallel_foreach
        items: "{{ late }}"
        sub_agent_task: t
      - id: grow
        type: state_update
        path: raw.late
        operation: append
        value: 9
  - id: empty
    type: parallel_foreach
    items: "{{ inputs.files.filter(f => f === 'none') }}"
    sub_agent_task: t
sub_agent_tasks:
  t:
    steps:
      - id: note
        type: state_update
        path: "raw.fixed"
        value: ["changed"]
"""


@pytest.fixture
def estimates(project: Project, service: Any) -> dict[str, Any]:
    project.put("test:estimates", ESTIMATES)
    plan = service.explain_plan("test:estimates", {"files": ["a", "b", "c"]}).model_dump()
    return {s["step_id"]: s.get("estimated_sub_agents") for s in plan["steps"]} | {"_plan": plan}


def test_estimate_from_inputs_is_a_number(estimates: dict[str, Any]) -> None:
    assert estimates["from_inputs"] == 3
    assert estimates["literal"] == 4
    assert estimates["via_computed"] == 2  # a computed field over the inputs: a, c
    assert estimates["empty"] == 0  # known to be empty: nothing can change it


def test_estimate_is_unknown_when_an_earlier_step_writes_what_items_read(estimates: dict[str, Any]) -> None:
    assert estimates["after_write"].startswith("unknown:")
    assert "raw.early (by write_early)" in estimates["after_write"]
    assert estimates["written_later"] == 2  # raw.late is written only after it (outside its loop)
    assert "raw.early (by write_early)" in estimates["via_this"]
    assert estimates["via_tier"] == 4  # pairs (a, c) + late (1, 2): nothing earlier writes them


def test_estimate_counts_writes_of_tasks_that_ran_before(estimates: dict[str, Any]) -> None:
    assert "raw.fixed (by task t: note)" in estimates["touched_by_task"]


def test_estimate_inside_loops(estimates: dict[str, Any]) -> None:
    assert "loop or task variables" in estimates["each.per_item"]
    assert "raw.late (by polling.grow)" in estimates["polling.in_loop"]  # a later iteration follows grow
    plan = estimates["_plan"]
    in_loop = steps_by_id(plan)["polling.in_loop"]
    assert in_loop["estimate_note"] == "per iteration of polling"
    assert plan["estimated_sub_agents"]["total"] is None


def test_bad_inputs_are_refused_with_every_problem(project: Project, service: Any) -> None:
    project.put("test:estimates", ESTIMATES)
    with pytest.raises((InputError, ServiceError)) as info:
        service.explain_plan("test:estimates", {"files": 3, "nope": 1}).model_dump()
    text = str(info.value)
    assert "files" in text and "nope" in text


def test_explain_runs_nothing(project: Project, service: Any) -> None:
    marker = project.root / "ran"
    project.put("test:side-effects", f"""
        name: "test:side-effects"
        steps:
          - id: touch
            type: shell_command
            command: "touch {marker}"
        """)
    plan = service.explain_plan("test:side-effects", {}).model_dump()
    assert [s["step_id"] for s in plan["steps"]] == ["touch"]
    assert not marker.exists()
    assert service.list_instances().instances == []


# -- the CLI -------------------------------------------------------------------------------
def test_cli_explain_text(cli: Any) -> None:
    code, out, err = cli("explain", "standards:fix", "--input", "batch_size=2")
    assert code == 0, err
    assert out.startswith("Plan for standards:fix: ")
    assert "  fix_batches  parallel_foreach (agent)" in out
    assert "one sub-agent per item running task fix_batch, at most 10 at once; sub-agents: unknown:" in out
    assert "      if {{ filtered_files.length === 0 }}" in out
    assert "      calls MCP tool hints_for_file" in out
    assert "MCP tools called: hints_for_file, lint_project" in out
    assert "State written: " in out and "raw.git_files" in out
    assert "Program:\n  standards:fix / main\n" in out


def test_cli_explain_json_with_inputs(cli: Any) -> None:
    code, out, _ = cli("explain", str(REPO / "examples" / "examples:parallel-batches.yaml"), "--json",
                       "--input", 'files=["a","b","c"]', "-i", "batch_size=1")
    assert code == 0
    plan = json.loads(out)
    assert plan["estimated_sub_agents"]["total"] == 3
    assert {"steps", "estimated_sub_agents", "required_tools", "program", "state_paths_written"} <= set(plan)


@pytest.mark.parametrize("args, message, status", [
    (["explain", "examples/examples:parallel-batches.yaml"], "'files' is required", 1),
    (["explain", "standards:fix", "-i", "batch_size=three"], "batch_size", 1),
    (["explain", "no:such"], "not found", 1),
    (["explain", "standards:fix", "-i", "oops"], "KEY=VALUE", 2),  # a usage error, as for `run`
])
def test_cli_explain_errors(cli: Any, args: list[str], message: str, status: int,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    code, out, err = cli(*args)
    assert code == status
    assert message in err + out
    assert "Traceback" not in err
