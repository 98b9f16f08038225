"""What `aromcp-workflows test` prints, in pytest's manner, and the JUnit XML it writes.

One line per case (`file::name PASSED`); for each failure, the case's `file:line`, each
expectation not met as `path: expected X, got Y`, and the last steps of its history; a
summary line; with `--coverage`, branches covered out of all per workflow and each one
not covered at `file:line`.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, TextIO

from aromcp_workflows.testing.case import CaseOutcome
from aromcp_workflows.testing.expect import MISSING, Mismatch
from aromcp_workflows.testing.session import WorkflowTotal

WIDTH = 88


class ReportStream:
    """Where `test` prints: stdout that outlives its reader.  `test`'s exit status is its
    verdict, so a reader that stops reading (`aromcp-workflows test | head -1`) must not cut
    the run short, as it may a listing's: from the first broken pipe on, the rest of the
    report goes to /dev/null, and the cases still run and decide the status."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        try:
            self.stream.write(text)
        except BrokenPipeError:
            self._discard()

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._discard()

    def _discard(self) -> None:
        """Point the stream's file at /dev/null: what is still buffered, what is written next,
        and the flush at exit go nowhere instead of failing again."""
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())
        finally:
            os.close(devnull)


def shown_path(path: str | Path) -> str:
    """A path relative to the current folder when it is under it: shorter, still clickable."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def value(data: Any) -> str:
    if data is MISSING:
        return "(missing)"
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text if len(text) <= 300 else text[:297] + "..."


def case_line(outcome: CaseOutcome) -> str:
    return f"{shown_path(outcome.case.file)}::{outcome.case.name} {'PASSED' if outcome.passed else 'FAILED'}"


def failure_text(outcome: CaseOutcome) -> list[str]:
    """Why one case failed: where it is, each expectation not met, the end of its history."""
    case = outcome.case
    title = f" {case.node_id} "
    lines = [title.center(WIDTH, "_"), f"{shown_path(case.file)}:{case.line}: case {case.name!r}"]
    for command in outcome.unmatched:
        lines.append(f"  command matched no stub: {command}  (add a `shell:` entry whose match fits it)")
    lines += [_mismatch(m) for m in outcome.mismatches]
    if outcome.stopped:
        lines.append(f"  stopped: {outcome.stopped}")
    if outcome.error and not any(m.path == "error" for m in outcome.mismatches):
        lines.append(f"  workflow error: {outcome.error}")
    if outcome.history:
        lines.append("  last steps:")
        lines += [f"    {_history_entry(entry)}" for entry in outcome.history]
    return lines


def _mismatch(mismatch: Mismatch) -> str:
    if mismatch.path.startswith("messages["):
        return (f"  {mismatch.path}: expected {value(mismatch.expected)} ({mismatch.note}); "
                f"messages shown: {value(mismatch.actual)}")
    note = f" ({mismatch.note})" if mismatch.note else ""
    return f"  {mismatch.path}: expected {value(mismatch.expected)}, got {value(mismatch.actual)}{note}"


def _history_entry(entry: dict[str, Any]) -> str:
    task = f" [{entry['task_id']}]" if entry.get("task_id") else ""
    extra = ""
    if entry.get("branch"):
        extra = f" → {entry['branch']}"
    if entry.get("error"):
        extra += f"  {entry['error']}"
    elif entry.get("message") is not None:
        extra += f"  {entry['message']!r}"
    return f"{entry.get('status', '?'):<8} {entry.get('step_id')}{task} ({entry.get('type') or '?'}){extra}"


def summary_line(outcomes: list[CaseOutcome], errors: int, seconds: float) -> str:
    failed = sum(not o.passed for o in outcomes)
    parts = [f"{failed} failed"] if failed else []
    parts.append(f"{len(outcomes) - failed} passed")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''}")
    return f" {', '.join(parts)} in {seconds:.2f}s ".center(WIDTH, "=")


def coverage_lines(totals: list[WorkflowTotal]) -> list[str]:
    lines = [" branch coverage ".center(WIDTH, "-")]
    for total in totals:
        counted = total.counted
        hit = sum(b.covered for b in counted)
        ignored = len(total.branches) - len(counted)
        note = f", {ignored} ignored (coverage_ignore)" if ignored else ""
        lines.append(f"{total.workflow:<32} {hit}/{len(counted)} branches ({total.percent:.0f}%){note}  "
                     f"{shown_path(total.file)}")
        for branch in counted:
            if not branch.covered:
                where = f"{shown_path(total.file)}:{branch.line}" if branch.line else shown_path(total.file)
                lines.append(f"    not covered: {where}: {branch.label}  [{branch.key}]")
        for branch in total.branches.values():
            if branch.ignored is not None and branch.covered:
                lines.append(f"    note: [{branch.key}] is in coverage_ignore but a case covers it; remove it there")
        for key in total.unknown_ignores:
            lines.append(f"    note: coverage_ignore names [{key}], which is no branch of {total.workflow}")
    return lines


def print_lines(lines: list[str], out: ReportStream) -> None:
    for line in lines:
        out.write(line + "\n")


def write_junit(path: Path, outcomes: list[CaseOutcome], seconds: float) -> None:
    """JUnit XML, one testcase per case (classname: its test file), as CI systems read it."""
    suite = ET.Element("testsuite", name="aromcp-workflows", tests=str(len(outcomes)),
                       failures=str(sum(not o.passed for o in outcomes)), errors="0", skipped="0",
                       time=f"{seconds:.3f}")
    for outcome in outcomes:
        case = outcome.case
        element = ET.SubElement(suite, "testcase", classname=case.file.name, name=case.name,
                                file=shown_path(case.file), line=str(case.line), time=f"{outcome.duration_s:.3f}")
        if not outcome.passed:
            details = failure_text(outcome)
            failure = ET.SubElement(element, "failure", message=details[2].strip() if len(details) > 2 else "failed")
            failure.text = "\n".join(details[1:])
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + os.linesep,
                    encoding="utf-8")


def keyword_matches(expression: str, node_id: str) -> bool:
    """pytest's `-k` in its common forms: words matched case-insensitively as parts of the
    case's id (`file::name`), joined by `and`, `or`, `not` (no parentheses)."""
    text = node_id.lower()
    for alternative in expression.lower().split(" or "):
        terms = [t.strip() for t in alternative.split(" and ") if t.strip()]
        if all((t[4:].strip() not in text) if t.startswith("not ") else (t in text) for t in terms):
            return True
    return False
