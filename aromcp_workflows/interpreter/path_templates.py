"""State paths with templates in them: each inserted value is one key, dots and all.

`raw.results.{{ item }}` with `item = "a.ts"` means the key `a.ts` under `results` (the
seed design writes exactly this), not `results.a.ts`.  So a path template is split at its
own dots before rendering, each segment is rendered on its own, and a rendered segment
that holds characters a path gives meaning to is written back in bracket form
(`raw.results["a.ts"]`).  A path whose first segment is itself a template (a whole path
computed elsewhere) is rendered as plain text, as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MARK = "\x00path"
_PLAIN = re.compile(r"[^.\[\]\s\"']+")


def path_template(path: Any) -> Any:
    """A path ready to render: unchanged when it holds no template, else its segments."""
    if not isinstance(path, str) or "{{" not in path:
        return path
    segments = _split(path)
    if len(segments) < 2 or "{{" in segments[0]:
        return path
    return [_MARK, *segments]


def path_value(rendered: Any) -> Any:
    """The path text from what `path_template` gave the engine to render."""
    if not (isinstance(rendered, list) and rendered and rendered[0] == _MARK):
        return rendered
    head, *rest = rendered[1:]
    parts = [str(head)]
    for segment in rest:
        text = _text(segment)
        if _PLAIN.fullmatch(text) or re.fullmatch(r"[\w-]+(\[\d+\])+", text):
            parts.append(f".{text}")
        elif '"' not in text and "\\" not in text:
            parts.append(f'["{text}"]')
        else:
            parts.append(f"['{text}']")
    return "".join(parts)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def _split(path: str) -> list[str]:
    """Split at dots that stand outside `{{ … }}`."""
    segments: list[str] = []
    current: list[str] = []
    depth = i = 0
    while i < len(path):
        if path.startswith("{{", i):
            depth, chunk = depth + 1, "{{"
        elif path.startswith("}}", i) and depth:
            depth, chunk = depth - 1, "}}"
        else:
            chunk = path[i]
        if chunk == "." and depth == 0:
            segments.append("".join(current))
            current = []
        else:
            current.append(chunk)
        i += len(chunk)
    segments.append("".join(current))
    return segments
