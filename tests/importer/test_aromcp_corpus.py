"""AroMCP's own workflows, beyond AroMCP: imported, validated and run by a generic agent.

The corpus is every workflow AroMCP ships (`.aromcp/workflows/`, in
tests/fixtures/aromcp/original) and every workflow its tests embed as a YAML string
(tests/fixtures/aromcp/embedded, one file per distinct string, named after the test file
and line): 5 + 51 = 56 files.  Ten of them are not runnable in AroMCP itself: four its
tests write to be refused (bad YAML, an unknown step type, several errors, circular
computed fields), one is not YAML (a template literal at column 0 ends its block
scalar), and five use `set_variable`, which is not an AroMCP step type.  The other 46 are.

All 56 go through `aromcp-workflows import` at once, as a user would run it.  Each of the
46 must then validate here and run to completion with the headless runner and a generic
agent (importer_helpers.GenericAgent: it knows no workflow), with the inputs AroMCP's own
tests pass (a plain value of the declared type where its tests only parse the file), in a
generic project: a git repository with a few changed files, a package.json and a
stand-in `npm` (so no run depends on the registry).  The ten others must be refused
with `file:line` and a reason.  docs/import.md lists the corpus and its results.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aromcp_workflows.runner.report import RunOutcome
from aromcp_workflows.runner.run import run_workflow
from tests.importer.importer_helpers import FIXTURES, ORIGINALS, GenericAgent, git_project, validation_errors

EMBEDDED = FIXTURES / "embedded"
ALL = sorted([*ORIGINALS.glob("*.yaml"), *EMBEDDED.glob("*.yaml")], key=lambda p: p.name)

# file -> what the importer's refusal says (AroMCP refuses or cannot read them either)
NOT_RUNNABLE = {
    "workflow_definition_validation-L337.yaml": "not valid YAML",  # its test: "Invalid YAML syntax"
    "workflow_definition_validation-L525.yaml": "step type 'invalid_step_type' has no counterpart",
    "workflow_definition_validation-L552.yaml": "step type 'invalid_step_type' has no counterpart",
    "computed_field_cascading_comprehensive-L238.yaml": "circular computed fields",
    "variable_resolution_comprehensive-L185.yaml": "not valid YAML",
    "variable_resolution_comprehensive-L58.yaml": "step type 'set_variable' has no counterpart",
    "variable_resolution_comprehensive-L348.yaml": "step type 'set_variable' has no counterpart",
    "variable_resolution_comprehensive-L540.yaml": "step type 'set_variable' has no counterpart",
    "variable_resolution_comprehensive-L715.yaml": "step type 'set_variable' has no counterpart",
    "variable_resolution_comprehensive-L938.yaml": "step type 'set_variable' has no counterpart",
}
RUNNABLE = [p.name for p in ALL if p.name not in NOT_RUNNABLE]

# inputs, as AroMCP's tests pass them (for a required input its tests never pass, a plain value of its type)
INPUTS: dict[str, dict[str, Any]] = {
    "acceptance_scenario_2_complex_control_flow-L66.yaml": {"processing_mode": "automatic"},
    "acceptance_scenario_2_complex_control_flow-L263.yaml": {"search_target": 1},
    "acceptance_scenario_2_complex_control_flow-L999.yaml": {"use_parallel": True},
    "acceptance_scenario_2_complex_control_flow-L1279.yaml": {"initial_target": 50},
    "acceptance_scenario_2_complex_control_flow-L1578.yaml": {"enable_emergency_mode": False},
    "test:simple.yaml": {"name": "Ada"},
    "test:agent-communication.yaml": {"project_path": "."},
    "execution_engine-L31.yaml": {"name": "test"},
    "execution_engine-L93.yaml": {"multiplier": 3},
    "execution_engine-L346.yaml": {"user_name": "Alice"},
    "fixtures-L38.yaml": {"name": "TestUser"},
    "parameter_handling-L42.yaml": {"name": "test"},
    "parameter_handling-L84.yaml": {"name": "test"},
    "parameter_handling-L128.yaml": {"name": "test"},
    "parameter_handling-L190.yaml": {"text_input": "hello", "number_input": 42},
    "parameter_handling-L241.yaml": {"flag": "true"},  # its test passes True; a string input takes text here
    "parameter_handling-L288.yaml": {"name": "test"},
    "parameter_handling-L326.yaml": {"name": "test"},
    "workflow_definition_validation-L120.yaml": {"name": "test"},
    "workflow_definition_validation-L210.yaml": {"numeric_with_constraints": 1.5, "string_with_pattern": "Hello"},
    "workflow_definition_validation-L256.yaml": {"email_list": ["ada@example.com"]},
    "workflow_definition_validation-L287.yaml": {"simple_defaults": {}},
}

# file -> why it does not complete here (docs/import.md says the same); empty when all do
KNOWN_FAILURES: dict[str, str] = {}

Check = Callable[[dict[str, Any], list[str]], bool]
# What AroMCP's own tests assert about the run (its final state, its messages), per file
CHECKS: dict[str, Check] = {
    "control_flow_comprehensive-L56.yaml": lambda s, m: s["outer_count"] == 3 and s["outer_iterations"] == [
        "outer_0_start", "outer_0_end", "outer_1_start", "outer_1_end", "outer_2_start", "outer_2_end"],
    "control_flow_comprehensive-L184.yaml": lambda s, m: s["skipped_pairs"] == ["1_30", "2_30", "3_30"] and sorted(
        s["processed_pairs"]) == sorted(f"{o}_{i}" for o in (1, 2, 3) for i in (10, 20, 40, 50)),
    "control_flow_comprehensive-L288.yaml": lambda s, m: s["counter"] == 25 and len(s["loop_data"]) == 25
    and s["always_true"] is True,  # reaching max_iterations is a normal end of the loop
    "control_flow_comprehensive-L384.yaml": lambda s, m: s["iteration_count"] == 15
    and [u["iteration"] for u in s["memory_usage"]] == [0, 5, 10] and s["performance_metrics"]["max_iterations_hit"]
    and s["performance_metrics"]["diagnostic_snapshots"] == 5,
    "control_flow_comprehensive-L556.yaml": lambda s, m: {"A_4_red", "A_4_green", "B_3_red", "B_4_blue"}
    <= set(s["results"]) and not {"B_2_green", "C_3_red", "A_4_blue", "B_3_blue"} & set(s["results"]),
    "computed_field_cascading_comprehensive-L55.yaml": lambda s, m: (s["total_discount"], s["unit_price"],
                                                                     s["total_amount"]) == (0.4, 60, 648),
    "computed_field_cascading_comprehensive-L299.yaml": lambda s, m: (s["sum_xy"], s["sum_yz"], s["sum_xz"],
                                                                      s["product_sums"]) == (12, 5, 13, 780),
    "computed_field_cascading_comprehensive-L513.yaml": lambda s, m: [i["quantity"] for i in s["items"]] == [3, 5, 2]
    and (s["total_items"], s["total_value"], s["order_status"]) == (10, 12.25, "Regular Order")
    and s["final_summary"]["cascading_worked"] is True,
    "acceptance_scenario_2_complex_control_flow-L478.yaml": lambda s, m: s["category_index"] >= 2
    and len(s["results_a"]) + len(s["results_b"]) + len(s["results_c"]) > 0 and s["global_counter"] > 0,
    "acceptance_scenario_2_complex_control_flow-L727.yaml": lambda s, m: s["current_dept_index"] >= 2
    and s["total_assignments"] == 21,  # 5+2+1, 3+2+1, 4+2+1 team members
    "acceptance_scenario_2_complex_control_flow-L999.yaml": lambda s, m: s["processing_mode"] == "parallel"
    and s["processing_complete"] is True and len(s["parallel_results"]) == 3 and s["sequential_results"] == [],
    "acceptance_scenario_2_complex_control_flow-L1279.yaml": lambda s, m: s["current_score"] > 0
    and s["game_state"] in ("won", "lost", "completed") and s["attempts"] > 0,
    "acceptance_scenario_2_complex_control_flow-L1578.yaml": lambda s, m: s["current_phase_index"] > 0,
    "test:simple.yaml": lambda s, m: m == ["Counter is 5, doubled is 10"],
    "analyze:dependencies.yaml": lambda s, m: m == ["Found 1 outdated dependencies\nMajor version updates needed: 1"],
    "test:sub-agents.yaml": lambda s, m: m[-2] == "No files found to process. Workflow complete.",  # git_output ""
}


@dataclass
class Imported:
    out: Path
    printed: str
    exit_code: int


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Imported:
    """`aromcp-workflows import` over the whole corpus, once."""
    out = tmp_path_factory.mktemp("imported")
    proc = subprocess.run([sys.executable, "-m", "aromcp_workflows", "import", *map(str, ALL), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    return Imported(out, proc.stdout + proc.stderr, proc.returncode)


def generic_project(base: Path) -> tuple[Path, dict[str, str]]:
    """A git repository with changed files, a package.json and a stand-in npm on PATH."""
    project = git_project(base / "project", {"src/app.ts": "let a = 1\n", "src/util.js": "var b = 2\n",
                                             "lib/tool.py": "x = 1\n", "README.md": "hello\n",
                                             "package.json": '{"dependencies": {"left-pad": "1.0.0"}}\n'})
    bin_dir = base / "bin"
    bin_dir.mkdir()
    (bin_dir / "npm").write_text("#!/bin/sh\necho 'left-pad 1.0.0 1.3.0 2.0.0 outdated'\n")
    (bin_dir / "npm").chmod(0o755)
    return project, {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def outcomes(imported: Imported, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunOutcome | str]:
    """Every runnable workflow, validated and run (three at a time): its outcome, or why it
    could not be run (not written, or invalid here)."""
    results: dict[str, RunOutcome | str] = {}
    todo = []
    for name in RUNNABLE:
        target = imported.out / name
        if not target.is_file():
            results[name] = "not written by import"
            continue
        errors = validation_errors(target)
        if errors:
            results[name] = f"invalid here: {errors}"
            continue
        todo.append(name)

    async def run_all() -> None:
        gate = asyncio.Semaphore(3)

        async def one(name: str) -> None:
            base = tmp_path_factory.mktemp(name.replace(":", "_").removesuffix(".yaml"))
            project, env = generic_project(base)
            async with gate:
                results[name] = await run_workflow(str(imported.out / name), INPUTS.get(name, {}), GenericAgent(),
                                                   project, base / "store.sqlite", io.StringIO(), env=env)

        await asyncio.gather(*(one(name) for name in todo))

    asyncio.run(run_all())
    return results


def test_the_corpus_is_counted() -> None:
    assert len(list(ORIGINALS.glob("*.yaml"))) == 5 and len(list(EMBEDDED.glob("*.yaml"))) == 51
    assert len(ALL) == 56 and len(RUNNABLE) == 46
    assert set(NOT_RUNNABLE) <= {p.name for p in ALL} and set(INPUTS) | set(CHECKS) <= set(RUNNABLE)


@pytest.mark.parametrize("name", sorted(NOT_RUNNABLE))
def test_what_cannot_be_translated_is_refused_with_its_line(imported: Imported, name: str) -> None:
    refusals = [line for line in imported.printed.splitlines()
                if line.startswith(f"{EMBEDDED / name}:") and NOT_RUNNABLE[name] in line]
    assert refusals, imported.printed
    line_number = refusals[0][len(f"{EMBEDDED / name}:"):].split(":", 1)[0]
    assert line_number.isdigit() and int(line_number) >= 1
    assert not (imported.out / name).exists()
    assert imported.exit_code == 1


@pytest.mark.parametrize("name", RUNNABLE)
def test_runnable_workflow_imports_validates_and_completes(outcomes: dict[str, RunOutcome | str], name: str) -> None:
    outcome = outcomes[name]
    if name in KNOWN_FAILURES:
        assert not isinstance(outcome, RunOutcome) or outcome.status != "completed"
        return
    assert isinstance(outcome, RunOutcome), outcome
    assert outcome.status == "completed", outcome.error
    if name in CHECKS:
        assert CHECKS[name](outcome.final_state or {}, outcome.messages), (outcome.messages, outcome.final_state)


def test_at_least_44_of_the_46_runnable_workflows_complete(outcomes: dict[str, RunOutcome | str]) -> None:
    completed = sorted(n for n, o in outcomes.items() if isinstance(o, RunOutcome) and o.status == "completed")
    failed = {n: (o if isinstance(o, str) else f"{o.status}: {o.error}") for n, o in outcomes.items()
              if n not in completed}
    assert len(outcomes) == 46
    assert sorted(failed) == sorted(KNOWN_FAILURES), failed
    assert len(completed) >= 44, failed


def test_a_nested_loop_reads_the_outer_loops_index_name(imported: Imported, tmp_path: Path) -> None:
    """AroMCP's own second run of this workflow (use_parallel: false): the inner foreach over
    a batch's files reads `seq_index`, the outer foreach's index_name."""
    project, env = generic_project(tmp_path)
    name = "acceptance_scenario_2_complex_control_flow-L999.yaml"
    outcome = asyncio.run(run_workflow(str(imported.out / name), {"use_parallel": False}, GenericAgent(), project,
                                       tmp_path / "store.sqlite", io.StringIO(), env=env))
    assert outcome.status == "completed", outcome.error
    state = outcome.final_state or {}
    assert state["processing_mode"] == "sequential" and state["parallel_results"] == []
    assert [(r["batch"], r["index"]) for r in state["sequential_results"]] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2), (2, 3)]
    assert outcome.messages[1] == "Sequentially processing batch 0 with 3 files"
