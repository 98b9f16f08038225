"""Numbers, settings and commands the README (and the pages it sends readers to) state,
checked against the code that makes them."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from aromcp_workflows.cli.entry import build_parser
from aromcp_workflows.definition import WorkflowLoader, WorkflowResolver, check
from aromcp_workflows.store import open_store
from tests.e2e.e2e_helpers import FIX_SUMMARY, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def section(title: str) -> str:
    """The README's text from the heading `## title` to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, re.S | re.M)
    assert match, f"the README has no section '## {title}'"
    return match.group(1)


def test_the_demo_project_has_as_many_changed_files_as_the_readme_says(tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    subprocess.run([sys.executable, "examples/demo_project.py", str(demo)], cwd=ROOT, check=True,
                   capture_output=True)
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=demo,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    said = re.search(r"with (\d+) changed files \((\d+) that `standards:fix` handles", " ".join(README.split()))
    assert said, "the README no longer says how many files the demo changes"
    assert int(said.group(1)) == len(changed)
    assert f"complete: {said.group(2)} files in" in FIX_SUMMARY  # what the e2e test sees standards:fix fix


def test_the_docs_state_the_stores_default_synchronous_mode(tmp_path: Path, monkeypatch) -> None:
    """The durability page says which mode is the default, and no page claims another one."""
    monkeypatch.delenv("AROMCP_WORKFLOWS_STORE_SYNC", raising=False)
    default = open_store(tmp_path / "s.sqlite3").synchronous
    durability = " ".join((ROOT / "docs" / "store-and-claude.md").read_text(encoding="utf-8").split())
    assert f"`synchronous={default}` by default" in durability
    for page in PAGES:
        claimed = set(re.findall(r"`synchronous=(\w+)`", page.read_text(encoding="utf-8")))
        assert claimed <= {default}, f"{page.relative_to(ROOT)} also claims synchronous={claimed - {default}}"


def _subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every leaf command of the CLI (`store migrate` included), by its full name."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = _subcommands(sub, f"{prefix}{name} ")
                found.update(nested or {f"{prefix}{name}": sub})
    return found


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def test_the_command_table_has_every_command_and_option() -> None:
    """Each command has a row, and each of its options is in its row or in the shared
    paragraph under the table (`--store`, `--project-dir`, ...)."""
    text = section("Command line")
    rows = [line for line in text.splitlines() if line.startswith("| `aromcp-workflows ")]
    shared = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
    parser = build_parser()
    missing = [option for action in parser._actions for option in action.option_strings[:1]
               if option != "-h" and not _mentions(shared, option)]
    for name, sub in _subcommands(parser).items():
        mine = "\n".join(row for row in rows if re.search(rf"`(aromcp-workflows )?{name}\b", row))
        if not mine:
            missing.append(f"a row for `{name}`")
        missing += [f"{name} {action.option_strings}" for action in sub._actions
                    if action.option_strings and action.option_strings[0] != "-h"
                    and not any(_mentions(mine, option) or _mentions(shared, option)
                                for option in action.option_strings)]
    assert not missing, f"the README's command table lacks {missing}"


def test_the_first_workflow_in_the_readme_is_valid(tmp_path: Path) -> None:
    block = re.search(r"^```yaml\n(name: .*?)^```", section("A first workflow"), re.S | re.M)
    assert block, "the README's first workflow is not a ```yaml block starting with name:"
    name = re.search(r'^name: "([^"]+)"', block.group(1), re.M)
    assert name
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / f"{name.group(1)}.yaml").write_text(block.group(1), encoding="utf-8")
    loader = WorkflowLoader(WorkflowResolver(project_dir=tmp_path / "project", home=tmp_path / "home"))
    report = check(name.group(1), loader)
    assert [str(problem) for problem in report.errors + report.warnings] == []
    for command in re.findall(r"^aromcp-workflows (\w+) demo", section("A first workflow"), re.M):
        assert command in _subcommands(build_parser()), command
