"""The tokenizer and free-name analysis: where templates end, which names are read."""

import pytest

from aromcp_workflows.expressions import analyse, parse_template
from aromcp_workflows.expressions.errors import ExpressionError
from aromcp_workflows.expressions.template import parse_expression


@pytest.mark.parametrize("text,expr", [
    ("{{ a }}", "a"),
    ("{{ '}}' + a }}", "'}}' + a"),
    ('{{ "x}}y" }}', '"x}}y"'),
    ("{{ `t}}${a}` }}", "`t}}${a}`"),
    ("{{ {a: {b: 1}} }}", "{a: {b: 1}}"),
    ("{{ a /* }} */ }}", "a /* }} */"),
    ("{{ /}}/.test(a) }}", "/}}/.test(a)"),
])
def test_template_end_ignores_braces_in_strings_objects_comments(text, expr):
    tpl = parse_template(text)
    assert tpl.whole
    assert tpl.expressions[0].source == expr


def test_text_and_several_templates():
    tpl = parse_template("a {{ x }} b {{ y | json }}!")
    assert not tpl.whole
    assert [p if isinstance(p, str) else p.source for p in tpl.parts] == ["a ", "x", " b ", "y", "!"]
    assert tpl.expressions[1].filters[0].name == "json"


def test_whole_allows_surrounding_whitespace():
    assert parse_template("  {{ x }}\n").whole
    assert not parse_template("{{ x }}{{ y }}").whole


def test_unclosed_template_is_a_syntax_error():
    with pytest.raises(ExpressionError) as exc:
        parse_template("{{ a ")
    assert exc.value.kind == "syntax"


@pytest.mark.parametrize("src,expr,filters", [
    ("a || b", "a || b", []),
    ("a | json", "a", ["json"]),
    ("a | default('x') | length", "a", ["default", "length"]),
    ("f(a | 2) | raw", "f(a | 2)", ["raw"]),
    ("'a|json' + b", "'a|json' + b", []),
    ("x | 4", "x | 4", []),
])
def test_filter_split_only_at_top_level(src, expr, filters):
    part = parse_expression(src)
    assert part.source == expr
    assert [f.name for f in part.filters] == filters


def test_unknown_filter_is_an_error_not_a_bitwise_or():
    with pytest.raises(ExpressionError, match="unknown filter 'lenght'"):
        parse_expression("x | lenght")


def test_default_filter_argument():
    assert parse_expression("x | default(3)").filters[0].arg == "3"


def test_free_names_skip_members_keys_keywords_and_globals():
    r = analyse("{ total: input.length, ok: a.b && c?.d, n: Math.max(x, 1) }")
    assert r.names == {"input", "a", "c", "x"}
    assert r.keys_of("a") == {"b"} and r.keys_of("c") == {"d"}
    assert "Math" in r.globals_used


def test_free_names_inside_template_literals_and_shorthand():
    r = analyse("`id_${idx}` + ({ short, ...rest })")
    assert {"idx", "short", "rest"} <= r.names


def test_dynamic_access_means_whole_value():
    r = analyse("raw[k] + raw.x")
    assert r.keys_of("raw") is None
    r2 = analyse("raw.x + raw['y']")
    assert r2.keys_of("raw") == {"x", "y"}


def test_this_members():
    r = analyse("this.x + this.y")
    assert "this" in r.names and r.keys_of("this") == {"x", "y"}


def test_strings_comments_regex_do_not_leak_names():
    r = analyse("'not_a_name' + /re_name/.source + b // comment_name\n")
    assert r.names == {"b"}


def test_ternary_is_not_an_object_key():
    assert analyse("a ? b : c").names == {"a", "b", "c"}


def test_bound_names_are_reported():
    r = analyse("input.filter(f => f.ok).map((x, i) => { const y = x; return y })")
    assert {"f", "x", "i", "y"} <= r.bound
