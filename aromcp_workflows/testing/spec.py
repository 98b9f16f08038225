"""Test files: `<workflow>.test.yaml` beside the workflow, read into cases.

A test file names its workflow (by default the file name without `.test.yaml`, found
beside it) and lists cases: inputs, answers in exactly the `run --answers` format, shell
stubs (a glob on the rendered command and its consecutive results), files to create for
commands that run for real, and what to expect.  Every problem is reported at once as
`file:line:column: message`, and a file with any problem runs no case.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from aromcp_workflows.definition import DefinitionError, DefinitionProblem, Positions, parse_yaml
from aromcp_workflows.runner import AnswerBook, AnswersFileError

SUFFIX = ".test.yaml"
TOP_KEYS = ("workflow", "cases", "coverage_ignore")
CASE_KEYS = ("name", "inputs", "answers", "shell", "project", "expect")
EXPECT_KEYS = ("status", "state", "messages", "error")
RESULT_KEYS = ("exit_code", "stdout", "stderr")
STATUSES = ("completed", "failed", "waiting", "cancelled", "not_started")
YamlPath = tuple[str | int, ...]


class TestFileError(Exception):
    """A test file that cannot be run; every problem, each at `file:line:column`."""

    __test__ = False  # not a test class, whatever pytest's name pattern says

    def __init__(self, problems: list[DefinitionProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class StubResult:
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True)
class Stub:
    """Commands matching `match` (a glob) get `results` one per call; the last repeats."""

    match: str
    results: tuple[StubResult, ...]


@dataclass(frozen=True)
class Expect:
    status: str | None = None
    state: dict[str, Any] | None = None
    messages: list[str] | None = None
    error: str | None = None


@dataclass
class Case:
    """One case; `line` is where its entry starts (failures point there)."""

    __test__ = False

    name: str
    file: Path
    line: int
    inputs: dict[str, Any] = field(default_factory=dict)
    answers: dict[str, Any] = field(default_factory=dict)
    shell: tuple[Stub, ...] | None = None
    project: dict[str, str] = field(default_factory=dict)
    expect: Expect = field(default_factory=Expect)

    @property
    def node_id(self) -> str:
        """`ci:retry-tests.test.yaml::passes on the second attempt`, as pytest names items."""
        return f"{self.file.name}::{self.name}"


@dataclass
class TestFile:
    """A parsed test file: the workflow file its cases run, the cases, the branches it
    declares unreachable (`coverage_ignore`: key -> why)."""

    __test__ = False

    path: Path
    workflow_file: Path
    cases: list[Case]
    coverage_ignore: dict[str, str] = field(default_factory=dict)


def is_test_file(path: Path) -> bool:
    return path.name.endswith(SUFFIX)


def workflow_stem(path: Path) -> str:
    return path.name[: -len(SUFFIX)]


def load_test_file(path: Path) -> TestFile:
    """Read and check a test file; `TestFileError` lists every problem."""
    shown = str(path)
    try:
        documents = parse_yaml(path.read_bytes(), shown)  # text that is not UTF-8: a problem at its line
    except OSError as exc:
        raise TestFileError([DefinitionProblem(f"cannot read test file: {exc.strerror or exc}", shown)]) from None
    except DefinitionError as exc:
        raise TestFileError(exc.problems) from None
    if len(documents) != 1 or not isinstance(documents[0].data, dict):
        raise TestFileError([DefinitionProblem("a test file is one YAML mapping with `cases:` (docs/testing.md)",
                                               shown, 1, 1)])
    reader = _Reader(path, documents[0].positions)
    test_file = reader.test_file(documents[0].data)
    if reader.problems:
        raise TestFileError(reader.problems)
    return test_file


def read_case(path: Path, data: Any) -> Case:
    """One case from plain data (what `--record` writes), checked as a case of `path`."""
    reader = _Reader(path, Positions(str(path)))
    case = reader.case(data, 0)
    if case is None or reader.problems:
        raise TestFileError(reader.problems or [DefinitionProblem("not a case", str(path))])
    return case


class _Reader:
    """Checks the parsed data piece by piece, collecting problems with their positions."""

    def __init__(self, path: Path, positions: Positions):
        self.path = path
        self.positions = positions
        self.problems: list[DefinitionProblem] = []

    def problem(self, where: YamlPath, message: str) -> None:
        self.problems.append(self.positions.problem(where, message))

    def keys(self, data: dict[str, Any], where: YamlPath, allowed: tuple[str, ...], what: str) -> None:
        for key in data:
            if key not in allowed:
                self.problem((*where, key), f"unknown key {key!r} in {what}; allowed: {', '.join(allowed)}")

    def mapping(self, value: Any, where: YamlPath, what: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.problem(where, f"{what} must be a mapping, not {_kind(value)}")
            return {}
        return value

    def test_file(self, data: dict[str, Any]) -> TestFile:
        self.keys(data, (), TOP_KEYS, "a test file")
        workflow_file = self.workflow_file(data.get("workflow"))
        cases = data.get("cases")
        if not isinstance(cases, list) or not cases:
            self.problem(("cases",) if "cases" in data else (), "a test file needs `cases:`, a list of at least "
                         "one case (name, inputs, answers, shell, expect)")
            cases = []
        found = [self.case(item, index) for index, item in enumerate(cases)]
        self.unique_names(found)
        ignore = self.mapping(data.get("coverage_ignore"), ("coverage_ignore",), "coverage_ignore")
        return TestFile(self.path, workflow_file, [c for c in found if c is not None],
                        {str(k): str(v) for k, v in ignore.items()})

    def workflow_file(self, name: Any) -> Path:
        """The workflow beside the test file: `<workflow>.yaml`, named by `workflow:` or by
        the test file's own name."""
        if name is not None and not isinstance(name, str):
            self.problem(("workflow",), f"workflow must be a workflow name, not {_kind(name)}")
            name = None
        stem = name or workflow_stem(self.path)
        target = self.path.parent / f"{stem}.yaml"
        if "/" in stem or "\\" in stem or ".." in stem:
            self.problem(("workflow",), f"workflow {stem!r} must be a name of a workflow beside this file")
        elif not target.is_file():
            self.problem(("workflow",) if name else (),
                         f"no workflow {target.name} beside this test file; a test file sits next to its "
                         f"workflow (<name>.test.yaml beside <name>.yaml), or names it with `workflow:`")
        return target

    def case(self, item: Any, index: int) -> Case | None:
        where: YamlPath = ("cases", index)
        if not isinstance(item, dict):
            self.problem(where, f"a case must be a mapping (name, inputs, answers, shell, expect), not {_kind(item)}")
            return None
        self.keys(item, where, CASE_KEYS, "a case")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            self.problem((*where, "name") if "name" in item else where, "a case needs a `name` (text)")
            name = f"case {index + 1}"
        line = self.positions.locate(where)[0] or 1
        return Case(name=name, file=self.path, line=line,
                    inputs=self.mapping(item.get("inputs"), (*where, "inputs"), "inputs"),
                    answers=self.answers(item.get("answers"), (*where, "answers")),
                    shell=self.stubs(item["shell"], (*where, "shell")) if "shell" in item else None,
                    project=self.project(item.get("project"), (*where, "project")),
                    expect=self.expect(item.get("expect"), (*where, "expect")))

    def unique_names(self, cases: list[Case | None]) -> None:
        seen: dict[str, int] = {}
        for index, case in enumerate(cases):
            if case is None:
                continue
            if case.name in seen:
                self.problem(("cases", index, "name"), f"another case is named {case.name!r} (line "
                             f"{seen[case.name]}); case names must be unique in a file")
            seen.setdefault(case.name, case.line)

    def answers(self, value: Any, where: YamlPath) -> dict[str, Any]:
        data = self.mapping(value, where, "answers")
        try:
            AnswerBook(data, origin="answers")
        except AnswersFileError as exc:
            self.problem(where, str(exc))
        return data

    def stubs(self, value: Any, where: YamlPath) -> tuple[Stub, ...]:
        if not isinstance(value, list):
            self.problem(where, "shell must be a list of stubs ({match: GLOB, results: [{exit_code, stdout, "
                         "stderr}, ...]}); an empty list runs no command at all")
            return ()
        return tuple(stub for index, item in enumerate(value)
                     if (stub := self.stub(item, (*where, index))) is not None)

    def stub(self, item: Any, where: YamlPath) -> Stub | None:
        if not isinstance(item, dict) or not isinstance(item.get("match"), str):
            self.problem(where, "a stub needs `match:` (a glob on the rendered command) and `results:`")
            return None
        self.keys(item, where, ("match", "results"), "a stub")
        results = item.get("results", [{}])
        if isinstance(results, dict):
            results = [results]
        if not isinstance(results, list) or not results:
            self.problem((*where, "results"), "results must be a list of {exit_code, stdout, stderr} (one per "
                         "call; the last repeats)")
            return None
        return Stub(item["match"], tuple(self.result(r, (*where, "results", i)) for i, r in enumerate(results)))

    def result(self, item: Any, where: YamlPath) -> StubResult:
        data = self.mapping(item, where, "a stub result")
        self.keys(data, where, RESULT_KEYS, "a stub result")
        code = data.get("exit_code", 0)
        if not isinstance(code, int) or isinstance(code, bool):
            self.problem((*where, "exit_code"), f"exit_code must be a whole number, not {_kind(code)}")
            code = 1
        texts = {k: data.get(k, "") for k in ("stdout", "stderr")}
        for key, text in texts.items():
            if not isinstance(text, str):
                self.problem((*where, key), f"{key} must be text, not {_kind(text)}")
        return StubResult(code, str(texts["stdout"]), str(texts["stderr"]))

    def project(self, value: Any, where: YamlPath) -> dict[str, str]:
        files = self.mapping(value, where, "project")
        for name, text in files.items():
            relative = PurePosixPath(str(name))
            if relative.is_absolute() or ".." in relative.parts or not relative.parts:
                self.problem((*where, name), f"project file {name!r} must be a relative path inside the project")
            if not isinstance(text, str):
                self.problem((*where, name), f"the content of project file {name!r} must be text, not {_kind(text)}")
        return {str(k): str(v) for k, v in files.items()}

    def expect(self, value: Any, where: YamlPath) -> Expect:
        data = self.mapping(value, where, "expect")
        self.keys(data, where, EXPECT_KEYS, "expect")
        status = data.get("status")
        if status is not None and status not in STATUSES:
            self.problem((*where, "status"), f"expect.status {status!r} is not one of {', '.join(STATUSES)}")
        state = data.get("state")
        if state is not None and not isinstance(state, dict):
            self.problem((*where, "state"), "expect.state must be a mapping of state names to values")
        messages = data.get("messages")
        if messages is not None and (not isinstance(messages, list) or not all(isinstance(m, str) for m in messages)):
            self.problem((*where, "messages"), "expect.messages must be a list of texts (in order)")
        error = data.get("error")
        if error is not None and not isinstance(error, str):
            self.problem((*where, "error"), "expect.error must be text (a part of the failure's message)")
        return Expect(status, state if isinstance(state, dict) else None,
                      messages if isinstance(messages, list) else None, error if isinstance(error, str) else None)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", type(None): "empty"}.get(
        type(value), type(value).__name__)
