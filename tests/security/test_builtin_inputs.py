"""The built-in workflows take their inputs as data, except where running them is the point.

The attack: `standards:check` and `standards:fix` put the `base_ref` input into
`git diff --name-only {{ inputs.base_ref }}`.  The value is shell-quoted, so it cannot
start another command, but git reads an argument that starts with `--` as an option:
`base_ref: "--output=/any/file"` made git write to any file the user can write.  Whoever
may start a workflow (an HTTP client, an agent told to by a file it read) could.  Now the
command says `--end-of-options` before the value, and git refuses it as a revision.

`ci:retry-tests` runs its `command` input as a command on purpose (docs/security.md says
so); it is not "fixed" here.

A real server in memory, real git and bash.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from lead_helpers import ok, server_for
from mcp import Client

from aromcp_workflows.app.service import WorkflowService


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "i"],
                   cwd=path, check=True)
    (path / "a.ts").write_text("let a = 1\n")
    return path


@pytest.mark.parametrize("workflow", ["standards:check", "standards:fix"])
async def test_base_ref_cannot_be_a_git_option(tmp_path: Path, repo: Path, workflow: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    written = tmp_path / "written-by-git"
    service = WorkflowService(project_dir=repo, store_path=tmp_path / "s.sqlite3", home=home)
    async with Client(server_for(service)) as client:
        started = await ok(client, "workflow_start", {"workflow": workflow,
                                                      "inputs": {"base_ref": f"--output={written}"}})
        await ok(client, "workflow_get_next_step", {"workflow_id": started["workflow_id"]})
    assert not written.exists(), "git took the input as an option and wrote a file"


async def test_base_ref_still_names_a_revision(tmp_path: Path, repo: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    service = WorkflowService(project_dir=repo, store_path=tmp_path / "s.sqlite3", home=home)
    wid = service.start("standards:check", {"base_ref": "HEAD"}).workflow_id
    service.next_step(wid)
    assert service.state_read(wid, ["raw.changed"]).state == {"raw.changed": ["a.ts"]}
