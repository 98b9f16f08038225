"""The plugin launcher's venvs against what happens on users' machines: a plugin update while
a server runs, a venv folder the user cannot delete, a lock file the user cannot write.

Each test runs `plugin/server/launch.py` as Claude Code does (a real venv made by pip, a
real server over stdio). Where a file must be out of the launcher's reach, the launcher
runs as `nobody` when the tests run as root (root ignores permission bits).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_helpers import (
    PLUGIN,
    SYSTEM_PYTHON,
    give_to,
    launcher_env,
    other_user,
    plugin_copy,
    prepare,
    start_launcher,
    tool_text,
    venv_of,
)

MARKER = "aromcp-workflows-plugin.json"


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp folder another user can enter (pytest's own is private to the tester)."""
    path = Path(tempfile.mkdtemp(prefix="aromcp-launcher-"))
    path.chmod(0o755)
    yield path
    for root, dirs, _ in os.walk(path):  # undo the read-only folders the tests made
        for name in dirs:
            (Path(root) / name).chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


def out_of_reach(path: Path) -> None:
    """Read-only for everyone: with the launcher running as another user (or as a non-root
    tester who does not chmod back), it cannot delete or write `path`."""
    path.chmod(0o555 if path.is_dir() else 0o444)


def one_line(stderr: str) -> str:
    """The launcher's own lines: every one starts with its name; no traceback among them."""
    assert "Traceback" not in stderr, stderr
    return "\n".join(line for line in stderr.splitlines() if line.startswith("aromcp-workflows plugin:"))


def test_an_update_keeps_the_venv_of_a_running_server(tmp_path: Path) -> None:
    """Claude Code updates the plugin (a new folder) while a session's server runs from the
    old version's venv: the new version gets its own venv and the old one stays until no
    server uses it. Before the fix the update replaced the one venv under the server."""
    data = tmp_path / "data"
    old, new = plugin_copy(tmp_path / "old"), plugin_copy(tmp_path / "new")
    made = prepare(old, data)
    assert made.returncode == 0, made.stderr[-3000:]
    with start_launcher(old, data, tmp_path) as server:
        server.handshake()
        assert "error" not in server.request("tools/call", {"name": "workflow_list", "arguments": {}})
        venv = venv_of(server.proc.pid)
        before = (venv.stat().st_ino, (venv / MARKER).read_text())
        updated = prepare(new, data)  # the new version's first start
        assert updated.returncode == 0, updated.stderr[-3000:]
        assert venv.is_dir() and (venv.stat().st_ino, (venv / MARKER).read_text()) == before
        # the first JavaScript transform imports V8 from the venv only now
        answer = server.request("tools/call", {"name": "workflow_test_transformation",
                                               "arguments": {"transform": "input * 2", "input": 21}})
        assert answer["result"]["structuredContent"]["output"] == 42, tool_text(answer)
    again = prepare(new, data)  # no server uses the old venv any more: it goes
    assert again.returncode == 0 and "installing" not in again.stderr, again.stderr[-3000:]
    assert not venv.exists()
    assert [p.name for p in (data / "venvs").iterdir() if p.is_dir()] == [venv_of_ready(data).name]


def venv_of_ready(data: Path) -> Path:
    [marker] = (data / "venvs").glob(f"*/{MARKER}")
    return marker.parent


def test_an_undeletable_old_venv_is_one_line_and_no_reinstall(shared_tmp: Path) -> None:
    """A `venv/` left by an earlier launcher that this user cannot delete (made by sudo, say):
    before, every start installed again and ended in a traceback; now the plugin's own venv
    is made once and the old folder gets one line saying how to remove it."""
    user = other_user()
    data = shared_tmp / "data"
    stale = data / "venv" / "bin"
    stale.mkdir(parents=True)
    (stale / "python").write_text("")
    give_to(data, user)
    out_of_reach(data / "venv")
    out_of_reach(stale)
    first = prepare(PLUGIN, data, user=user)
    assert first.returncode == 0, first.stderr[-3000:]
    lines = one_line(first.stderr)
    assert f"rm -rf '{data / 'venv'}'" in lines, lines
    second = prepare(PLUGIN, data, user=user)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "installing" not in one_line(second.stderr), second.stderr
    assert (data / "venv" / "bin" / "python").exists()  # never touched beyond what it could


def test_an_unusable_install_lock_is_one_line(shared_tmp: Path) -> None:
    """The install lock is a file this user can neither write nor read: one line that names
    it and says what to do, at once (no pip run), and the same on the next start. A lock
    file that is only readable still serves (flock needs no write access)."""
    user = other_user()
    data = shared_tmp / "data"
    data.mkdir()
    lock = data / "install.lock"
    lock.write_text("")
    give_to(data, user)
    lock.chmod(0)
    for _ in range(2):
        proc = prepare(PLUGIN, data, user=user)
        assert proc.returncode == 1
        lines = one_line(proc.stderr)
        assert len(lines.splitlines()) == 1 and str(lock) in lines and "/mcp" in lines, proc.stderr
        assert "chown" in lines and "installing" not in proc.stderr
    out_of_reach(lock)
    proc = prepare(PLUGIN, data, user=user)
    assert proc.returncode == 0 and "ready:" in one_line(proc.stderr), proc.stderr
    assert stat.S_IMODE(lock.stat().st_mode) == 0o444


def test_an_undeletable_unfinished_venv_is_one_line_before_pip(shared_tmp: Path) -> None:
    """This version's venv folder is there but unfinished (no marker) and this user cannot
    delete it: one line saying how to remove it, before pip runs, on every start."""
    user = other_user()
    data = shared_tmp / "data"
    data.mkdir()
    give_to(data, user)
    where = subprocess.run([SYSTEM_PYTHON, "-c", "import venvs; print(venvs.venv_dir(venvs.data_dir()))"],
                           cwd=PLUGIN / "server", capture_output=True, text=True, env=launcher_env(data), check=True)
    unfinished = Path(where.stdout.strip())
    (unfinished / "bin").mkdir(parents=True)
    (unfinished / "bin" / "python").write_text("")
    out_of_reach(unfinished / "bin")
    out_of_reach(unfinished)
    for _ in range(2):
        proc = prepare(PLUGIN, data, user=user)
        assert proc.returncode == 1
        lines = one_line(proc.stderr)
        assert len(lines.splitlines()) == 1 and f"rm -rf '{unfinished}'" in lines and "/mcp" in lines, proc.stderr
        assert "installing" not in proc.stderr
    assert (unfinished / "bin" / "python").exists()
