"""`test --record ID --out FILE`: a finished instance written down as a case that replays it.

The case holds the instance's inputs, every answer its agent gave (keyed by the exact
delivered step id, in order), its server-side commands' results as stubs (`shell:`; so
nothing runs for real), and its final status, state, messages and error as expectations.
Before it is written, the case is run once: a value that differs from run to run (a
timestamp from `now()`, a `uuid()`, the workflow id) is left out of the expectations and
said so, and the case written is one that passes.  An existing test file keeps its cases
and comments; the new case is added at its end.
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import LiteralScalarString

from aromcp_workflows.app import RecordedAnswer, RecordedCommand, Recording
from aromcp_workflows.testing.case import CaseOutcome
from aromcp_workflows.testing.session import TestCommandError, TestSession
from aromcp_workflows.testing.spec import SUFFIX, TestFile, load_test_file, read_case, workflow_stem

FINISHED = ("completed", "failed", "cancelled")
MAX_ROUNDS = 5  # replays that may each leave out what differed from run to run


@dataclass
class Recorded:
    """What was written: the case, what was left out of it and why, and whether it passes."""

    name: str
    out: Path
    left_out: list[str] = field(default_factory=list)
    passes: bool = True
    problems: list[str] = field(default_factory=list)


def case_data(recording: Recording, name: str) -> dict[str, Any]:
    """The case a recording replays, as the test file holds it."""
    expect: dict[str, Any] = {"status": recording.status}
    if recording.state:
        expect["state"] = recording.state
    if recording.messages:
        expect["messages"] = recording.messages
    if recording.error:
        expect["error"] = recording.error
    case: dict[str, Any] = {"name": name}
    if recording.inputs:
        case["inputs"] = recording.inputs
    answers = _answers(recording.answers)
    if answers:
        case["answers"] = answers
    case["shell"] = _stubs(recording.commands)
    case["expect"] = expect
    return case


def _answers(answers: list[RecordedAnswer]) -> dict[str, Any]:
    """Answers by exact delivered step id; a step answered more than once (a rejected answer
    first) gets the list, used in order."""
    keyed: dict[str, list[dict[str, Any]]] = {}
    for answer in answers:
        entry = {"error": answer.error or "failed"} if answer.status == "failed" else {"result": answer.result}
        keyed.setdefault(answer.step_id, []).append(entry)
    return {key: entries[0] if len(entries) == 1 else entries for key, entries in keyed.items()}


def _stubs(commands: list[RecordedCommand]) -> list[dict[str, Any]]:
    """One stub per distinct command, its results in the order they came."""
    stubs: dict[str, dict[str, Any]] = {}
    for command in commands:
        stub = stubs.setdefault(command.command, {"match": _literal_glob(command.command), "results": []})
        result: dict[str, Any] = {"exit_code": command.exit_code}
        if command.stdout:
            result["stdout"] = command.stdout
        if command.stderr:
            result["stderr"] = command.stderr
        stub["results"].append(result)
    return list(stubs.values())


def _literal_glob(text: str) -> str:
    """A glob that matches exactly `text` (`*`, `?` and `[` stand for themselves)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def target_file(recording: Recording, out: Path) -> tuple[Path, str | None]:
    """Where the case goes and the `workflow:` it names (None: the file's own name says it).
    A test file sits beside its workflow."""
    workflow_file = Path(recording.file)
    if not out.name.endswith(SUFFIX):
        raise TestCommandError(f"--out {out} must be a test file named <workflow>{SUFFIX}, beside the workflow "
                         f"(here: {workflow_file.with_name(workflow_file.stem + SUFFIX)})")
    if out.resolve().parent != workflow_file.resolve().parent:
        raise TestCommandError(f"--out {out} must sit beside the workflow file {workflow_file} (a test file runs the "
                         f"workflow next to it): write {workflow_file.with_name(workflow_file.stem + SUFFIX)}")
    return out, None if workflow_stem(out) == workflow_file.stem else workflow_file.stem


def record(session: TestSession, recording: Recording, out: Path, name: str | None) -> Recorded:
    """Write the recording into `out` as a case that passes (see the module's text)."""
    if recording.status not in FINISHED:
        raise TestCommandError(f"instance {recording.workflow_id} is {recording.status}; record a finished one "
                         "(completed, failed or cancelled)")
    out, workflow = target_file(recording, out)
    document = _document(out, workflow)
    name = _unique(name or f"recorded {recording.workflow_id}", document)
    data = case_data(recording, name)
    report = Recorded(name, out)
    outcome = _replay(session, out, workflow, data)
    for _ in range(MAX_ROUNDS):  # each round leaves out what differed, until the case passes
        dropped = [] if outcome.passed or not _ran_alike(outcome, data["expect"]) else \
            _leave_out(data["expect"], outcome)
        if not dropped:
            break
        report.left_out += dropped
        outcome = _replay(session, out, workflow, data)
    if not outcome.passed:
        report.passes = False
        report.problems = [f"{m.path}: expected {m.expected!r}, got {m.actual!r}" for m in outcome.mismatches]
        report.problems += [f"command matched no stub: {c}" for c in outcome.unmatched]
        report.problems += [f"the replay stopped: {outcome.stopped}"] if outcome.stopped else []
    _write(out, document, data)
    return report


def _document(out: Path, workflow: str | None) -> CommentedMap:
    """The test file as it is (checked: an invalid one is not touched), or a new one."""
    if out.is_file():
        load_test_file(out)  # TestFileError names its problems
        document: CommentedMap = YAML(typ="rt").load(out.read_text(encoding="utf-8"))
        return document
    document = CommentedMap()
    if workflow is not None:
        document["workflow"] = workflow
    document["cases"] = []
    return document


def _unique(name: str, document: CommentedMap) -> str:
    taken = {str(case.get("name")) for case in document.get("cases") or [] if isinstance(case, dict)}
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name} ({number})", number + 1
    return candidate


def _replay(session: TestSession, out: Path, workflow: str | None, data: dict[str, Any]) -> CaseOutcome:
    """Run the case as it would be written."""
    case = read_case(out, data)
    workflow_file = out.with_name((workflow or workflow_stem(out)) + ".yaml")
    return session.run(TestFile(out, workflow_file, [case]), case)


def _ran_alike(outcome: CaseOutcome, expect: dict[str, Any]) -> bool:
    """Whether the replay took the recorded run's road (every command stubbed, to its end,
    with the recorded status): only then is what it ended with otherwise run-to-run noise
    (`now()`, `uuid()`) to leave out.  A replay that went elsewhere (a command whose text
    held a secret, written as `***`, matched no stub) says so, and nothing is left out."""
    return not outcome.unmatched and outcome.stopped is None and outcome.status == expect.get("status")


def _leave_out(expect: dict[str, Any], outcome: CaseOutcome) -> list[str]:
    """Drop the expectations that differ from run to run; say which."""
    dropped: list[str] = []
    for mismatch in outcome.mismatches:
        if mismatch.path.startswith("state."):
            key = mismatch.path.split(".")[1]
            if key in expect.get("state", {}):
                del expect["state"][key]
                dropped.append(f"expect.state.{key}")
        elif mismatch.path.startswith("messages[") and "messages" in expect:
            expect["messages"] = [m for m in expect["messages"] if m != mismatch.expected]
            dropped.append(f"expect.messages: {mismatch.expected!r}")
        elif mismatch.path == "error":
            expect.pop("error", None)
            dropped.append("expect.error")
    return dropped


def _block(value: Any) -> Any:
    """Plain data for ruamel, with multi-line text as literal blocks (readable stdout)."""
    if isinstance(value, dict):
        mapping = CommentedMap()
        for key, item in value.items():
            mapping[key] = _block(item)
        return mapping
    if isinstance(value, list):
        return [_block(item) for item in value]
    if isinstance(value, str) and "\n" in value.rstrip("\n"):
        return LiteralScalarString(value)
    return value


def _dump(data: Any) -> str:
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = io.StringIO()
    yaml.dump(_block(data), buffer)
    return buffer.getvalue()


def _write(out: Path, document: CommentedMap, case: dict[str, Any]) -> None:
    """Add the case.  When `cases:` ends the file, its text is appended at the same indent as
    the cases before it, and the rest of the file stays exactly as its author wrote it."""
    cases = document["cases"]
    keys = list(document)
    if not out.is_file() or not cases or keys[-1] != "cases":
        cases.append(_block(case))
        out.write_text(_dump(document), encoding="utf-8")
        return
    text = out.read_text(encoding="utf-8")
    first = text.splitlines()[cases.lc.item(0)[0]]
    indent = " " * (len(first) - len(first.lstrip(" ")))
    added = "".join(f"{indent}{line}\n" if line else "\n" for line in textwrap.dedent(_dump([case])).splitlines())
    out.write_text(text + ("" if text.endswith("\n") else "\n") + "\n" + added, encoding="utf-8")

