"""Numbers and settings the README states, checked against the code that makes them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from aromcp_workflows.store import open_store
from tests.e2e.e2e_helpers import FIX_SUMMARY, ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


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


def test_the_readme_states_the_stores_default_synchronous_mode(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("AROMCP_WORKFLOWS_STORE_SYNC", raising=False)
    default = open_store(tmp_path / "s.sqlite3").synchronous
    text = " ".join(README.split())
    assert f"`synchronous={default}` by default" in text
    claimed = set(re.findall(r"`synchronous=(\w+)`", text))
    assert claimed == {default}, f"the README also claims synchronous={claimed - {default}}"
