"""`aromcp-workflows graph`: the Mermaid flowchart of a workflow.

Three layers, from always-on to best-effort:
- the output of `graph standards:fix` equals the golden file `standards_fix.mmd`
  (regenerate with `aromcp-workflows graph standards:fix > tests/golden/standards_fix.mmd`
  and review the diff);
- structural assertions on the Mermaid text for every construct (diamonds, hexagon loops
  with dotted back edges, `break`/`continue`, `when` guards, parallel fan-out into a
  subgraph) and for hostile labels, for every shipped workflow and example;
- when a Mermaid installation is available (`npm install --prefix tests/golden mermaid
  jsdom`, or `MERMAID_NODE_MODULES` pointing at a `node_modules` with both), every graph
  is parsed by Mermaid's own parser, and with `@mermaid-js/mermaid-cli` plus a Chromium
  (`PUPPETEER_SKIP_DOWNLOAD=1`, `apt-get install chromium`) also rendered to SVG.
  Without them those tests skip, saying how to enable them.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver
from aromcp_workflows.definition.resolver import is_workflow_file_name
from aromcp_workflows.explain.mermaid import MAX_LABEL, escape_label, mermaid_flowchart

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).with_name("standards_fix.mmd")
PARSER = Path(__file__).with_name("mermaid_parse.mjs")
SHIPPED = sorted(p.stem for p in (REPO / "workflows").glob("*.yaml") if is_workflow_file_name(p.name))
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))

HOSTILE = """
name: "test:hostile"
description: "labels with everything Mermaid cares about"
inputs:
  files: {type: array, default: []}
default_state:
  raw: {n: 0, done: false}
steps:
  - id: quote
    type: shell_command
    command: 'echo "a|b" `date` #comment {x} [y] <b>&amp; {{ inputs.files | json }}'
  - id: guarded
    type: user_message
    when: "{{ n > 0 && \\"x\\" !== '|' }}"
    message: "n is {{ n }}"
  - id: poll
    type: while
    condition: "{{ !done }}"
    max_iterations: 5
    body:
      - id: bump
        type: state_update
        path: raw.n
        operation: increment
        value: 1
      - id: enough
        type: conditional
        condition: "{{ n >= 3 }}"
        then:
          - type: break
      - id: odd
        type: conditional
        condition: "{{ n % 2 === 1 }}"
        then:
          - type: continue
      - id: ask
        type: user_input
        prompt: "Say \\"yes\\" | \\"no\\" — this prompt is deliberately far longer than a label should ever be"
        state_update: {path: raw.answer}
  - id: each
    type: foreach
    items: "{{ inputs.files }}"
    steps:
      - id: fan
        type: parallel_foreach
        items: "{{ [item] }}"
        sub_agent_task: work
  - id: last
    type: exit
    message: "bye #1"
sub_agent_tasks:
  work:
    steps:
      - id: maybe_quit
        type: conditional
        condition: "{{ task.item === 'stop' }}"
        then:
          - type: exit
      - id: call
        type: mcp_call
        mcp: {method: "do|it", params: {}}
"""


def load(name_or_path: str, project: Path | None = None, home: Path | None = None):
    return WorkflowLoader(WorkflowResolver(project_dir=project or REPO, home=home)).load(name_or_path).definition


@pytest.fixture
def hostile(tmp_path: Path) -> str:
    path = tmp_path / "test:hostile.yaml"
    path.write_text(textwrap.dedent(HOSTILE), encoding="utf-8")
    return mermaid_flowchart(load(str(path), tmp_path, tmp_path))


def nodes(text: str) -> dict[str, str]:
    """node id -> its whole declaration (shape and label)."""
    return {m.group(1): m.group(0).strip() for m in re.finditer(r"^\s+(n\d+)([\[\(\{>].*)$", text, re.MULTILINE)}


def label_of(text: str, needle: str) -> str:
    """The id of the (single) node whose label contains `needle`."""
    found = [nid for nid, decl in nodes(text).items() if needle in decl]
    assert len(found) == 1, (needle, found)
    return found[0]


def edges(text: str) -> list[tuple[str, str, str | None, bool]]:
    """(source, target, label, dotted) for every edge."""
    out = []
    for m in re.finditer(r"^\s+(n\d+) (-->|-\.->)(?:\|\"?(.*?)\"?\|)? (n\d+)$", text, re.MULTILINE):
        out.append((m.group(1), m.group(4), m.group(3), m.group(2) == "-.->"))
    return out


# -- golden ------------------------------------------------------------------------------
def test_standards_fix_matches_golden_file() -> None:
    assert mermaid_flowchart(load("standards:fix")) == GOLDEN.read_text(encoding="utf-8")


def test_cli_graph_prints_the_golden_text(capsys: pytest.CaptureFixture[str]) -> None:
    from aromcp_workflows.cli.entry import main

    assert main(["--project-dir", str(REPO), "graph", "standards:fix"]) == 0
    assert capsys.readouterr().out == GOLDEN.read_text(encoding="utf-8")


def test_cli_graph_unknown_workflow_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    from aromcp_workflows.cli.entry import main

    assert main(["--project-dir", str(REPO), "graph", "nope:nope"]) == 1
    assert "not found" in capsys.readouterr().err


# -- structure of standards:fix ----------------------------------------------------------
def test_standards_fix_structure() -> None:
    text = GOLDEN.read_text(encoding="utf-8")
    assert text.startswith("flowchart TD\n")
    decl = nodes(text)
    cond = label_of(text, "nothing_to_do:")
    assert decl[cond].startswith(f'{cond}{{"') and decl[cond].endswith('"}')  # a diamond
    loop = label_of(text, "fix_files: foreach")
    assert decl[loop].startswith(f'{loop}{{{{"') and decl[loop].endswith('"}}')  # a hexagon
    fan = label_of(text, "fix_batches: parallel_foreach")
    assert decl[fan].startswith(f'{fan}[["')
    all_edges = edges(text)
    labels_from_cond = {e[2] for e in all_edges if e[0] == cond}
    assert labels_from_cond == {"true", "false"}
    # the loop: body entered with `next`, a dotted `repeat` back edge, left with `done`
    assert any(e[1] == loop and e[2] == "repeat" and e[3] for e in all_edges)
    assert "-.->|repeat|" in text
    assert {e[2] for e in all_edges if e[0] == loop} == {"next", "done"}
    # the fan-out: into a subgraph holding the task's steps, the fan-out node stays outside
    block = re.search(r"subgraph (\S+)\[\"sub-agent task: fix_batch\"\]\n(.*?)\n  end\n", text, re.DOTALL)
    assert block is not None
    inside = set(re.findall(r"\b(n\d+)\b", block.group(2)))
    assert loop in inside and fan not in inside
    for method in ("get_hints", "apply:", "lint:", "mark_done"):
        assert label_of(text, method) in inside
    assert (fan, loop, "each item", False) in all_edges
    join = label_of(text, "all fix_batch tasks done")
    assert join not in inside
    assert any(e[1] == join and e[0] == label_of(text, "mark_done") for e in all_edges)
    # agent steps are parallelograms, messages flags, server steps boxes
    assert decl[label_of(text, "get_hints")].endswith('/]')
    assert decl[label_of(text, "announce:")].startswith(f'{label_of(text, "announce:")}>"')
    assert decl[label_of(text, "detect_files")].endswith('"]')
    # the task's cleanup_on_error steps: their own subgraph, entered from the task's by a dotted edge
    cleanup = re.search(r'subgraph (cleanup_fix_batch_\d+)\["cleanup on error: fix_batch"\]\n(.*?)\n  end\n',
                        text, re.DOTALL)
    assert cleanup is not None
    failed = label_of(text, '(["task failed"])')
    assert f"  {block.group(1)} -.->|on error| {failed}\n" in text
    assert label_of(text, "state_update raw.batch_status.{{ task.batch…") in re.findall(r"\b(n\d+)\b", cleanup.group(2))
    # `exit` leads to the end
    end = label_of(text, '(["end"])')
    assert (label_of(text, '(["exit"])'), end, None, False) in all_edges


# -- every construct, hostile labels -----------------------------------------------------
def test_break_continue_and_when(hostile: str) -> None:
    text, all_edges = hostile, edges(hostile)
    poll = label_of(text, "poll: while")
    assert "(max 5)" in nodes(text)[poll]
    brk, cont = label_of(text, '(["break"])'), label_of(text, '(["continue"])')
    after_loop = label_of(text, "each: foreach")
    assert (brk, after_loop, "break", False) in all_edges  # break leaves to after the loop
    assert (poll, after_loop, "done", False) in all_edges
    assert (cont, poll, "continue", True) in all_edges  # continue goes back, dotted
    ask = label_of(text, "ask: user_input")
    assert (ask, poll, "repeat", True) in all_edges
    guard = label_of(text, "when ")
    assert nodes(text)[guard].startswith(f'{guard}{{"')
    guarded = label_of(text, "guarded:")
    assert (guard, guarded, "yes", False) in all_edges
    assert (guard, poll, "skip", False) in all_edges  # a false guard skips to the next step
    assert (guarded, poll, None, False) in all_edges


def test_parallel_inside_loop_and_exit_inside_task(hostile: str) -> None:
    text, all_edges = hostile, edges(hostile)
    each, fan = label_of(text, "each: foreach"), label_of(text, "fan: parallel_foreach")
    join = label_of(text, "all work tasks done")
    assert (each, fan, "next", False) in all_edges
    assert (join, each, "repeat", True) in all_edges
    task_exit = label_of(text, '(["exit"])')
    assert (task_exit, join, None, False) in all_edges  # a task's exit ends the task, not the workflow
    end = label_of(text, '(["end"])')
    assert (label_of(text, "exit: bye"), end, None, False) in all_edges


def test_hostile_labels_are_escaped(hostile: str) -> None:
    for line in hostile.splitlines()[1:]:
        stripped = line.strip()
        if stripped == "end" or stripped.startswith("subgraph "):
            continue
        match = re.fullmatch(r'(n\d+)(\(\[|\[\[|\[/|\{\{|\{|\[|>)"([^"]*)"(\]\)|\]\]|/\]|\}\}|\}|\])', stripped)
        if match:
            body = match.group(3)
            assert len(re.sub(r"#\w+;", "x", body)) <= MAX_LABEL
            assert not set(body) & set('"|`<>&'), body
            assert "#" not in re.sub(r"#\w+;", "", body), body
            continue
        assert re.fullmatch(r'n\d+ (-->|-\.->)(\|[A-Za-z0-9_ ]+\||\|"[^"|]*"\|)? n\d+', stripped), stripped
    assert "#quot;yes#quot; #124; #quot;no#quot;" in hostile
    assert "#96;date#96;" in hostile
    assert "#35;comment" in hostile and "#lt;b#gt;" in hostile
    assert "do#124;it" in hostile


@pytest.mark.parametrize("text, expected", [
    ('say "hi"', "say #quot;hi#quot;"),
    ("a|b", "a#124;b"),
    ("#1 `x`", "#35;1 #96;x#96;"),
    ("<b>", "#lt;b#gt;"),
    ("a && b", "a #amp;#amp; b"),
    ("two\n  lines", "two lines"),
    ("{{ x }}", "{{ x }}"),
])
def test_escape_label(text: str, expected: str) -> None:
    assert escape_label(text) == expected


def test_on_failure_steps_get_their_own_subgraph() -> None:
    text = mermaid_flowchart(load(str(REPO / "examples" / "examples:error-handling.yaml")))
    block = re.search(r'subgraph on_failure_\d+\["on failure: when a step fails"\]\n(.*?)\n  end\n', text, re.DOTALL)
    assert block is not None
    inside = set(re.findall(r"\b(n\d+)\b", block.group(1)))
    entry, done = label_of(text, '(["workflow failed"])'), label_of(text, '(["handled"])')
    assert entry in inside and done in inside
    message = label_of(text, "message Workflow failed")
    assert any(e[0] == message and e[1] == done for e in edges(text))
    assert label_of(text, "start: examples:error-handling") not in inside


def test_long_labels_are_cut() -> None:
    assert escape_label("x" * 200) == "x" * (MAX_LABEL - 1) + "…"


@pytest.mark.parametrize("target", SHIPPED + [str(p) for p in EXAMPLES])
def test_every_shipped_workflow_and_example_draws(target: str) -> None:
    text = mermaid_flowchart(load(target))
    assert text.startswith("flowchart TD\n") and text.endswith("\n")
    declared = set(nodes(text))
    for source, dest, _, _ in edges(text):
        assert source in declared and dest in declared
    assert text.count("subgraph ") == len(re.findall(r"^  end$", text, re.MULTILINE))
    end = label_of(text, '(["end"])')
    assert any(dest == end for _, dest, _, _ in edges(text))


# -- Mermaid's own parser and renderer, when installed -----------------------------------
def _modules() -> Path | None:
    """MERMAID_NODE_MODULES, else `tests/golden/node_modules` (from
    `npm install --prefix tests/golden mermaid jsdom`), if it holds mermaid and jsdom."""
    if shutil.which("node") is None:
        return None
    value = os.environ.get("MERMAID_NODE_MODULES")
    path = Path(value) if value else Path(__file__).with_name("node_modules")
    return path if (path / "mermaid").is_dir() and (path / "jsdom").is_dir() else None


def mermaid_parse(diagrams: list[str]) -> list[dict[str, object]]:
    modules = _modules()
    if modules is None:
        pytest.skip("Mermaid parser not available: `npm install --prefix tests/golden mermaid jsdom` (or set "
                    "MERMAID_NODE_MODULES to a node_modules holding both; needs node)")
    done = subprocess.run(["node", str(PARSER), str(modules)], input=json.dumps(diagrams), text=True,
                          capture_output=True, timeout=60, check=True)
    return list(json.loads(done.stdout))


def test_mermaid_parser_accepts_every_graph(tmp_path: Path) -> None:
    path = tmp_path / "test:hostile.yaml"
    path.write_text(textwrap.dedent(HOSTILE), encoding="utf-8")
    diagrams = [mermaid_flowchart(load(t)) for t in SHIPPED + [str(p) for p in EXAMPLES]]
    diagrams.append(mermaid_flowchart(load(str(path), tmp_path, tmp_path)))
    docs = (REPO / "docs" / "debugging.md").read_text(encoding="utf-8")
    diagrams.extend(re.findall(r"```mermaid\n(.*?)```", docs, re.DOTALL))  # the sample in the docs
    diagrams.append('flowchart TD\n  n1["broken"label"]\n')  # proves the parser can say no
    results = mermaid_parse(diagrams)
    assert [r["ok"] for r in results] == [True] * (len(diagrams) - 1) + [False], results
    assert all(r["type"] == "flowchart-v2" for r in results[:-1])


def test_mermaid_cli_renders_standards_fix(tmp_path: Path) -> None:
    modules = _modules()
    mmdc = modules / ".bin" / "mmdc" if modules else None
    browser = os.environ.get("PUPPETEER_EXECUTABLE_PATH") or shutil.which("chromium")
    if mmdc is None or not mmdc.exists() or not browser:
        pytest.skip("Mermaid CLI render not available: needs @mermaid-js/mermaid-cli in "
                    "MERMAID_NODE_MODULES and a Chromium (`apt-get install chromium`)")
    config = tmp_path / "puppeteer.json"
    config.write_text(json.dumps({"executablePath": browser,
                                  "args": ["--no-sandbox", "--headless", "--disable-gpu"]}))
    out = tmp_path / "standards_fix.svg"
    subprocess.run([str(mmdc), "-p", str(config), "-i", str(GOLDEN), "-o", str(out)],
                   capture_output=True, text=True, timeout=120, check=True)
    svg = out.read_text(encoding="utf-8")
    assert "<svg" in svg and "sub-agent task: fix_batch" in svg and "Syntax error" not in svg


# -- any text at all makes a safe label -----------------------------------------------------
NASTY = '"|`<>&#{}[]()\\/;:%\n\t —…é中🙂'


def _safe_label(body: str) -> bool:
    return not set(body) & set('"|`<>&\n\t') and "#" not in re.sub(r"#\w+;", "", body)


@given(st.text(alphabet=st.sampled_from(list(NASTY) + list("abc xyz0")), max_size=120))
@settings(max_examples=300, deadline=None)
def test_escape_label_is_safe_for_any_text(text: str) -> None:
    body = escape_label(text)
    assert _safe_label(body), body
    assert len(re.sub(r"#\w+;", "x", body)) <= MAX_LABEL


def test_mermaid_parser_accepts_random_labels() -> None:
    rng = random.Random(6)
    labels = ["".join(rng.choice(NASTY + "abc ") for _ in range(rng.randint(1, 90))) for _ in range(150)]
    lines = ["flowchart TD"]
    for i, label in enumerate(labels):
        lines.append(f'  n{i}["{escape_label(label)}"]')
        if i:
            lines.append(f'  n{i - 1} -->|"{escape_label(label)}"| n{i}')
    [result] = mermaid_parse(["\n".join(lines) + "\n"])
    assert result["ok"], result


# -- included workflows -------------------------------------------------------------------------
def test_graph_draws_included_workflows_inside_a_subgraph(capsys: pytest.CaptureFixture[str]) -> None:
    from aromcp_workflows.cli.entry import main

    assert main(["--project-dir", str(REPO), "graph", "standards:check"]) == 0
    text = capsys.readouterr().out
    block = re.search(r'subgraph include_\w+\["included workflow: shared:check-standards"\]\n(.*?)\n  end\n',
                      text, re.DOTALL)
    assert block is not None
    inside = set(re.findall(r"\b(n\d+)\b", block.group(1)))
    include = label_of(text, "run_checks: include shared:check-standards")
    tsc, lint_loop = label_of(text, "tsc: mcp_call"), label_of(text, "check_lint: foreach")
    assert include not in inside and tsc in inside and lint_loop in inside
    assert (include, label_of(text, "check_typescript: foreach"), "run", False) in edges(text)
    assert (lint_loop, label_of(text, "report: message"), "done", False) in edges(text)


def test_include_with_exit_and_parallel_uses_the_child_tasks(tmp_path: Path) -> None:
    for name, body in {
        "test:parent": """
            name: "test:parent"
            steps:
              - id: inc
                type: include_workflow
                workflow: "test:child"
              - id: after
                type: user_message
                message: "after"
            """,
        "test:child": """
            name: "test:child"
            steps:
              - id: maybe
                type: conditional
                condition: "{{ true }}"
                then:
                  - type: exit
              - id: fan
                type: parallel_foreach
                items: [1, 2]
                sub_agent_task: child_task
            sub_agent_tasks:
              child_task:
                steps:
                  - id: work
                    type: agent_prompt
                    prompt: "work"
            """,
    }.items():
        (tmp_path / ".aromcp" / "workflows").mkdir(parents=True, exist_ok=True)
        (tmp_path / ".aromcp" / "workflows" / f"{name}.yaml").write_text(textwrap.dedent(body))
    loader = WorkflowLoader(WorkflowResolver(project_dir=tmp_path, home=tmp_path))
    bundle = loader.load_bundle("test:parent")
    text = mermaid_flowchart(bundle.main.definition, {"test:child": bundle.get("test:child")})
    assert "sub-agent task: child_task" in text
    child_exit, done = label_of(text, '(["exit"])'), label_of(text, "test:child done")
    assert (child_exit, done, None, False) in edges(text)  # the child's exit ends the child only
    assert (done, label_of(text, "after: message"), None, False) in edges(text)
    if _modules() is not None:
        assert mermaid_parse([text]) == [{"ok": True, "type": "flowchart-v2"}]
