"""What the importer tells its user: each rewrite, each refusal, one result per file.

A rewrite is printed `file:line: old → new` (with a note when AroMCP's meaning differs
from this project's, or is ambiguous); a refusal `file:line: reason`.  A file with any
refusal gets no output file, so nothing half-translated is ever written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rewrite:
    """One change: where (1-based line of the original), from what, to what, and why."""

    line: int
    old: str
    new: str
    note: str = ""

    def render(self, file: str) -> str:
        text = f"{file}:{self.line}: {self.old} → {self.new}"
        return f"{text}  ({self.note})" if self.note else text


@dataclass(frozen=True)
class Refusal:
    """A part that cannot be translated: where and why (and what to do instead)."""

    line: int
    reason: str

    def render(self, file: str) -> str:
        return f"{file}:{self.line}: {self.reason}"


@dataclass
class Notes:
    """The collector every rule writes to while one file is translated."""

    rewrites: list[Rewrite] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)

    def rewrite(self, line: int, old: str, new: str, note: str = "") -> None:
        entry = Rewrite(line, _short(old), _short(new), note)
        if entry not in self.rewrites:
            self.rewrites.append(entry)

    def refuse(self, line: int, reason: str) -> None:
        self.refusals.append(Refusal(line, reason))


@dataclass
class FileResult:
    """The outcome for one input file; `text` is the translated YAML (None if refused)."""

    source: str
    notes: Notes
    text: str | None
    already_ours: bool = False
    written_to: str | None = None
    aromcp_hints: list[Rewrite] = field(default_factory=list)  # valid here, but AroMCP-looking

    @property
    def ok(self) -> bool:
        return not self.notes.refusals and self.text is not None

    def lines(self) -> list[str]:
        """The report lines for this file: its refusals if any, else its rewrites, in file order."""
        if self.notes.refusals:  # the rewrites do not matter: nothing is written
            return [r.render(self.source) for r in sorted(self.notes.refusals, key=lambda r: r.line)]
        out = [r.render(self.source) for r in sorted(self.notes.rewrites, key=lambda r: r.line)]
        if self.already_ours:
            out.append(f"{self.source}: already valid in this project's language; copied unchanged")
        for hint in self.aromcp_hints:
            out.append(f"{self.source}:{hint.line}: note: '{hint.old}' is plain text here; AroMCP reads it as "
                       f"{hint.new}. If this is an AroMCP file, import it with --assume-aromcp")
        return out


def _short(text: str, limit: int = 90) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def shown(value: object) -> str:
    """A YAML value as the author wrote it, for a refusal: `"x"`, `null`, `2.5`, `[1]`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _short(json.dumps(value, ensure_ascii=False), 40)
    return _short(str(value), 40)
