"""A PostgreSQL password given with `--store` leaves the command line at once (security issue
"Trust, second round", item 7).

`/proc/PID/cmdline` is readable by every local user (`ps -ef` shows it), for the whole life of
the process: `aromcp-workflows serve --store postgresql://user:PASSWORD@…` published the
password to everyone on the machine for as long as the server ran.  The server now starts
itself again (same process id, same stdio) with the URL in its environment, which only its
owner can read, and without `--store` among its arguments.

A real server process on a real PostgreSQL cluster: the test reads the process's command
line from /proc while it serves, and checks the store still works through the URL (the
cluster trusts local connections, so any password is accepted).  `redact()` also hides
a password whose parameter name is percent-encoded (`pass%77ord=`, which libpq decodes).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from pg_cluster import PgCluster, find_bin_dir, unavailable
from srv_helpers import make_project, server_env

from aromcp_workflows.store.pg_connect import redact_url as redact

PASSWORD = "Pg-S3cret-7a1c"
COMMAND = Path(sys.executable).parent / "aromcp-workflows"  # what a user (or Claude Code) starts
ENV_DUMP = """name: env_dump
steps:
  - id: dump
    type: shell_command
    command: "env > env.txt; echo done"
  - id: ask
    type: agent_prompt
    prompt: "done?"
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (no pg_ctl; apt-get install -y postgresql)")
    started = PgCluster(bin_dir).start()  # type: ignore[arg-type]
    yield started
    started.stop()


def with_password(url: str, form: str) -> str:
    """The cluster's URL with PASSWORD in it, the way a user would write it."""
    if form == "userinfo":
        return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")
    return f"{url}&pass%77ord={PASSWORD}"  # libpq decodes the parameter name: 'password'


class Stdio:
    """Blocking JSON-RPC over the server's stdin/stdout, one line each way."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self.next_id = proc, 0

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method,
                                          "params": params}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the server closed its stdout; stderr: {self.proc.stderr.read() if self.proc.stderr else ''}"
        reply = json.loads(line)
        assert "result" in reply, reply
        return dict(reply["result"])

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = self.call("tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        return dict(result["structuredContent"])


@pytest.mark.parametrize("form", ["userinfo", "query"])
@pytest.mark.parametrize("spelling", ["--store URL", "--store=URL"])
def test_the_password_leaves_the_command_line_and_the_store_still_works(
        cluster: PgCluster, tmp_path: Path, form: str, spelling: str) -> None:
    url = with_password(cluster.create_database(), form)
    project = make_project(tmp_path / "project", {"env_dump": ENV_DUMP})
    home = tmp_path / "home"
    home.mkdir()
    store_args = ["--store", url] if spelling == "--store URL" else [f"--store={url}"]
    proc = subprocess.Popen([str(COMMAND), "--project-dir", str(project), "serve", *store_args], cwd=project,
                            env=server_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        client = Stdio(proc)
        client.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                   "clientInfo": {"name": "test", "version": "0"}})
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        shown = subprocess.run(["ps", "-o", "args=", "-p", str(proc.pid)], capture_output=True, text=True).stdout
        started = client.tool("workflow_start", {"workflow": "env_dump"})
        step = client.tool("workflow_get_next_step", {"workflow_id": started["workflow_id"]})
        listed = client.tool("workflow_status", {})
    finally:
        proc.kill()
        proc.wait()
    assert PASSWORD not in cmdline and PASSWORD not in shown, cmdline
    assert "serve" in cmdline and "--project-dir" in cmdline, cmdline  # the same command, less the URL
    assert step["step"]["id"] == "ask", step  # the shell step ran
    assert [row["workflow_id"] for row in listed["instances"]] == [started["workflow_id"]]  # in PostgreSQL
    assert not (home / ".local" / "share" / "aromcp-workflows").exists()  # no SQLite fallback
    env_text = (project / "env.txt").read_text(encoding="utf-8")
    assert "AROMCP_WORKFLOWS_STORE=" in env_text  # where the URL went: the owner's environment, as documented


def test_redact_hides_every_spelling_of_the_password() -> None:
    for url in (f"postgresql://u:{PASSWORD}@/db?host=/x", f"postgresql://u@/db?host=/x&password={PASSWORD}",
                f"postgresql://u@/db?pass%77ord={PASSWORD}&host=/x", f"postgres://u@/db?PASSWORD={PASSWORD}",
                f"postgresql://u@/db?%70assword={PASSWORD}"):
        assert PASSWORD not in redact(url), url
    assert redact(f"postgresql://u@/db?pass%77ord={PASSWORD}&host=/x") == "postgresql://u@/db?pass%77ord=***&host=/x"
