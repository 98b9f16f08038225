"""ExpressionEngine: the one object the rest of the server uses to evaluate JavaScript.

It renders `{{ }}` templates in any JSON-like structure, evaluates single expressions,
and runs the state store's recompute chains.  Plain paths and literals never reach V8;
everything else of one call goes to V8 in a single crossing, each distinct source
compiled once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any, Literal

from aromcp_workflows.expressions import batch
from aromcp_workflows.expressions.analysis import Reads, analyse
from aromcp_workflows.expressions.batch import Call, ChainItem, ChainOutcome, ValueTable
from aromcp_workflows.expressions.errors import MISSING, ExpressionError
from aromcp_workflows.expressions.isolation import ProcessV8Runtime
from aromcp_workflows.expressions.lexer import LexError
from aromcp_workflows.expressions.runtime import EngineStats, FunctionDef, Runtime, V8Runtime
from aromcp_workflows.expressions.shell_context import ShellContextError, ShellPlan, assemble, shell_plan
from aromcp_workflows.expressions.simple_eval import evaluate as evaluate_simple
from aromcp_workflows.expressions.simple_parse import Node, parse_simple
from aromcp_workflows.expressions.template import (
    ExprPart,
    NeedsV8,
    Template,
    apply_filter,
    call_builtin,
    classify,
    parse_expression,
    parse_template,
    resolve_path,
    to_text,
)


@lru_cache(maxsize=8192)
def reads_of(source: str) -> Reads:
    """Free-name analysis of a JS source, cached (raises ExpressionError on bad lexing)."""
    try:
        return analyse(source)
    except LexError as exc:
        raise ExpressionError(source, "", str(exc), "syntax") from exc


class _Pending:
    """A value that V8 will supply once the batch has run."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class ExpressionEngine:
    """Evaluate JavaScript expressions, templates and transforms in embedded V8.

    Thread-safe.  V8 itself is created lazily on the first call that needs it.
    `timeout_ms` bounds each evaluation (promise jobs included), `max_memory_mb` each V8
    heap, `pool_size` the number of V8 child processes; `max_result_chars` bounds the
    JSON text of any single result.  Unset limits come from AROMCP_V8_TIMEOUT_MS,
    AROMCP_V8_MEMORY_MB and AROMCP_V8_POOL_SIZE (defaults 1000, 256, 3).

    Simple expressions (`simple_parse`: comparisons, arithmetic, logic over JSON values)
    are answered in Python with exactly V8's result, or handed to V8 when Python cannot be
    sure; `python_simple=False` (or AROMCP_JS_FAST=off) sends them all to V8.
    """

    def __init__(self, timeout_ms: int | None = None, max_memory_mb: int | None = None,
                 max_result_chars: int = 16_000_000, isolation: str | None = None,
                 pool_size: int | None = None, python_simple: bool | None = None) -> None:
        default = "thread" if os.name == "nt" else "process"  # the child's pipe watchdog uses select()
        mode = isolation or os.environ.get("AROMCP_V8_ISOLATION", default)
        if mode not in ("process", "thread"):
            raise ValueError(f"AROMCP_V8_ISOLATION must be 'process' or 'thread', not {mode!r}")
        timeout = timeout_ms if timeout_ms is not None else _env_int("AROMCP_V8_TIMEOUT_MS", 1000)
        memory = max_memory_mb if max_memory_mb is not None else _env_int("AROMCP_V8_MEMORY_MB", 256)
        # "process": V8 in a pool of child processes, which a fatal V8 error cannot take
        # down with us and a runaway transform cannot hog; "thread": one V8 in this process
        # (a little faster, no protection from fatal errors, calls take turns).
        self._rt: Runtime
        if mode == "process":
            size = pool_size if pool_size is not None else _env_int("AROMCP_V8_POOL_SIZE", 3)
            self._rt = ProcessV8Runtime(timeout_ms=timeout, max_memory_mb=memory, pool_size=size)
        else:
            self._rt = V8Runtime(timeout_ms=timeout, max_memory_mb=memory)
        self.max_result_chars = max_result_chars
        self._fn_ids: dict[tuple[str, tuple[str, ...], str], FunctionDef] = {}
        self.python_simple = (os.environ.get("AROMCP_JS_FAST", "on").strip().lower() != "off"
                              if python_simple is None else python_simple)
        self.python_evaluations = 0  # simple expressions answered in Python (tests, benchmarks)

    def simple(self, source: str) -> Node | None:
        """The tree of `source` when Python may try to evaluate it (see simple_eval)."""
        return parse_simple(source) if self.python_simple else None

    # -- public API ----------------------------------------------------------------------
    @property
    def stats(self) -> EngineStats:
        return self._rt.stats

    @property
    def timeout_ms(self) -> int:
        return self._rt.timeout_ms

    def close(self) -> None:
        """Release the V8 context (a later call creates a new one)."""
        self._rt.close()

    def render(self, structure: Any, scope: Mapping[str, Any], origin: str = "",
               shell_quote: bool = False, keep_missing: bool = False) -> Any:
        """Render every string of a nested structure; one V8 crossing at most.

        A string that is exactly one `{{ }}` keeps the JS type of its value (undefined
        becomes None, or MISSING with `keep_missing`); other strings are rendered as text.
        With `shell_quote`, every inserted value is escaped for the bash quoting context it
        stands in (see shell_context) unless `| raw` is used.
        """
        ctx = _RenderContext(self, scope, origin)
        shaped = ctx.collect(structure)
        ctx.run()
        return ctx.assemble(shaped, shell_quote, keep_missing)

    def render_with_command(self, structure: Any, command: Any, scope: Mapping[str, Any],
                            origin: str = "") -> tuple[Any, Any]:
        """`render(structure)` and `render(command, shell_quote=True)` in one V8 crossing:
        a shell step's command is quoted, its other fields are not."""
        ctx = _RenderContext(self, scope, origin)
        plain, quoted = ctx.collect(structure), ctx.collect(command)
        ctx.run()
        return ctx.assemble(plain, False, False), ctx.assemble(quoted, True, False)

    def evaluate(self, expr: str, scope: Mapping[str, Any], origin: str = "") -> Any:
        """Value of one expression (`files.length > 0`, or a `{{ }}` string); MISSING for
        undefined."""
        return self.evaluate_many([expr], scope, origin)[0]

    def evaluate_many(self, exprs: list[str], scope: Mapping[str, Any],
                      origin: str = "") -> list[Any]:
        """Several expressions against one scope, in one V8 crossing at most."""
        wrapped = [e if "{{" in e else "{{" + e + "\n}}" for e in exprs]
        return list(self.render(wrapped, scope, origin, keep_missing=True))

    def test_transform(self, transform: str, input: Any, context: Mapping[str, Any] | None = None,
                       origin: str = "test transformation") -> Any:
        """Run a transform as a computed field would (expression or function body, with
        `input` and the names of `context`); raise ExpressionError on failure.  The
        result is JSON-safe: undefined comes back as None."""
        scope = dict(context or {})
        table = ValueTable()
        call = self.transform_call(transform, table, lambda name, keys: _scope_source(
            table, scope, name, keys), {"input": table.value("input", input)}, origin,
            visible=scope.__contains__)
        (result,) = batch.run_calls(self._rt, [call], table, self.max_result_chars)
        if isinstance(result, ExpressionError):
            raise result
        return None if result is MISSING else result

    def syntax_errors(self, sources: list[tuple[str, Literal["expr", "transform"]]]) -> list[str | None]:
        """Compile (never run) each `(source, mode)` as evaluation would; per source its
        syntax error or None.  One crossing for all of them (validation uses this)."""
        if not sources:
            return []
        answer = self._rt.call("check", [], {"sources": [[s, m] for s, m in sources]}, [])
        return [None if a is None else str(a) for a in answer]

    # -- building blocks used by the state store ----------------------------------------
    def function(self, source: str, params: Iterable[str],
                 mode: Literal["expr", "transform"]) -> FunctionDef:
        """The compiled-once function for (source, params, mode)."""
        key = (source, tuple(params), mode)
        fn = self._fn_ids.get(key)
        if fn is None:
            fn = FunctionDef(f"f{len(self._fn_ids)}", key[1], source, mode)
            self._fn_ids[key] = fn
        return fn

    def transform_call(self, source: str, table: ValueTable,
                       resolve: Callable[[str, frozenset[str] | None], Any],
                       fixed: Mapping[str, Any], origin: str,
                       mode: Literal["expr", "transform"] = "transform",
                       visible: Callable[[str], bool] | None = None) -> Call:
        """A Call for `source`: `fixed` params (input, output) plus each free name's source
        from `resolve(name, static_keys_or_None)`.  A JS global name (`Math`, `escape`)
        becomes a parameter only if `visible(name)` says the scope has such a value."""
        reads = reads_of(source)
        shadowed = {g for g in reads.globals_used if visible is not None and visible(g)}
        names = sorted((reads.names - {"this"}) | set(fixed) | shadowed)
        args = [fixed[n] if n in fixed else resolve(n, reads.keys_of(n)) for n in names]
        this = resolve("this", reads.keys_of("this")) if "this" in reads.names else None
        return Call(self.function(source, names, mode), args, this, origin)

    def run_chain(self, items: list[ChainItem], table: ValueTable, current: dict[str, Any],
                  dirty: set[int], keys: dict[str, str] | None = None,
                  cached: set[str] | None = None,
                  new_keys: dict[str, str] | None = None) -> list[ChainOutcome]:
        """Recompute computed fields in one crossing (see batch.run_chain)."""
        return batch.run_chain(self._rt, items, table, current, dirty, self.max_result_chars,
                               keys, cached, new_keys)

    @property
    def context_epoch(self) -> int:
        """Changes whenever V8 was (re)created: values cached in V8 are gone then."""
        return self._rt.stats.contexts_created


def _env_int(name: str, default: int) -> int:
    """A positive integer limit from the environment (see docs/security.md)."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive whole number, not {text!r}; unset it to use {default}")
    return value


def _scope_source(table: ValueTable, scope: Mapping[str, Any], name: str,
                  keys: frozenset[str] | None) -> Any:
    """Argument source for a free name read from a scope mapping."""
    if name == "this":
        names = keys if keys is not None else list(scope)
        return ValueTable.obj([(k, table.value(k, scope.get(k, MISSING))) for k in names])
    value = scope.get(name, MISSING)
    if keys is not None and isinstance(value, dict):
        return ValueTable.obj([(k, table.value((name, k), value.get(k, MISSING)))
                               for k in sorted(keys)])
    return table.value(name, value)


class _RenderContext:
    """State of one render call: the parsed strings, the V8 calls they need, results."""

    def __init__(self, engine: ExpressionEngine, scope: Mapping[str, Any], origin: str):
        self.engine = engine
        self.scope = scope
        self.origin = origin
        self.table = ValueTable()
        self.calls: list[Call] = []
        self.results: list[Any] = []

    def collect(self, node: Any) -> Any:
        """Replace each templated string by (Template, resolved parts); queue V8 work."""
        if isinstance(node, str):
            if "{{" not in node:
                return node
            try:
                tpl = parse_template(node)
            except ExpressionError as exc:
                raise ExpressionError(node, self.origin, exc.js_message, exc.kind) from None
            values = [self._part(p) for p in tpl.expressions]
            return _Shaped(tpl, values, node)
        if isinstance(node, dict):
            return {k: self.collect(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [self.collect(v) for v in node]
        return node

    def _part(self, part: ExprPart) -> tuple[Any, list[Any]]:
        main = self._value(part.source)
        args = [self._value(f.arg) if f.arg is not None else MISSING for f in part.filters]
        return main, args

    def _value(self, source: str) -> Any:
        try:
            kind, what = classify(source)
            if kind == "literal":
                return what
            if kind == "call":
                return call_builtin(what)
            if kind == "path":
                try:
                    return resolve_path(what, self.scope)
                except NeedsV8:
                    pass
            elif (node := self.engine.simple(source)) is not None:
                try:
                    value = evaluate_simple(node, self.scope)
                    self.engine.python_evaluations += 1
                    return value
                except NeedsV8:
                    pass
            reads_of(source)
        except ExpressionError as exc:
            raise ExpressionError(source, self.origin, exc.js_message, exc.kind) from None
        call = self.engine.transform_call(
            source, self.table,
            lambda name, keys: _scope_source(self.table, self.scope, name, keys)
            if name == "this" or name in self.scope else None,
            {}, self.origin, mode="expr", visible=self.scope.__contains__)
        self.calls.append(call)
        return _Pending(len(self.calls) - 1)

    def run(self) -> None:
        if self.calls:
            self.results = batch.run_calls(self.engine._rt, self.calls, self.table,
                                           self.engine.max_result_chars)

    def _get(self, value: Any) -> Any:
        if isinstance(value, _Pending):
            result = self.results[value.index]
            if isinstance(result, ExpressionError):
                raise result
            return result
        return value

    def assemble(self, node: Any, quote: bool, keep_missing: bool) -> Any:
        if isinstance(node, _Shaped):
            return node.render(self, quote, keep_missing)
        if isinstance(node, dict):
            return {k: self.assemble(v, quote, keep_missing) for k, v in node.items()}
        if isinstance(node, list):
            return [self.assemble(v, quote, keep_missing) for v in node]
        return node


class _Shaped:
    __slots__ = ("source", "tpl", "values")

    def __init__(self, tpl: Template, values: list[tuple[Any, list[Any]]], source: str) -> None:
        self.tpl = tpl
        self.values = values
        self.source = source

    def render(self, ctx: _RenderContext, quote: bool, keep_missing: bool) -> Any:
        rendered: list[tuple[Any, bool]] = []
        for part, (main, args) in zip(self.tpl.expressions, self.values, strict=False):
            value = ctx._get(main)
            for f, arg in zip(part.filters, args, strict=False):
                value = apply_filter(f, value, ctx._get(arg))
            rendered.append((value, part.is_raw))
        if quote:
            return self._command(ctx, rendered)
        if self.tpl.whole:
            value = rendered[0][0]
            if value is MISSING and not keep_missing:
                return None
            return value
        out: list[str] = []
        it = iter(rendered)
        for piece in self.tpl.parts:
            out.append(piece if isinstance(piece, str) else to_text(next(it)[0]))
        return "".join(out)

    def _command(self, ctx: _RenderContext, rendered: list[tuple[Any, bool]]) -> str:
        """The command with each value escaped for where it stands (or a clear error)."""
        try:
            literals, plan = command_plan(self.source)
            return assemble(literals, plan, [(to_text(v), raw) for v, raw in rendered])
        except ShellContextError as exc:
            raise ExpressionError(self.source, ctx.origin, str(exc), "shell") from None


@lru_cache(maxsize=4096)
def command_plan(command: str) -> tuple[tuple[str, ...], ShellPlan]:
    """The literal pieces of a command template and the quoting context of each insertion
    (cached per command text; raises ExpressionError or ShellContextError)."""
    tpl = parse_template(command)
    literals: list[str] = [""]
    for piece in tpl.parts:
        if isinstance(piece, str):
            literals[-1] += piece
        else:
            literals.append("")
    exprs = tpl.expressions
    plan = shell_plan(tuple(literals), tuple(p.source for p in exprs), tuple(p.is_raw for p in exprs))
    return tuple(literals), plan


__all__ = ["ExpressionEngine", "parse_expression", "reads_of"]
