"""Problems found in workflow definitions, with the position they point at.

Every problem a workflow author sees names file, line and column (1-based, as editors
count) so it can be clicked in a terminal: `workflows/x.yaml:12:5: unknown key ...`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from aromcp_workflows.errors import ErrorKind, KindedError

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class DefinitionProblem:
    """One error or warning in a workflow definition."""

    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None
    severity: Severity = "error"

    def location(self) -> str:
        parts = [self.file or "<input>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        if self.file is None and self.line is None:
            return f"{prefix}{self.message}"
        return f"{self.location()}: {prefix}{self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DefinitionError(KindedError):
    """A workflow could not be loaded; carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[DefinitionProblem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid workflow")

    @property
    def errors(self) -> list[DefinitionProblem]:
        return [p for p in self.problems if p.severity == "error"]


class WorkflowNotFound(DefinitionError):
    """No file for a workflow name; the message lists where we looked and what exists."""

    kind: ErrorKind = "not_found"

    def __init__(self, name: str, searched: list[str], available: list[str]):
        self.name = name
        self.searched = searched
        self.available = available
        closest = closest_names(name, available, limit=len(available))
        lines = [f"workflow {name!r} not found; looked in:"]
        lines += [f"  - {path}" for path in searched]
        if closest:
            lines.append("available workflows (closest first): " + ", ".join(closest))
        else:
            lines.append("no workflows are available; create one in ./.aromcp/workflows/")
        super().__init__([DefinitionProblem("\n".join(lines))])


def closest_names(word: str, candidates: Iterable[str], limit: int = 3) -> list[str]:
    """Candidates ordered by similarity to `word` (best first); all of them when limit allows."""
    pool = sorted(set(candidates))
    ranked = sorted(pool, key=lambda c: -difflib.SequenceMatcher(None, word, c).ratio())
    return ranked[:limit]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """` (did you mean 'x'?)` when something is close enough, else empty."""
    matches = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
