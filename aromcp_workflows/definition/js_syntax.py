"""JavaScript syntax errors of a workflow, found by V8 itself before anything runs.

Our own lexer catches unbalanced brackets and unterminated strings; only V8 knows the
whole grammar (`a +`, `x => `, `if` in an expression).  Every expression of a file —
template parts, filter arguments, bare conditions, transforms, validates — is compiled
(never run) in one engine crossing, with the same wrapping the engine uses at run time,
so validation and execution agree.  Results are cached per source: validating at every
`workflow_start` crosses into V8 only for sources not seen before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

from aromcp_workflows.definition.scopes import Site, part_label
from aromcp_workflows.definition.yaml_source import NodePath

if TYPE_CHECKING:
    from aromcp_workflows.expressions import ExpressionEngine

Mode = Literal["expr", "transform"]
_CACHE_LIMIT = 20_000
_cache: dict[tuple[str, Mode], str | None] = {}
_lock = threading.Lock()
_engine: ExpressionEngine | None = None


def syntax_problems(sites: Iterable[Site], engine: Callable[[], Any] | None = None) -> list[tuple[NodePath, str]]:
    """(path, message) for every site whose JavaScript V8 refuses to compile.  `engine`
    gives the engine to compile in (a server's, whose V8 runs in its child processes);
    without it, one V8 in this process (mapping V8 into a server would cost it ~50 MB)."""
    found: list[tuple[NodePath, str, str, Mode]] = []  # path, label, source, mode
    for site in sites:
        found.extend(_sources(site))
    if not found:
        return []
    errors = _check({(source, mode) for _, _, source, mode in found}, engine)
    problems = []
    for path, label, source, mode in found:
        error = errors.get((source, mode))
        if error:
            problems.append((path, f"{label} is not valid JavaScript: {_friendly(error, source)}"))
    return problems


def _sources(site: Site) -> list[tuple[NodePath, str, str, Mode]]:
    key = str(site.path[-1])
    if site.kind in ("transform", "validate") and not _lexes(site.source):
        return []
    if site.kind == "transform":
        return [(site.path, f"transform of computed field {site.path[-2]!r}", site.source, "transform")]
    if site.kind == "validate":
        return [(site.path, f"validate of computed field {site.path[-2]!r}", site.source, "expr")]
    if site.kind == "expression":
        return [(site.path, f"{key} {site.source.strip()!r}", site.source, "expr")] \
            if _lexes(site.source) else []
    return [(site.path, label, source, "expr") for label, source in _template_parts(site.source)]


def _template_parts(text: str) -> list[tuple[str, str]]:
    """(label, JS source) of each expression and filter argument a template holds."""
    from aromcp_workflows.expressions import ExpressionError, classify, parse_template

    try:
        template = parse_template(text)
    except ExpressionError:
        return []  # reported by the template checks
    parts: list[tuple[str, str]] = []
    for part in template.expressions:
        label = part_label(part)
        for source in (part.source, *(f.arg for f in part.filters if f.arg is not None)):
            if not source.strip() or "{{" in source or not _lexes(source):
                continue
            try:
                if classify(source)[0] in ("literal", "path"):
                    continue  # resolved in Python, never compiled
            except ExpressionError:
                pass
            parts.append((label, source))
    return parts


def _lexes(source: str) -> bool:
    """Sources our lexer refuses are reported by the existing checks, with its message."""
    from aromcp_workflows.expressions import ExpressionError, reads_of

    try:
        reads_of(source)
    except ExpressionError:
        return False
    return True


def _check(sources: set[tuple[str, Mode]], engine: Callable[[], Any] | None) -> dict[tuple[str, Mode], str | None]:
    with _lock:
        missing = sorted(s for s in sources if s not in _cache)
        if missing:
            try:
                answers = (engine() if engine is not None else _get_engine()).syntax_errors(missing)
            except Exception:  # V8 unavailable: the run-time checks still apply
                return {}
            if len(_cache) + len(missing) > _CACHE_LIMIT:
                _cache.clear()
            _cache.update(zip(missing, answers, strict=True))
        return {s: _cache.get(s) for s in sources}


def _get_engine() -> ExpressionEngine:
    """One engine for validation, in this process: it compiles and never runs user code,
    so the crash isolation of the evaluation engine's child process is not needed."""
    global _engine
    if _engine is None:
        from aromcp_workflows.expressions import ExpressionEngine

        _engine = ExpressionEngine(isolation="thread")
    return _engine


def _friendly(error: str, source: str) -> str:
    """V8 reports the end of an incomplete expression as the `)` or `}` our wrapper adds;
    when the author wrote no such token, say what really happened."""
    for token in (")", "}"):
        if error == f"SyntaxError: Unexpected token '{token}'" and token not in source:
            return "SyntaxError: unexpected end of the expression (something is missing at its end)"
    return error
