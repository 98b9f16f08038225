"""Accepted spellings and composition: aliases, `workflow:` wrappers, files holding several
workflows, imports relative to the importing file, include bundles and their snapshots."""

from __future__ import annotations

from pathlib import Path

import pytest
from definition_helpers import minimal, write

from aromcp_workflows.definition import (
    DefinitionError,
    WorkflowBundle,
    WorkflowLoader,
    check,
    load_valid_bundle,
)
from aromcp_workflows.definition.steps import ConditionalStep, McpCallStep


def test_then_steps_and_else_steps_are_then_and_else(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "alias.yaml", """
        name: alias
        steps:
          - type: conditional
            condition: "{{ true }}"
            then_steps:
              - type: user_message
                message: "yes"
            else_steps:
              - type: user_message
                message: "no"
        """)
    step = loader.load(str(path)).definition.steps[0]
    assert isinstance(step, ConditionalStep)
    assert [s.message for s in step.then] == ["yes"]  # type: ignore[union-attr]
    assert [s.message for s in step.else_] == ["no"]  # type: ignore[union-attr]
    assert check(str(path), loader).valid


def test_top_level_method_and_params_fill_mcp(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "mcp.yaml", """
        name: mcp-alias
        steps:
          - type: mcp_call
            method: lint_project
            params: {target_files: ["a.ts"]}
          - type: mcp_call
            method: hints_for_file
        """)
    first, second = loader.load(str(path)).definition.steps
    assert isinstance(first, McpCallStep) and isinstance(second, McpCallStep)
    assert (first.mcp.method, first.mcp.params) == ("lint_project", {"target_files": ["a.ts"]})
    assert (second.mcp.method, second.mcp.params) == ("hints_for_file", {})


def test_mcp_call_without_method_says_both_spellings(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "mcp.yaml", """
        name: mcp-missing
        steps:
          - type: mcp_call
            params: {a: 1}
          - type: mcp_call
        """)
    assert [str(p) for p in check(str(path), loader).errors] == [
        (f"{path}:4:5: an mcp_call step with top-level 'params' needs a top-level 'method' too "
        "(or write both under 'mcp:')"),
        f"{path}:5:5: missing required key 'mcp' (or top-level 'method') in mcp_call step; the seed "
        "design's snippets leave it out as a placeholder, but a step that runs names its tool "
        "(mcp: {method: ..., params: ...})"]


def test_on_sub_agent_error_string_is_the_strategy(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "p.yaml", """
        name: shorthand
        steps:
          - type: parallel_foreach
            items: "{{ [1] }}"
            sub_agent_task: t
            on_sub_agent_error: continue
        sub_agent_tasks:
          t:
            inputs: {n: "{{ item }}", size: 3}
            steps: [{type: user_message, message: "{{ task.n }}"}]
        """)
    definition = loader.load(str(path)).definition
    assert definition.steps[0].on_sub_agent_error.strategy == "continue"  # type: ignore[union-attr]
    inputs = definition.sub_agent_tasks["t"].inputs
    assert (inputs["n"].type, inputs["n"].default) == ("string", "{{ item }}")
    assert (inputs["size"].type, inputs["size"].default) == ("integer", 3)


def test_env_numbers_and_booleans_become_text(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "env.yaml", """
        name: env
        steps:
          - type: shell_command
            command: "env"
            env: {DEBUG: 1, VERBOSE: true, RATIO: 0.5, NAME: x}
        """)
    step = loader.load(str(path)).definition.steps[0]
    assert step.env == {"DEBUG": "1", "VERBOSE": "true", "RATIO": "0.5", "NAME": "x"}  # type: ignore[union-attr]


def test_version_written_as_a_number_stays_as_written(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "v.yaml", minimal("v") + "version: 2.0\n")
    assert loader.load(str(path)).definition.version == "2.0"


def test_a_wrapped_workflow_reports_positions_in_its_file(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "wrapped.yaml", """
        # comment
        workflow:
          name: wrapped
          steps:
            - type: user_message
              message: "hi"
            - type: shell_command
        """)
    assert [str(p) for p in check(str(path), loader).errors] == [
        f"{path}:7:7: missing required key 'command' in shell_command step; the seed design's "
        "snippets leave it out as a placeholder, but a step that runs needs the command"]


def test_main_workflow_imports_shared_files_relative_to_each_file(project: Path,
                                                                 loader: WorkflowLoader) -> None:
    root = project / ".aromcp" / "workflows"
    write(root / "shared" / "pack.yaml", """
        imports:
          - deeper/leaf.yaml
        workflows:
          - name: "pack:one"
            steps:
              - type: include_workflow
                workflow: "pack:leaf"
          - name: "pack:two"
            steps: [{type: user_message, message: two}]
        """.replace("imports:\n  - deeper/leaf.yaml\n", ""))
    # `workflows:` files take imports per workflow; put one on pack:one instead
    write(root / "shared" / "pack.yaml", """
        workflows:
          - name: "pack:one"
            imports: [deeper/leaf.yaml]
            steps:
              - type: include_workflow
                workflow: "pack:leaf"
          - name: "pack:two"
            steps: [{type: user_message, message: two}]
        """)
    write(root / "shared" / "deeper" / "leaf.yaml", "workflow:\n" + "".join(
        "  " + line + "\n" for line in minimal("pack:leaf").splitlines()))
    write(root / "main:flow.yaml", """
        name: "main:flow"
        imports: [shared/pack.yaml]
        steps:
          - {id: one, type: include_workflow, workflow: "pack:one"}
          - {id: two, type: include_workflow, workflow: "pack:two", state_update: {path: raw.two}}
        """)
    report = check("main:flow", loader)
    assert report.errors == [] and report.warnings == []
    assert report.bundle is not None
    assert sorted(report.bundle.workflows) == ["main:flow", "pack:leaf", "pack:one", "pack:two"]
    assert report.bundle.workflows["pack:leaf"].file == str(root / "shared" / "deeper" / "leaf.yaml")
    assert report.bundle.workflows["pack:leaf"].source == "import"


def test_a_stream_of_documents_is_several_workflows(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "stream.yaml", minimal("st:one") + "---\n" + minimal("st:two") + "---\n")
    assert [w.name for w in loader.load_file(path)] == ["st:one", "st:two"]
    assert check(str(path), loader).valid  # validating the file checks both
    broken = write(tmp_path / "broken.yaml", minimal("st:one") + "---\n" + minimal("st:two")
                   + "  - type: exitt\n")
    assert [str(p) for p in check(str(broken), loader).errors] == [
        f"{broken}:10:5: unknown step type 'exitt' (did you mean 'exit'?)"]


def test_running_needs_one_workflow_per_file(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "pair.yaml", minimal("st:one") + "---\n" + minimal("st:two"))
    with pytest.raises(DefinitionError) as caught:
        load_valid_bundle(str(path), loader)
    assert [str(p) for p in caught.value.problems] == [
        f"{path}: file holds 2 workflows; name one of: st:one, st:two"]


def test_bundle_snapshot_round_trips(loader: WorkflowLoader) -> None:
    bundle = loader.load_bundle("standards:check")
    again = WorkflowBundle.from_snapshot(bundle.snapshot())
    assert sorted(again.workflows) == ["shared:check-standards", "standards:check"]
    assert again.main.definition == bundle.main.definition
    assert again.get("shared:check-standards") == bundle.get("shared:check-standards")


def test_an_invalid_included_workflow_is_reported_in_its_own_file(project: Path,
                                                                  loader: WorkflowLoader) -> None:
    root = project / ".aromcp" / "workflows"
    child = write(root / "kid:broken.yaml", 'name: "kid:broken"\nsteps:\n  - type: exitt\n')
    write(root / "parent:ok.yaml", """
        name: "parent:ok"
        steps:
          - type: include_workflow
            workflow: "kid:broken"
        """)
    assert [str(p) for p in check("parent:ok", loader).errors] == [
        (f"{root / 'parent:ok.yaml'}:4:5: included workflow 'kid:broken' is invalid (its errors "
        "are listed under its own file name)"),
        f"{child}:3:5: unknown step type 'exitt' (did you mean 'exit'?)",
    ]


def test_include_with_a_path_for_a_name_is_refused(tmp_path: Path, loader: WorkflowLoader) -> None:
    path = write(tmp_path / "inc.yaml", """
        name: inc
        steps:
          - type: include_workflow
            workflow: "../../etc/passwd"
        """)
    assert [p.message for p in check(str(path), loader).errors] == [
        ("invalid workflow name '../../etc/passwd': it contains a path separator; a name looks "
        "like 'standards:fix'")]


def test_editing_a_file_is_seen_by_the_next_load(tmp_path: Path, loader: WorkflowLoader) -> None:
    import os

    path = write(tmp_path / "edit.yaml", minimal("edit", "before"))
    assert loader.load(str(path)).definition.steps[0].message == "before"  # type: ignore[union-attr]
    write(path, minimal("edit", "after"))
    stamp = path.stat().st_mtime + 5
    os.utime(path, (stamp, stamp))
    assert loader.load(str(path)).definition.steps[0].message == "after"  # type: ignore[union-attr]


def test_an_edited_imported_file_is_seen_through_the_importer(tmp_path: Path,
                                                              loader: WorkflowLoader) -> None:
    import os

    shared = write(tmp_path / "shared.yaml", "workflow:\n  name: kid\n  steps: [{type: exit}]\n")
    main = write(tmp_path / "main.yaml", """
        name: main
        imports: [shared.yaml]
        steps: [{type: include_workflow, workflow: kid}]
        """)
    assert check(str(main), loader).valid
    write(shared, "workflow:\n  name: kid\n  steps: [{type: exitt}]\n")
    stamp = shared.stat().st_mtime + 5
    os.utime(shared, (stamp, stamp))
    assert [p.message for p in check(str(main), loader).errors] == [
        "imported file 'shared.yaml' is invalid (its errors are listed under its own name)",
        "unknown step type 'exitt' (did you mean 'exit'?)",
    ]
