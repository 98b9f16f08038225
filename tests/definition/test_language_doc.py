"""docs/language.md: every example marked as a whole workflow (```yaml workflow) is valid,
with no warning, through the same loader and validator as `aromcp-workflows validate`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aromcp_workflows.definition import WorkflowLoader, check

DOC = Path(__file__).resolve().parents[2] / "docs" / "language.md"
BLOCKS = re.findall(r"^```yaml workflow\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)


def test_the_reference_has_workflow_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: re.search(r'name: "?([^"\n]+)', b).group(1))
def test_workflow_example_validates(block: str, project: Path, loader: WorkflowLoader) -> None:
    name = re.search(r'^name: "?([^"\n]+?)"?\s*(#.*)?$', block, re.M).group(1)
    path = project / ".aromcp" / "workflows" / f"{name}.yaml"
    path.write_text(block, encoding="utf-8")
    report = check(name, loader)
    assert [str(p) for p in report.errors + report.warnings] == []


def test_every_section_link_resolves() -> None:
    """The contents and cross-references point at headings that exist."""
    text = DOC.read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.*)$", text, re.M)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links - anchors == set()
