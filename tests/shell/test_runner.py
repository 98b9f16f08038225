"""The lean spawn path of server-side commands keeps every guarantee of the old one.

`shell.runner.run_shell` waits on both pipes and the child's exit in one `poll` on the calling
thread.  These run real bash commands and check what could break with that design: a
command filling stderr before it writes stdout (one pipe left unread would deadlock),
a command that closes its output and keeps running, a background grandchild holding the
pipes, the group kill on timeout, periodic duties while it runs, no helper threads, and
bash found again when it moved since it was looked up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aromcp_workflows.shell import runner as shell
from aromcp_workflows.shell.runner import OUTPUT_CAP, Periodic, run_shell
from tests.processes import group_members


def gone(pid: int) -> bool:
    """Whether a process no longer runs (a zombie still waiting for its reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def wait_gone(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return False


def test_both_streams_are_read_together_and_capped(tmp_path: Path) -> None:
    big = OUTPUT_CAP + 200_000  # far more than a pipe buffer: stderr must be drained before stdout is written
    result = run_shell(f"head -c {big} /dev/zero | tr '\\0' e >&2; head -c {big} /dev/zero | tr '\\0' o; exit 4",
                       tmp_path, timeout_ms=60_000)
    assert result.exit_code == 4 and not result.timed_out
    assert result.truncated
    assert result.stdout.startswith("o" * OUTPUT_CAP) and "200000 more bytes not kept" in result.stdout
    assert result.stderr.startswith("e" * OUTPUT_CAP) and "200000 more bytes not kept" in result.stderr


def test_output_of_a_background_grandchild_is_waited_for(tmp_path: Path) -> None:
    result = run_shell("(sleep 0.3; echo late) & echo early", tmp_path, timeout_ms=30_000)
    assert result.exit_code == 0
    assert result.stdout == "early\nlate\n"


def test_a_command_that_closes_its_output_is_still_timed_out(tmp_path: Path) -> None:
    result = run_shell("exec >&- 2>&-; echo $$ > pid; sleep 30", tmp_path, timeout_ms=400)
    assert result.timed_out and result.exit_code == 124
    assert "timeout of 400 ms" in result.stderr
    assert wait_gone(int((tmp_path / "pid").read_text()))


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    result = run_shell("sleep 30 & echo $! > grandchild; echo before; sleep 30", tmp_path, timeout_ms=400)
    assert result.timed_out and result.stdout == "before\n"
    assert wait_gone(int((tmp_path / "grandchild").read_text())), "the background grandchild survived the timeout"


def test_periodic_duties_run_on_the_calling_thread_and_no_thread_is_started(tmp_path: Path) -> None:
    seen: list[tuple[float, str, int]] = []
    caller = threading.current_thread().name
    before = threading.active_count()

    def duty(elapsed: float) -> None:
        seen.append((elapsed, threading.current_thread().name, threading.active_count()))

    reports: list[str] = []
    result = run_shell("sleep 0.5; echo done", tmp_path, timeout_ms=30_000,
                       progress=lambda _elapsed, message: reports.append(message),
                       periodic=[Periodic(0.1, duty)])
    assert result.stdout == "done\n"
    assert len(seen) >= 3, seen
    assert all(name == caller and count == before for _, name, count in seen), seen
    assert [elapsed for elapsed, _, _ in seen] == sorted(elapsed for elapsed, _, _ in seen)


def test_progress_reports_while_a_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shell.PROGRESS_INTERVAL_ENV, "0.1")
    reports: list[float] = []
    run_shell("sleep 0.45", tmp_path, progress=lambda elapsed, _message: reports.append(elapsed))
    assert len(reports) >= 2 and all(later > earlier for earlier, later in zip(reports, reports[1:], strict=False))


def test_a_step_environment_is_added_to_the_servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AROMCP_TEST_INHERITED", "from-server")
    result = run_shell('echo "$AROMCP_TEST_INHERITED $STEP_VALUE $0"', tmp_path, env={"STEP_VALUE": "from-step"})
    assert result.stdout == "from-server from-step bash\n"


def test_bash_that_moved_since_it_was_looked_up_is_found_again(tmp_path: Path) -> None:
    real = shutil.which("bash")
    assert real is not None
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "bash").symlink_to(real)
    path = f"{first}:{second}"
    assert run_shell("echo one", tmp_path, env={"PATH": path}).stdout == "one\n"
    assert shell._BASH_PATHS[path] == str(first / "bash")
    (first / "bash").unlink()
    (second / "bash").symlink_to(real)
    result = run_shell("echo two", tmp_path, env={"PATH": path})
    assert result.stdout == "two\n" and result.spawn_error is None


def test_a_missing_bash_is_a_spawn_error(tmp_path: Path) -> None:
    result = run_shell("echo never", tmp_path, env={"PATH": str(tmp_path / "empty")})
    assert result.spawn_error is not None and "FileNotFoundError" in result.spawn_error
    assert result.exit_code == 127


def _open_descriptors() -> dict[str, str]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed meanwhile
            pass
    return found


def test_no_descriptor_is_left_open(tmp_path: Path) -> None:
    """No pipe, pidfd or /dev/null descriptor of a command outlives it.  Compared by what the
    descriptors are, not by their count: objects of earlier tests that the garbage collector
    closes meanwhile (it once made the count drop) must not decide it."""
    run_shell("true", tmp_path)  # the shared /dev/null descriptor is opened once, here
    before = _open_descriptors()
    for _ in range(20):
        run_shell("echo out; echo err >&2", tmp_path)
    run_shell("sleep 5", tmp_path, timeout_ms=100)
    new = {fd: target for fd, target in _open_descriptors().items() if before.get(fd) != target}
    ours = {fd: target for fd, target in new.items()
            if target.startswith("pipe:") or "pidfd" in target or target == os.devnull}
    assert ours == {}, f"descriptors left open by commands: {ours}"


def test_a_duty_that_raises_leaves_no_command_behind(tmp_path: Path) -> None:
    def broken(_elapsed: float) -> None:
        raise RuntimeError("the client went away")

    with pytest.raises(RuntimeError, match="went away"):
        run_shell("echo $$ > pid; sleep 30", tmp_path, timeout_ms=60_000, periodic=[Periodic(0.2, broken)])
    assert wait_gone(int((tmp_path / "pid").read_text()))


# A shutdown (SIGTERM to the server: `stop_all_commands` in its handler, then exit) while
# another thread is between spawning a command and registering its process group.  The
# window is about 0.2 ms; the probe widens it to 0.5 s by wrapping `_spawn`, in a process of
# its own (a shutdown is for good: no later command would start in this one).
SHUTDOWN_PROBE = """
import sys, threading, time
from pathlib import Path
from aromcp_workflows.shell import runner
from aromcp_workflows.shell.rundir import RunDir

real, spawned = runner._spawn, threading.Event()

def slow(*args, **kwargs):
    process = real(*args, **kwargs)
    print(process.pid, flush=True)
    spawned.set()
    time.sleep(0.5)
    return process

runner._spawn = slow
start = threading.Thread(target=lambda: runner.start_command(
    "sleep 30", Path(sys.argv[1]), env=None, timeout_ms=None, run_dir=RunDir.new(), meta={}))
start.start()
spawned.wait(10)
print("stopped", runner.stop_all_commands(grace_s=0.5), flush=True)
start.join()
"""


def test_a_shutdown_stops_a_command_that_was_being_started(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(SHUTDOWN_PROBE)
    env = {**os.environ, "AROMCP_COMMANDS_DIR": str(tmp_path / "commands")}
    done = subprocess.run([sys.executable, str(probe), str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env=env, cwd=Path(__file__).resolve().parents[2])
    group = int(done.stdout.split()[0])
    deadline = time.monotonic() + 5
    while group_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = group_members(group)
    for pid in left:  # never leave it behind, even when the test fails
        os.kill(pid, 9)
    assert done.returncode == 0, done.stderr
    assert "stopped 1" in done.stdout, done.stdout
    assert not left, f"the command started during the shutdown still runs: {left}"


def test_an_adopted_command_keeps_the_head_its_dead_server_cut_away(tmp_path: Path) -> None:
    """The waiter of its own child skips the look for a `<stream>.head` file (it made every
    cut itself); a server adopting a command must still look, since the server that died
    may have cut the output already: the result starts with what the command wrote first."""
    run_dir = shell.RunDir.new()
    big = 3 * OUTPUT_CAP
    started = shell.start_command(f"head -c {OUTPUT_CAP} /dev/zero | tr '\\0' a; head -c {big} /dev/zero | tr '\\0' b; "
                                  "sleep 0.5", tmp_path, env=None, timeout_ms=60_000, run_dir=run_dir, meta={})
    assert isinstance(started, shell.RunningCommand)
    try:
        deadline = time.monotonic() + 20
        while run_dir.file("out").stat().st_size < OUTPUT_CAP + big and time.monotonic() < deadline:
            time.sleep(0.02)
        assert run_dir.trim({}), "the dead server's waiter cut the output while the command ran"
        result = shell.adopt(run_dir, time.time() + 30, 60_000)
    finally:
        started.process.wait()
        run_dir.remove()
    assert result is not None and result.exit_code == 0 and result.truncated
    assert result.stdout.startswith("a" * OUTPUT_CAP), result.stdout[:80]
    assert f"{big} more bytes not kept" in result.stdout
