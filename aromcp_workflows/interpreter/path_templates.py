"""State paths with templates in them: each inserted value is one key, dots and all.

`raw.results.{{ item }}` with `item = "a.ts"` means the key `a.ts` under `results` (the
seed design writes exactly this), not `results.a.ts`.  So a path template is split at its
own dots and brackets before rendering, each part is rendered on its own, and a rendered
key that holds characters a path gives meaning to is written back in bracket form
(`raw.results["a.ts"]`).  In brackets, a whole template is an index when it gives a whole
number and a key otherwise (`raw.items[{{ index }}].qty`, `raw.by_dept[{{ dept }}]`), and
a quoted key may hold templates (`raw.results['batch_{{ index }}']`).  Parts without a
template are path syntax, kept as written.  A path whose first part is itself a template
(a whole path computed elsewhere) is rendered as plain text, as before.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MARK = "\x00path"
_PLAIN = re.compile(r"[^.\[\]\s\"']+")
_QUOTED = re.compile(r"""(['"])(.*)\1""", re.S)


def path_template(path: Any) -> Any:
    """A path ready to render: unchanged when it holds no template, else its parts."""
    if not isinstance(path, str) or "{{" not in path:
        return path
    head, parts = _parts(path)
    if not parts or "{{" in head:
        return path
    return [_MARK, head, *parts]


def path_value(rendered: Any) -> Any:
    """The path text from what `path_template` gave the engine to render."""
    if not (isinstance(rendered, list) and rendered and rendered[0] == _MARK):
        return rendered
    head, *parts = rendered[1:]
    return str(head) + "".join(_part_text(part) for part in parts)


def _part_text(part: dict[str, Any]) -> str:
    (kind, value), = part.items()
    if kind == "=":  # path syntax as written
        return str(value)
    if kind == "i" and isinstance(value, int) and not isinstance(value, bool):
        return f"[{value}]"
    text = _text(value)
    if kind == "k" and (_PLAIN.fullmatch(text) or re.fullmatch(r"[\w-]+(\[\d+\])+", text)):
        return f".{text}"
    return f'["{text}"]' if '"' not in text and "\\" not in text else f"['{text}']"


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


def _parts(path: str) -> tuple[str, list[dict[str, Any]]]:
    """The head name and the parts after it: `{"k": text}` a dotted key with a template,
    `{"i": template}` a bracket holding one template, `{"q": text}` a quoted bracket key
    with templates, `{"=": text}` path syntax without a template."""
    tokens = _tokens(path)
    head = tokens[0][1] if tokens and tokens[0][0] == "." else ""
    parts: list[dict[str, Any]] = []
    for kind, text in tokens[1:] if head else tokens:
        if "{{" not in text:
            parts.append({"=": f".{text}" if kind == "." else f"[{text}]"})
        elif kind == ".":
            parts.append({"k": text})
        elif (quoted := _QUOTED.fullmatch(text.strip())) is not None:
            parts.append({"q": quoted.group(2)})
        else:
            parts.append({"i": text.strip()})
    return head, parts


def _tokens(path: str) -> list[tuple[str, str]]:
    """Split at dots and brackets that stand outside `{{ … }}` (and outside quotes in a
    bracket): (".", name) and ("[", what the brackets hold)."""
    tokens: list[tuple[str, str]] = []
    kind, buf, depth, quote = ".", [], 0, ""
    i = 0
    while i < len(path):
        for marker, step in (("{{", 1), ("}}", -1)):
            if path.startswith(marker, i) and (step > 0 or depth):
                depth += step
                buf.append(marker)
                i += 2
                break
        else:
            kind, buf, quote = _advance(path[i], kind, buf, quote, depth, tokens)
            i += 1
    if kind != "]":
        tokens.append((kind, "".join(buf)))
    return tokens


def _advance(c: str, kind: str, buf: list[str], quote: str, depth: int,
             tokens: list[tuple[str, str]]) -> tuple[str, list[str], str]:
    """One character of `_tokens`; kind "]" means a bracket just closed."""
    if depth or (kind == "[" and quote and c != quote):
        buf.append(c)
        return kind, buf, quote
    if kind == "[" and c in "'\"":
        buf.append(c)
        return kind, buf, "" if quote else c
    if kind == "[" and c == "]":
        tokens.append(("[", "".join(buf)))
        return "]", [], ""
    if kind in (".", "]") and c in ".[":
        if kind == ".":
            tokens.append((".", "".join(buf)))
        return ("[" if c == "[" else "."), [], ""
    buf.append(c)
    return ("." if kind == "]" else kind), buf, quote
