"""pytest collects workflow test files: each case of a `<workflow>.test.yaml` is one item.

Registered through the `pytest11` entry point, so a project that runs pytest gets its
workflow tests with nothing to configure: pytest finds `*.test.yaml` files where it
looks for tests (`testpaths`, or the folders given), and looks into `.aromcp/` too, which
its default `norecursedirs` would skip.  The cases of one pytest session share one V8 and
one temporary store, as `aromcp-workflows test` does.  A test file with problems is a
collection error that lists them as `file:line:column: message`.

This module is imported by every pytest run in an environment that has the package, so
it imports nothing heavy until a test file is found.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from aromcp_workflows.testing.case import CaseOutcome
    from aromcp_workflows.testing.session import TestSession
    from aromcp_workflows.testing.spec import Case, TestFile

_SESSION = pytest.StashKey["TestSession"]()
SUFFIX = ".test.yaml"


@pytest.hookimpl(tryfirst=True)
def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Look into `.aromcp/` (project workflows live in `.aromcp/workflows/`), which
    `norecursedirs`' `.*` would leave out; anything else is pytest's own decision."""
    if collection_path.name == ".aromcp" and collection_path.is_dir():
        return False
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.name.endswith(SUFFIX):
        return WorkflowTestFile.from_parent(parent, path=file_path)
    return None


def _session(config: pytest.Config) -> TestSession:
    """The session's shared runner (one V8, one store), made on the first case."""
    session = config.stash.get(_SESSION, None)
    if session is None:
        from aromcp_workflows.testing.session import TestSession

        session = config.stash[_SESSION] = TestSession(config.rootpath)
    return session


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None:
        session.close()


class WorkflowTestFile(pytest.File):
    """A `<workflow>.test.yaml` file: its cases are the items."""

    def collect(self) -> Any:
        from aromcp_workflows.testing.spec import TestFileError

        try:
            test_file = _session(self.config).load(self.path)
        except TestFileError as exc:
            raise self.CollectError(str(exc)) from None
        for case in test_file.cases:
            yield WorkflowCase.from_parent(self, name=case.name, case=case, test_file=test_file)


class CaseFailed(Exception):
    def __init__(self, outcome: CaseOutcome):
        super().__init__(outcome.case.name)
        self.outcome = outcome


class WorkflowCase(pytest.Item):
    """One case of a workflow test file."""

    def __init__(self, *, case: Case, test_file: TestFile, **kwargs: Any):
        super().__init__(**kwargs)
        self.case = case
        self.test_file = test_file

    def runtest(self) -> None:
        outcome = _session(self.config).run(self.test_file, self.case)
        if not outcome.passed:
            raise CaseFailed(outcome)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, CaseFailed):
            from aromcp_workflows.testing.report import failure_text

            return "\n".join(failure_text(excinfo.value.outcome)[1:])
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.line - 1, f"workflow case {self.case.name}"
