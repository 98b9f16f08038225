"""The importer's building blocks: renaming inside JavaScript, and keeping comments.

Renaming must touch only names that are read: not object keys, not members, not names an
arrow function or declaration binds.  Comments of the original file must survive the
translation where the parts they sit next to survive.
"""

from __future__ import annotations

from aromcp_workflows.importer.js import Renames, add_raw_filter, rewrite_expression, rewrite_templates
from aromcp_workflows.importer.translate import translate_text

RENAMES = Renames(bare={"mode": "inputs.mode", "file": "item", "task_id": "task.task_id"},
                  member={("loop", "item"): "item", ("loop", "*"): "undefined"}, root={"global": "this"})


def test_bare_names_members_and_keys():
    assert rewrite_expression("mode + x.mode + {mode: 1}.mode", RENAMES) == "inputs.mode + x.mode + {mode: 1}.mode"


def test_bound_names_are_left_alone():
    src = "files.filter(file => file.endsWith('.ts')).map(([file, n]) => file + mode)"
    assert rewrite_expression(src, RENAMES) == src.replace("+ mode", "+ inputs.mode")
    assert rewrite_expression("{ const file = 1; return file }", RENAMES) == "{ const file = 1; return file }"


def test_members_roots_and_template_literals():
    assert rewrite_expression("`${task_id}-${loop.item}` + global.x + loop.iteration", RENAMES) == \
        "`${task.task_id}-${item}` + this.x + undefined"


def test_strings_are_not_renamed():
    assert rewrite_expression("'mode' + \"file\"", RENAMES) == "'mode' + \"file\""


def test_templates_in_text():
    assert rewrite_templates("go {{ mode }} now {{ {a: {b: file}} }}", RENAMES) == \
        "go {{ inputs.mode }} now {{ {a: {b: item}} }}"


def test_raw_filter_is_added_once():
    assert add_raw_filter(" a || 'b' ") == " a || 'b' | raw "
    assert add_raw_filter(" a | raw ") == " a | raw "


AROMCP = '''name: "tt:comments"  # the name
description: "comments survive"
version: "1.0.0"

# Start state
default_state:
  state:
    out: ""  # filled by the command

# The steps
steps:
  # first, a command
  - id: "run"
    type: "shell_command"
    command: "echo hi"
    state_update:
      path: "this.out"
      value: "stdout"
    execution_context: "server"

  # then a branch
  - id: "branch"
    type: "conditional"
    condition: "this.out.length > 0"
    then_steps:
      # say it
      - id: "say"
        type: "user_message"
        message: "{{ this.out }}"
'''


def test_comments_order_and_quotes_survive():
    result = translate_text(AROMCP, "tt:comments.yaml")
    assert result.ok, result.lines()
    text = result.text or ""
    for comment in ("# the name", "# Start state", "# filled by the command", "# The steps",
                    "# first, a command", "# then a branch", "# say it"):
        assert comment in text, comment
    lines = text.splitlines()
    assert lines.index("  # then a branch") + 1 == lines.index('  - id: "branch"')
    assert lines.index("      # say it") + 1 == lines.index('      - id: "say"')
    assert 'name: "tt:comments"  # the name' in lines
    assert "execution_context" not in text and "then_steps" not in text
