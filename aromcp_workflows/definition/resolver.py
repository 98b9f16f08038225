"""Where workflows live: name → file, in the order project, global, built-in.

A name is checked before any file is touched, so `../../etc/passwd` never reaches the
file system.  The project root is `--project-dir`, else `AROMCP_PROJECT_DIR`, else the
current directory.
"""

from __future__ import annotations

import builtins
import os
import re
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Literal

from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem, WorkflowNotFound

Source = Literal["project", "global", "builtin", "file"]
VALID_NAME = re.compile(r"^[A-Za-z0-9_\-][A-Za-z0-9_:\-]*$")
PROJECT_SUBDIR = Path(".aromcp") / "workflows"
TEST_FILE_SUFFIX = ".test.yaml"  # a workflow's test file, beside it: never a workflow itself
MAX_NAME = 200  # longer names cannot be file names on common file systems (255 bytes)


@dataclass(frozen=True)
class WorkflowLocation:
    name: str
    path: Path
    source: Source


def builtin_workflow_dir() -> Path:
    """Built-ins ship inside the wheel; in a source checkout they are the top-level folder."""
    packaged = Path(__file__).resolve().parent.parent / "_data" / "workflows"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent.parent / "workflows"


def project_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    chosen = explicit or os.environ.get("AROMCP_PROJECT_DIR") or os.getcwd()
    return Path(chosen).expanduser().resolve()


def check_name(name: str) -> None:
    """Refuse names that could point outside the workflow directories."""
    reason = name_problem(name)
    if reason:
        raise DefinitionError(
            [DefinitionProblem(f"invalid workflow name {name!r}: {reason}; a name looks like 'standards:fix'")]
        )


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a workflow name (shared by lookups and by the `name:` key)."""
    reason = None
    if not name:
        reason = "it is empty"
    elif len(name) > MAX_NAME:
        reason = f"it is {len(name):,} characters long; a name has at most {MAX_NAME}"
    elif "/" in name or "\\" in name:
        reason = "it contains a path separator"
    elif ".." in name:
        reason = "it contains '..'"
    elif name.endswith((".yaml", ".yml")):
        reason = "drop the file extension (or pass a path to the file)"
    elif PureWindowsPath(name).drive:
        reason = "it starts like a Windows drive ('C:'); use a namespace of two letters or more"
    elif not VALID_NAME.match(name):
        reason = "only letters, digits, '-', '_' and ':' are allowed, and not ':' first"
    return reason


class WorkflowResolver:
    """Finds workflow files by name and lists what exists, honouring shadowing."""

    def __init__(
        self,
        project_dir: str | os.PathLike[str] | None = None,
        home: str | os.PathLike[str] | None = None,
        builtin_dir: Path | None = None,
    ):
        self.project_dir = project_root(project_dir)
        self.home = Path(home).expanduser() if home else Path.home()
        self.builtin_dir = builtin_dir or builtin_workflow_dir()

    def search_dirs(self, include_global: bool = True) -> list[tuple[Source, Path]]:
        dirs: list[tuple[Source, Path]] = [("project", self.project_dir / PROJECT_SUBDIR)]
        if include_global:
            dirs.append(("global", self.home / PROJECT_SUBDIR))
        dirs.append(("builtin", self.builtin_dir))
        return dirs

    def find(self, name: str) -> WorkflowLocation:
        check_name(name)
        for source, directory in self.search_dirs():
            candidate = directory / f"{name}.yaml"
            if candidate.is_file():
                return WorkflowLocation(name, candidate, source)
        searched = [str(d / f"{name}.yaml") for _, d in self.search_dirs()]
        raise WorkflowNotFound(name, searched, [w.name for w in self.list()])

    def list(self, include_global: bool = True) -> list[WorkflowLocation]:
        """Every reachable workflow once; a project file shadows a global or built-in one."""
        found: dict[str, WorkflowLocation] = {}
        for source, directory in self.search_dirs(include_global):
            for name in _yaml_files(directory):
                stem = name[:-len(".yaml")]
                if VALID_NAME.match(stem):
                    found.setdefault(stem, WorkflowLocation(stem, directory / name, source))
        return sorted(found.values(), key=lambda w: w.name)

    def source_of(self, path: Path) -> Source:
        """Which workflow directory a file sits directly in ("file" when none)."""
        for source, directory in self.search_dirs():
            if path.parent == directory.resolve():
                return source
        return "file"

    def roots(self) -> builtins.list[Path]:
        """Directories that imports may reach into."""
        return [d.resolve() for _, d in self.search_dirs()]


def is_workflow_file_name(name: str) -> bool:
    """`x.yaml` is a workflow file; `x.test.yaml` is the test file of workflow `x`."""
    return name.endswith(".yaml") and not name.endswith(TEST_FILE_SUFFIX)


def _yaml_files(directory: Path) -> builtins.list[str]:
    """The names of the workflow files (`*.yaml`, test files left out) in `directory` (none
    when it is missing), sorted.  One `scandir`: an entry's type comes with the listing,
    where a glob and an `is_file` per file cost a `stat` each (`workflow_list` runs this
    on every call)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if is_workflow_file_name(e.name) and e.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []
