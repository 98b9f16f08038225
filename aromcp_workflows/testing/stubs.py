"""Shell stubs: a case's commands answered from its `shell:` list instead of run.

A stub's `match` is a glob (`fnmatch`, case-sensitive) on the command as rendered; the
first stub that matches answers, with its results one per call and the last repeated.
The same stubs answer server-side `shell_command` steps (as the server's command runner,
the `Driver`'s `shell_runner`) and `agent_shell_command` steps (as the agent would run
them).  A command that no stub matches is remembered and fails the case, named.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Sequence
from typing import Any

from aromcp_workflows.interpreter import ShellRequest, ShellResult
from aromcp_workflows.shell import Periodic, ProgressCallback
from aromcp_workflows.testing.spec import Stub, StubResult

NO_STUB_EXIT_CODE = 127  # what a shell answers for a command it cannot find


class StubShell:
    """One case's stubs and what they were asked."""

    def __init__(self, stubs: Sequence[Stub]):
        self.stubs = list(stubs)
        self.calls = [0] * len(self.stubs)
        self.unmatched: list[str] = []
        self._guard = threading.Lock()

    def answer(self, command: str) -> StubResult | None:
        """The next result of the first stub matching `command` (None: no stub matches)."""
        with self._guard:
            for index, stub in enumerate(self.stubs):
                if fnmatch.fnmatchcase(command, stub.match):
                    result = stub.results[min(self.calls[index], len(stub.results) - 1)]
                    self.calls[index] += 1
                    return result
            self.unmatched.append(command)
            return None

    def run(self, command: str) -> ShellResult:
        found = self.answer(command)
        if found is None:
            return ShellResult("", f"no stub of this test case matches the command: {command}",
                               NO_STUB_EXIT_CODE, 0.0)
        return ShellResult(found.stdout, found.stderr, found.exit_code, 0.0)

    def __call__(self, request: ShellRequest, progress: ProgressCallback | None,
                 periodic: Sequence[Periodic] = (), run_dir: Any = None, meta: Any = None) -> ShellResult:
        """The server's command runner during a case (`Driver.shell_runner`): a stub answers
        at once, so it needs no run directory (`run_dir`, `meta` are not used)."""
        return self.run(request.command)
