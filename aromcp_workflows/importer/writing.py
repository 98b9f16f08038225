"""Writing translated files, and checking them with this project's own validator first.

A translation that does not validate here is a translator gap, not a file to hand to a
user: its validation errors become refusals (with the line in the translated text) and
no file is written.  Nothing is written under `--check`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from aromcp_workflows.importer.report import FileResult


def validation_errors(text: str, file_name: str) -> list[str]:
    """This project's validation errors for a translated file (empty when it is valid)."""
    from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check

    with tempfile.TemporaryDirectory(prefix="aromcp-import-") as folder:
        path = Path(folder) / file_name
        path.write_text(text, encoding="utf-8")
        report = check(str(path), WorkflowLoader(WorkflowResolver(project_dir=folder)))
        return [f"translated file line {p.line}: {p.message}" for p in report.errors]


def write_result(result: FileResult, out_dir: Path) -> None:
    """Write the translated text under `out_dir` with the input's file name."""
    if not result.ok or result.text is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / Path(result.source).name
    target.write_text(result.text, encoding="utf-8")
    result.written_to = str(target)
