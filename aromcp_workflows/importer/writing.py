"""Writing translated files, and checking them with this project's own validator first.

A translation that does not validate here is a translator gap, not a file to hand to a
user: its validation errors become refusals (with the line in the translated text) and
no file is written.  Nothing is written under `--check`.
"""

from __future__ import annotations

import os
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


class UnsafeTarget(Exception):
    """The output path is a symbolic link: writing there would write wherever it points."""


def write_result(result: FileResult, out_dir: Path) -> None:
    """Write the translated text under `out_dir` with the input's file name.

    Never through a symbolic link planted where the output goes (a shared folder, another
    local user): such a target is refused.  The text goes to a new temporary file in the
    same folder, renamed over the target, so a link planted after the check is replaced,
    not followed, and a reader never sees half a file."""
    if not result.ok or result.text is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / Path(result.source).name
    if target.is_symlink():
        raise UnsafeTarget(f"import: {target} is a symbolic link (to {os.readlink(target)}); not writing through it. "
                           "Remove the link, or choose another --out folder")
    handle, temporary = tempfile.mkstemp(dir=out_dir, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(result.text)
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    result.written_to = str(target)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current
