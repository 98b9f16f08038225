"""Whatever an author types, validation answers with problems, never a traceback.

Hypothesis mutates the shipped workflows (deleting, duplicating and re-indenting lines,
inserting YAML punctuation) and also feeds small YAML-ish texts; `check` must return a
report whose problems all carry a file, and valid reports a bundle.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from definition_helpers import BUILTIN_DIR
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check
from aromcp_workflows.definition.resolver import is_workflow_file_name

SOURCES = [p.read_text(encoding="utf-8") for p in sorted(BUILTIN_DIR.glob("*.yaml")) if is_workflow_file_name(p.name)]
PUNCTUATION = ["{", "}", "[", "]", ":", "- ", "'", '"', "\t", "&a ", "*a", "<<: *a", "{{", "}}",
               "!!int x", "? ", "|", ">", "#", "---", "\n", "  ", "\\", "%", "@", "`", "null", "~"]

WORK = Path(tempfile.mkdtemp(prefix="aromcp-fuzz-"))
LOADER = WorkflowLoader(WorkflowResolver(project_dir=WORK, home=WORK))


def assert_answers(text: str) -> None:
    path = WORK / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    LOADER._cache.clear()
    report = check(str(path), LOADER)
    for problem in report.errors + report.warnings:
        assert problem.file and problem.message and "Traceback" not in problem.message
        assert not problem.message.startswith("internal error"), problem
    assert report.valid == (not report.errors)
    if report.valid:
        assert report.bundle is not None


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(SOURCES)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "duplicate", "indent", "dedent", "insert"]))
        if action == "delete":
            del lines[at]
        elif action == "duplicate":
            lines.insert(at, lines[at])
        elif action == "indent":
            lines[at] = "  " + lines[at]
        elif action == "dedent":
            lines[at] = lines[at].removeprefix("  ")
        else:
            column = draw(st.integers(0, len(lines[at])))
            piece = draw(st.sampled_from(PUNCTUATION))
            lines[at] = lines[at][:column] + piece + lines[at][column:]
    return "\n".join(lines) + "\n"


SETTINGS = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(mutated())
def test_mutated_shipped_workflows_never_crash(text: str) -> None:
    assert_answers(text)


@SETTINGS
@given(st.lists(st.sampled_from(PUNCTUATION + ["name: x", "steps:", "type: exit", "a", "1"]),
                max_size=12).map("".join))
def test_yaml_shaped_noise_never_crashes(text: str) -> None:
    assert_answers(text)
