"""A test session: which test files to run, and the shared resources their cases use.

Cases run in this process, one after another, each with a `WorkflowService` of its own
over one temporary SQLite store and one V8 (`ExpressionEngine`) shared by all: no MCP,
no process per case.  Each case gets a fresh folder to run in, holding the files of its
`project:`; its workflow still resolves (includes, imports) as in the real project.
Coverage is summed over every case of the session, per workflow file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aromcp_workflows.app import WorkflowService, default_shell_runner
from aromcp_workflows.definition import PROJECT_SUBDIR, DefinitionError, WorkflowLoader, WorkflowResolver
from aromcp_workflows.testing.case import CaseOutcome, run_case
from aromcp_workflows.testing.spec import SUFFIX, Case, TestFile, TestFileError, is_test_file
from aromcp_workflows.testing.stubs import StubShell


class TestCommandError(Exception):
    """What to test cannot be found (exit status 2)."""


def find_test_files(targets: Iterable[str], project_dir: Path | None = None) -> list[Path]:
    """The test files to run: each target is a test file, a folder (its test files, in its
    sub-folders too), a workflow file or a workflow name (the test file beside it); with
    none, every test file of the project's workflow folder."""
    resolver = WorkflowResolver(project_dir=project_dir)
    found: list[Path] = []
    targets = list(targets)
    for target in targets or [str(resolver.project_dir / PROJECT_SUBDIR)]:
        for path in _files_for(target, resolver, explicit=bool(targets)):
            if path not in found:
                found.append(path)
    return found


def _files_for(target: str, resolver: WorkflowResolver, explicit: bool) -> list[Path]:
    path = Path(target)
    if path.is_dir():
        files = sorted(p.resolve() for p in path.rglob(f"*{SUFFIX}") if p.is_file())
        if not files and explicit:
            raise TestCommandError(f"no test files (*{SUFFIX}) in {target}")
        return files
    if is_test_file(path):
        if not path.is_file():
            raise TestCommandError(f"test file {target} not found")
        return [path.resolve()]
    looks_like_a_path = target.endswith((".yaml", ".yml")) or "/" in target or os.sep in target
    if looks_like_a_path and not path.is_file():
        raise TestCommandError(f"{target}: no such file (give a test file, a workflow file, a folder, or a "
                               "workflow's name such as standards:fix)")
    workflow = path if looks_like_a_path else _named(target, resolver)
    beside = workflow.with_name(workflow.name.rsplit(".", 1)[0] + SUFFIX)
    if not beside.is_file():
        raise TestCommandError(f"workflow {target} has no test file: write {beside} (docs/testing.md)")
    return [beside.resolve()]


def _named(name: str, resolver: WorkflowResolver) -> Path:
    try:
        return resolver.find(name).path
    except DefinitionError as exc:
        raise TestCommandError(str(exc)) from None


def project_of(test_file: Path, default: Path) -> Path:
    """The project a test file belongs to: the folder holding its `.aromcp/workflows/`, so
    its workflow's includes resolve as they do there; else `default`."""
    for folder in test_file.resolve().parents:
        if folder.name == PROJECT_SUBDIR.parts[-1] and folder.parent.name == PROJECT_SUBDIR.parts[0]:
            return folder.parent.parent
    return default


@dataclass
class BranchTotal:
    key: str
    label: str
    line: int | None
    covered: bool = False
    ignored: str | None = None  # why (coverage_ignore), when the test file says it cannot be reached


@dataclass
class WorkflowTotal:
    """One workflow's branches over every case that ran it (or a workflow it includes)."""

    workflow: str
    file: str
    branches: dict[str, BranchTotal] = field(default_factory=dict)
    unknown_ignores: list[str] = field(default_factory=list)  # coverage_ignore keys naming no branch

    @property
    def counted(self) -> list[BranchTotal]:
        return [b for b in self.branches.values() if b.ignored is None]

    @property
    def percent(self) -> float:
        counted = self.counted
        return 100.0 * sum(b.covered for b in counted) / len(counted) if counted else 100.0


class TestSession:
    """Runs cases in process with shared V8 and a temporary store; `close()` when done."""

    __test__ = False

    def __init__(self, project_dir: str | Path | None = None, coverage: bool = False):
        self.resolver = WorkflowResolver(project_dir=project_dir)
        self.coverage = coverage
        self._tmp = tempfile.TemporaryDirectory(prefix="aromcp-test-")
        self.root = Path(self._tmp.name)
        self._engine: Any = None
        self._count = 0
        self.totals: dict[tuple[str, str], WorkflowTotal] = {}
        self.ignores: dict[str, dict[str, str]] = {}  # workflow file -> {key: why}
        self._loaders: dict[Path, WorkflowLoader] = {}

    def engine(self) -> Any:
        """The one V8 every case of the session uses (started on first need)."""
        if self._engine is None:
            from aromcp_workflows.expressions import ExpressionEngine

            self._engine = ExpressionEngine()
        return self._engine

    def _loader(self, project_dir: Path) -> WorkflowLoader:
        """One loader per project for the whole session: each workflow file is read and
        parsed once, and again only when it changes."""
        loader = self._loaders.get(project_dir)
        if loader is None:
            loader = self._loaders[project_dir] = WorkflowLoader(WorkflowResolver(project_dir=project_dir),
                                                                 syntax_engine=self.engine)
        return loader

    def load(self, path: Path) -> TestFile:
        from aromcp_workflows.testing.spec import load_test_file

        test_file = load_test_file(path)
        self.ignores[str(test_file.workflow_file.resolve())] = test_file.coverage_ignore
        return test_file

    def run(self, test_file: TestFile, case: Case) -> CaseOutcome:
        """One case, in a folder of its own, with a service over the session's store and V8."""
        self._count += 1
        work = self.root / f"case-{self._count}"
        for name, text in case.project.items():
            target = work / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        work.mkdir(exist_ok=True)
        shell = StubShell(case.shell) if case.shell is not None else None
        service = WorkflowService(store_path=self.root / "instances.db", engine_factory=self.engine,
                                  shell_runner=shell or default_shell_runner, work_dir=work,
                                  loader=self._loader(project_of(test_file.path, self.resolver.project_dir)))
        try:
            outcome = run_case(service, case, test_file.workflow_file, work, shell, self.coverage)
        finally:
            service.close()
        self._add_coverage(outcome)
        return outcome

    def _add_coverage(self, outcome: CaseOutcome) -> None:
        for row in outcome.coverage.workflows if outcome.coverage else []:
            total = self.totals.setdefault((row.file, row.workflow), WorkflowTotal(row.workflow, row.file))
            for branch in row.branches:
                seen = total.branches.setdefault(branch.key, BranchTotal(branch.key, branch.label, branch.line))
                seen.covered = seen.covered or branch.covered

    def coverage_totals(self) -> list[WorkflowTotal]:
        """Every workflow the cases ran, its branches summed, `coverage_ignore` applied."""
        for (file, _name), total in self.totals.items():
            ignore = self.ignores.get(str(Path(file).resolve()), {})
            for key, why in ignore.items():
                if key in total.branches:
                    total.branches[key].ignored = why
                elif key not in total.unknown_ignores:
                    total.unknown_ignores.append(key)
        return sorted(self.totals.values(), key=lambda t: (t.file, t.workflow))

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self._tmp.cleanup()


def load_all(session: TestSession, paths: list[Path]) -> tuple[list[TestFile], list[TestFileError]]:
    """The test files that load, and the problems of those that do not."""
    loaded, failed = [], []
    for path in paths:
        try:
            loaded.append(session.load(path))
        except TestFileError as exc:
            failed.append(exc)
    return loaded, failed
