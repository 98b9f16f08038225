"""Template rendering against real V8: types, text rendering, filters, fast path, crossings."""

import re

import pytest

from aromcp_workflows.expressions import MISSING, ExpressionError
from aromcp_workflows.expressions.template import js_number

SCOPE = {
    "item": "src/a b.ts",
    "index": 2,
    "inputs": {"branch": "main", "retries": 0},
    "files": ["a.ts", "b.js", "c.ts"],
    "flag": True,
    "obj": {"x": 1, "nested": {"y": [1, 2]}},
    "file_results": {"a_ts": {"hints": ["h1"]}},
    "nothing": None,
    "raw": {"count": 4},
}


def calls(engine, fn):
    before = engine.stats.v8_calls
    value = fn()
    return value, engine.stats.v8_calls - before


def test_plain_paths_make_no_v8_call(engine):
    value, n = calls(engine, lambda: engine.render(
        {"a": "{{ item }}", "b": "{{ inputs.branch }}", "c": "{{ files[1] }}",
         "d": "{{ obj.nested.y[0] }}", "e": "{{ files.length }}", "f": "{{ 'lit' }}",
         "g": "{{ 42 }}", "h": "{{ this.index }}", "i": "{{ obj['x'] }}", "j": "{{ gone }}",
         "k": "{{ nothing?.x }}", "l": "{{ raw.count }}"}, SCOPE))
    assert n == 0
    assert value == {"a": "src/a b.ts", "b": "main", "c": "b.js", "d": 1, "e": 3, "f": "lit",
                     "g": 42, "h": 2, "i": 1, "j": None, "k": None, "l": 4}


def test_three_non_trivial_templates_make_one_call(engine):
    value, n = calls(engine, lambda: engine.render(
        {"cmd": "lint {{ files.filter(f => f.endsWith('.ts')).join(' ') }}",
         "n": "{{ files.length * 2 }}", "ok": "{{ flag && index > 1 }}",
         "plain": "{{ item }}"}, SCOPE))
    assert n == 1
    assert value == {"cmd": "lint a.ts c.ts", "n": 6, "ok": True, "plain": "src/a b.ts"}


def test_not_plain_goes_to_v8(engine):
    value, n = calls(engine, lambda: engine.render(
        "{{ file_results[item.replace(/[^a-z]/g, '')].hints }}",
        {**SCOPE, "item": "a.ts", "file_results": {"ats": {"hints": [1]}}}))
    assert n == 1 and value == [1]


def test_exact_template_keeps_type(engine):
    assert engine.render("{{ files }}", SCOPE) == SCOPE["files"]
    assert engine.render("{{ files.length > 2 }}", SCOPE) is True
    assert engine.render("{{ { total: files.length } }}", SCOPE) == {"total": 3}
    assert engine.render("{{ undefined }}", SCOPE) is None
    assert engine.render("{{ nope }}", SCOPE, keep_missing=True) is MISSING


def test_text_rendering_like_js_string(engine):
    text = engine.render("b={{ flag }} n={{ index }} f={{ 1.5 }} o={{ obj.nested }} "
                         "a={{ files.slice(0, 2) }} u={{ nope }} z={{ nothing }} "
                         "x={{ 0.1 + 0.2 }}", SCOPE)
    assert text == ('b=true n=2 f=1.5 o={"y":[1,2]} a=["a.ts","b.js"] u= z= '
                    'x=0.30000000000000004')


def test_missing_names_are_undefined(engine):
    assert engine.render("{{ absent?.b }}", SCOPE) is None
    assert engine.render("{{ absent || 3 }}", SCOPE) == 3
    assert engine.render("{{ typeof absent }}", SCOPE) == "undefined"
    assert engine.render("{{ inputs.retries || 3 }}", SCOPE) == 3


def test_filters(engine):
    assert engine.render("{{ item | path_to_key }}", SCOPE) == "src_a_b_ts"
    assert engine.render("{{ obj | json }}", SCOPE) == '{"x":1,"nested":{"y":[1,2]}}'
    assert engine.render("{{ files | length }}", SCOPE) == 3
    assert engine.render("{{ nope | default('main') }}", SCOPE) == "main"
    assert engine.render("{{ item | default('main') }}", SCOPE) == "src/a b.ts"
    assert engine.render("{{ files.filter(f => f > 'a') | length }}", SCOPE) == 3
    assert engine.render("{{ nope | default(files.length + 1) }}", SCOPE) == 4
    assert engine.render("{{ '😀' | length }}", SCOPE) == 2  # UTF-16 like JS


def test_path_segment_template(engine):
    path = engine.render("raw.file_results.{{ item | path_to_key }}.hints", SCOPE)
    assert path == "raw.file_results.src_a_b_ts.hints"


def test_shell_quoting_and_raw(engine):
    out = engine.render("rm {{ item }} && echo {{ '$(x)' | raw }} {{ files.length }}",
                        SCOPE, shell_quote=True)
    assert out == "rm 'src/a b.ts' && echo $(x) 3"
    assert engine.render("{{ item }}", SCOPE, shell_quote=True) == "'src/a b.ts'"


def test_now_and_uuid(engine):
    out = engine.render({"t": "{{ now() }}", "u": "{{ uuid() }}",
                         "v": "{{ [now(), uuid()] }}"}, SCOPE)
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    assert re.fullmatch(iso, out["t"])
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                        out["u"])
    assert re.fullmatch(iso, out["v"][0]) and len(out["v"][1]) == 36


def test_evaluate_and_evaluate_many(engine):
    assert engine.evaluate("files.length > 0", SCOPE) is True
    assert engine.evaluate("{{ index }}", SCOPE) == 2
    assert engine.evaluate("nope", SCOPE) is MISSING
    values, n = calls(engine, lambda: engine.evaluate_many(
        ["index + 1", "files[0].toUpperCase()", "item"], SCOPE))
    assert values == [3, "A.TS", "src/a b.ts"] and n == 1


def test_errors_name_expression_origin_and_message(engine):
    with pytest.raises(ExpressionError) as exc:
        engine.render({"x": "{{ absent.b }}"}, SCOPE, origin="step fix_loop.run_lint")
    err = exc.value
    assert err.kind == "runtime" and err.origin == "step fix_loop.run_lint"
    assert err.expression == "absent.b" and "Cannot read properties of undefined" in err.js_message
    assert "fix_loop.run_lint" in str(err)
    with pytest.raises(ExpressionError) as exc:
        engine.evaluate("1 +", SCOPE, origin="step s")
    assert exc.value.kind == "syntax"


def test_same_source_compiled_once(engine):
    engine.render("{{ index * 7 }}", SCOPE)
    before = engine.stats.compiles
    for i in range(5):
        assert engine.render("{{ index * 7 }}", {**SCOPE, "index": i}) == i * 7
    assert engine.stats.compiles == before


def test_global_names_can_be_shadowed_by_scope(engine):
    assert engine.render("{{ escape }}", {"escape": "yes"}) == "yes"
    assert engine.render("{{ Math.max(1, n) }}", {"n": 5}) == 5


def test_values_are_isolated_between_expressions(engine):
    out = engine.render(["{{ files.reverse() }}", "{{ files }}"], SCOPE)
    assert out == [["c.ts", "b.js", "a.ts"], ["a.ts", "b.js", "c.ts"]]
    assert SCOPE["files"] == ["a.ts", "b.js", "c.ts"]


@pytest.mark.parametrize("x,text", [(1.0, "1"), (0.1, "0.1"), (1e21, "1e+21"), (1e-7, "1e-7"),
                                    (0.00001234, "0.00001234"), (-2.5, "-2.5"),
                                    (123456789012345680000.0, "123456789012345680000"),
                                    (float("inf"), "Infinity"), (1.5e300, "1.5e+300")])
def test_js_number_formatting(x, text):
    assert js_number(x) == text


def test_test_transform_forms(engine):
    assert engine.test_transform("input.length", [1, 2]) == 2
    assert engine.test_transform("{ total: input.length }", [1, 2]) == {"total": 2}
    assert engine.test_transform("const t = input.length; return t * 2", [1, 2]) == 4
    assert engine.test_transform("input.length;", [1]) == 1
    assert engine.test_transform("try { return JSON.parse(input) } catch (e) { return null }",
                                 "{bad") is None
    # 'return' inside a string does not make it a function body
    assert engine.test_transform("'return ' + input", "x") == "return x"
    assert engine.test_transform("x * input", 2, {"x": 21}) == 42


def test_method_calls_on_objects_get_the_whole_object(engine):
    scope = {"obj": {"y": 1, "z": 2}}
    assert engine.render("{{ obj.hasOwnProperty('y') && obj.z }}", scope) == 2
    assert engine.render("{{ Object.keys(obj).length }}", scope) == 2


def test_js_truthiness_helper():
    from aromcp_workflows.expressions import js_truthy
    assert [js_truthy(v) for v in ([], {}, "0", 1, -1.5)] == [True] * 5
    assert [js_truthy(v) for v in (None, MISSING, False, 0, 0.0, float("nan"), "")] == [False] * 7
