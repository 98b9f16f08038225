"""Command results and output parsing, shared by server-side and agent-side shell steps.

`ShellResult` is what the instance layer hands back after running a command (or failing
to start it); `parse_output` reads output as the step's `output_format` says
(`text|lines|json|key_value`).  Nothing here runs a process.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class ShellResult:
    stdout: str
    stderr: str
    exit_code: int
    duration_ms: float
    timed_out: bool = False
    truncated: bool = False
    spawn_error: str | None = None  # set when the command could not be started at all

    def as_result(self, output: Any) -> dict[str, Any]:
        return {"stdout": self.stdout, "stderr": self.stderr, "exit_code": self.exit_code,
                "output": output}


class OutputFormatError(ValueError):
    """Output that does not parse as the step's `output_format` says it should."""


def parse_output(text: str, output_format: str) -> Any:
    """Parse command output as the step declares; `OutputFormatError` says why it failed."""
    if output_format == "lines":
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [line.rstrip("\r") for line in lines]
    if output_format == "json":
        try:
            return json.loads(text) if text.strip() else None
        except json.JSONDecodeError as exc:
            raise OutputFormatError(f"output is not valid JSON ({exc.msg} at line {exc.lineno} "
                                    f"column {exc.colno})") from None
    if output_format == "key_value":
        pairs: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            key, sep, value = _split_pair(line)
            if not sep:
                raise OutputFormatError(f"output line {line!r} is not 'key=value' or 'key: value'")
            pairs[key.strip()] = value.strip()
        return pairs
    return text[:-1] if text.endswith("\n") else text


def _split_pair(line: str) -> tuple[str, str, str]:
    equals, colon = line.find("="), line.find(":")
    if equals >= 0 and (colon < 0 or equals < colon):
        return line.partition("=")
    return line.partition(":")


def stderr_tail(text: str, limit: int = 400) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]
