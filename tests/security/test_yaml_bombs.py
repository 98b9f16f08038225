"""Issue 10 item 6: a hostile or broken workflow file is that file's error, never everyone's.

A 480-byte alias bomb used to expand to 1.27 GB on every `workflow_list`; a deeply nested
file (RecursionError) or a custom tag broke the listing of every file; a 50 MB file took
most of a minute.  Size, nesting and alias expansion are now bounded before anything is
built, tags are plain-data only, and each bad file is listed with its own error next to
the good ones — through a real MCP client and through `list --json`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client
from srv_helpers import ok, server_env

from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver
from aromcp_workflows.definition.errors import DefinitionError

GOOD = "name: good\ndescription: fine\nsteps:\n  - type: user_message\n    message: hi\n"
LAUGHS = "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 10))
BOMB = "name: bomb\nl0: &l0 [lol]\n" + LAUGHS + "steps: []\n"
BAD = {
    "bomb": BOMB,
    "deep": "name: deep\nsteps: " + "[" * 3000 + "]" * 3000 + "\n",
    "deepblock": "name: deepblock\nsteps:\n" + "".join("  " * i + "- a:\n" for i in range(1, 400)),
    "pyobject": "name: !!python/object:os.system {}\nsteps: []\n",
    "customtag": "name: customtag\nsteps: !foo [1]\n",
    "recursive": "name: recursive\nsteps: &s [*s]\n",
}
EXPECT = {"bomb": "expands to more than", "deep": "nests deeper", "deepblock": "nests deeper",
          "pyobject": "tag", "customtag": "tag", "recursive": "inside the node it names"}


def _huge(project: Path) -> None:
    (project / ".aromcp" / "workflows" / "huge.yaml").write_text("name: huge\n" + "# padding\n" * 5_200_000)


def test_bomb_is_small_and_would_expand_enormously():
    assert len(BOMB) < 600 and 9 ** 9 > 300_000_000


async def test_workflow_list_reports_each_bad_file_and_lists_the_rest(make_server):
    server, project = make_server({"good": GOOD, **BAD})
    _huge(project)
    async with Client(server) as client:
        listed = await ok(client, "workflow_list", {"include_global": False})
        again = await ok(client, "workflow_list", {"include_global": False})
        rows = {row["name"]: row for row in listed["workflows"]}
        assert rows["good"]["description"] == "fine"
        for name, words in {**EXPECT, "huge": "more than the limit"}.items():
            assert rows[name]["description"].startswith("(invalid:"), rows[name]
            assert words in rows[name]["description"], rows[name]
        assert again == listed
        for name in BAD:
            report = await ok(client, "workflow_validate", {"workflow": name})
            assert not report["valid"] and report["errors"][0]["line"], report
        started = await ok(client, "workflow_start", {"workflow": "good", "inputs": {}})
        assert started["status"] == "running"


@pytest.mark.slow  # starts a subprocess
def test_cli_list_json_lists_the_rest(make_server, tmp_path: Path):
    _, project = make_server({"good": GOOD, **BAD})
    home = tmp_path / "home-cli"
    home.mkdir()
    proc = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), "list", "--json",
                           "--no-global"], capture_output=True, text=True, check=False, env=server_env(home),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)["workflows"]}
    assert rows["good"]["description"] == "fine"
    for name, words in EXPECT.items():
        assert words in rows[name]["error"], rows[name]


@pytest.mark.parametrize("name", sorted(BAD))
def test_loader_refuses_with_a_position(tmp_path: Path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(BAD[name])
    with pytest.raises(DefinitionError) as caught:
        WorkflowLoader(WorkflowResolver(project_dir=tmp_path)).load_file(path)
    problem = caught.value.problems[0]
    assert EXPECT[name] in problem.message and problem.line, problem


def test_bounds_are_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "nested.yaml"
    path.write_text("name: nested\nsteps: []\ndefault_state:\n  raw:\n    x: " + "[" * 70 + "]" * 70 + "\n")
    loader = WorkflowLoader(WorkflowResolver(project_dir=tmp_path))
    with pytest.raises(DefinitionError):
        loader.load_file(path)
    monkeypatch.setenv("AROMCP_MAX_YAML_DEPTH", "100")
    nested = "name: nested\nsteps: []\ndefault_state:\n  raw:\n    x: " + "[" * 70 + "]" * 70
    path.write_text(nested + "\n\n")  # a new stamp
    assert loader.load_file(path)[0].name == "nested"
