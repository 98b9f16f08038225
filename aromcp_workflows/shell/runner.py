"""Running `shell_command` steps on the server: one of the effects the instance layer performs.

Commands run with `bash -c` in the project root (or `working_dir`), in a session of their
own so that a timeout kills the whole process group, and with stdout/stderr capped so a
chatty command cannot exhaust memory or flood the agent.  Output and exit status go to
files of a run directory (`shell.rundir`), not to pipes: a command whose server is killed
finishes, and the next server on the machine takes its result (`adopt`) instead of
running it a second time.  A command that cannot be started
at all (an argument list too long for the kernel, a NUL byte, a missing shell) is a failed
`ShellResult` with `spawn_error` set — never an exception — so the step's `on_error`
decides what happens.

The spawn path is lean because a `true` step should cost about what a bare spawn costs
(`benchmarks/bench_shell.py`): no helper threads, no polling.  The calling thread waits in
one `poll` on a pidfd of the child, with a timeout that is the next thing due (the
deadline, a progress report, a periodic duty such as renewing a lease); a background
process the command left holding its output is waited for (within the timeout) by its
lock on the output files.
`start_new_session=True` (not a `preexec_fn`) keeps CPython's vfork fast path.

A command that dash runs with exactly bash's result (`shell.dialect`: simple commands,
plain quoting, known programs, nothing in the environment that changes bash) is executed by
dash, which starts in about 0.6 of bash's time, with argv[0] still "bash";
`AROMCP_SHELL_FAST=off` runs everything with bash.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aromcp_workflows.interpreter import ShellResult
from aromcp_workflows.safety import command_environment
from aromcp_workflows.shell.dialect import dash_text, sh_path
from aromcp_workflows.shell.live import stop_groups
from aromcp_workflows.shell.rundir import OUTPUT_CAP as OUTPUT_CAP  # the cap, where callers look for it
from aromcp_workflows.shell.rundir import Output, RunDir, needs_subshell
from aromcp_workflows.shell.waiting import CommandWait, kill_group
from aromcp_workflows.shell.waiting import Periodic as Periodic  # where callers look for it

DEFAULT_TIMEOUT_MS = 10 * 60 * 1000
ProgressCallback = Callable[[float, str], None]
PROGRESS_INTERVAL_ENV = "AROMCP_PROGRESS_INTERVAL"  # seconds between progress reports (default 1)
FAST_SHELL_ENV = "AROMCP_SHELL_FAST"  # "auto" (default): dash where it gives bash's result; "off": bash always

_running: set[int] = set()  # process groups of the commands running now
_running_lock = threading.RLock()  # re-entrant: the shutdown takes it in a signal handler
_running_changed = threading.Condition(_running_lock)  # a spawn under way was registered (or failed)
_spawning = 0  # spawns under way, not in `_running` yet: a shutdown waits for them (`SPAWNS_WAIT_S`)
_stopping = threading.Event()
SPAWNS_WAIT_S = 2.0  # how long a shutdown waits for the spawns under way (one takes about 0.2 ms)
_BASH_PATHS: dict[str, str] = {}  # PATH value -> bash's absolute path on it ("bash": let the child search)
_DEVNULL_FD: int | None = None


class ShellInterrupted(RuntimeError):
    """The process is shutting down: the command was stopped and its result must not be used."""


def progress_interval() -> float:
    """Seconds between progress reports of a running command; read at each command."""
    try:
        return max(0.05, float(os.environ.get(PROGRESS_INTERVAL_ENV, "1")))
    except ValueError:
        return 1.0


def stop_all_commands(grace_s: float = 1.0) -> int:
    """Stop every running command's whole process group and refuse new ones (shutdown).

    SIGTERM first, SIGKILL for what is left after `grace_s`.  The threads waiting on
    those commands raise `ShellInterrupted`, so no half-run command's result is stored:
    the step stays started, and runs again when the instance is resumed."""
    with _running_changed:
        _stopping.set()
        _running_changed.wait_for(lambda: _spawning == 0, SPAWNS_WAIT_S)  # else one started now escapes
        groups = list(_running)
    stop_groups(groups, grace_s)
    return len(groups)


@contextlib.contextmanager
def _spawn_slot() -> Iterator[None]:
    """A spawn under way, counted until its process group is in `_running` (or it failed):
    a shutdown that came meanwhile waits for it, so the command it started is stopped too.
    Refused once the shutdown began."""
    global _spawning
    with _running_changed:
        if _stopping.is_set():
            raise ShellInterrupted("the server is shutting down; the command was not started")
        _spawning += 1
    try:
        yield
    finally:
        with _running_changed:
            _spawning -= 1
            _running_changed.notify_all()


@dataclass
class RunningCommand:
    """A command started in its run directory and not waited for yet (`start_command`):
    the driver may commit the command's claim while it runs, then wait (`wait_command`)."""

    run_dir: RunDir
    process: subprocess.Popen[bytes]
    started: float  # time.monotonic() just before the spawn
    timeout_ms: int | None


def run_shell(command: str, cwd: Path, *, env: dict[str, str] | None = None,
              timeout_ms: int | None = None, progress: ProgressCallback | None = None,
              periodic: Sequence[Periodic] = (), run_dir: RunDir | None = None,
              meta: dict[str, Any] | None = None) -> ShellResult:
    """Run `command` with bash; never raises for the command's own failures.

    With `run_dir` (named in the step's claim before the call), the command's files stay
    there for the caller to remove once its result is committed: until then a later server
    can take the result from them (`adopt`).  `meta` is recorded there before it starts.
    Without one, a private run directory is used and removed."""
    own, run_dir = run_dir is None, run_dir or RunDir.new()
    started = start_command(command, cwd, env=env, timeout_ms=timeout_ms, run_dir=run_dir, meta=meta or {})
    if isinstance(started, ShellResult):
        return started
    result = wait_command(started, progress, periodic)
    if own:
        run_dir.remove()
    return result


def start_command(command: str, cwd: Path, *, env: dict[str, str] | None, timeout_ms: int | None,
                  run_dir: RunDir, meta: dict[str, Any]) -> RunningCommand | ShellResult:
    """Spawn `command` in `run_dir` (created here, with `meta`) and return at once; a
    command that cannot be started is its failed `ShellResult` (`spawn_error`), its run
    directory removed."""
    if not cwd.is_dir():
        return ShellResult("", f"working directory does not exist: {cwd}", 127, 0.0)
    with _spawn_slot():
        started = time.monotonic()
        try:
            process = _spawn(command, cwd, env, run_dir, meta)
        except FileExistsError:  # a run directory named after its command (`RunDir.for_command`) is
            raise  # someone else's: not ours to remove
        except (OSError, ValueError) as exc:  # E2BIG, ENOENT, "embedded null byte", ...
            run_dir.remove()
            reason = _spawn_reason(exc, command, env)
            return ShellResult("", reason, 127, (time.monotonic() - started) * 1000, spawn_error=reason)
        run_dir.note_started(process.pid)
        with _running_lock:
            _running.add(process.pid)
    return RunningCommand(run_dir, process, started, timeout_ms)


def wait_command(started: RunningCommand, progress: ProgressCallback | None = None,
                 periodic: Sequence[Periodic] = ()) -> ShellResult:
    """Wait for a command `start_command` started (its timeout counted from its start) and
    take its result; its run directory is left for the caller."""
    process, run_dir, timeout_ms = started.process, started.run_dir, started.timeout_ms
    deadline = started.started + (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
    waiting = CommandWait(process.pid, run_dir, deadline, started.started, _duties(periodic, progress), process)
    try:
        timed_out = waiting.run()
    except BaseException:  # a duty raised (or the thread was interrupted): leave no command behind
        kill_group(process.pid, process)
        raise
    finally:
        with _running_lock:
            _running.discard(process.pid)
    if _stopping.is_set():
        run_dir.remove()  # stopped on purpose: it runs again on resume, not adopted as killed
        raise ShellInterrupted(f"the server is shutting down; the command was stopped after "
                               f"{time.monotonic() - started.started:.1f} s and will run again on resume")
    code = 124 if timed_out else _exit_code(process.returncode)
    return collect(run_dir, code, started.started, timed_out, timeout_ms, waiting.dropped, waiting.output)


def stop_command(started: RunningCommand) -> None:
    """Kill a command `start_command` started that nobody will wait for (its claim went
    elsewhere), reap it, and remove its run directory."""
    kill_group(started.process.pid, started.process)
    with _running_lock:
        _running.discard(started.process.pid)
    started.run_dir.remove()


def adopt(run_dir: RunDir, deadline_s: float, timeout_ms: int | None,
          periodic: Sequence[Periodic] = ()) -> ShellResult | None:
    """The result of a command another server (now gone) started in `run_dir`, waiting for
    it to end: by its wall-clock deadline `deadline_s` (`time.time()`) it is killed as its
    own server would have.  None when there is no result to take: it never started, or it
    was killed before it could record its exit status (with its machine or container, most
    likely); the caller runs it (again: at least once)."""
    started = time.monotonic()
    dropped: dict[str, int] = {}
    timed_out, output = False, None
    if run_dir.state() == "running":
        waiting = CommandWait(run_dir.wrapper_pid(), run_dir, started + max(0.0, deadline_s - time.time()), started,
                        list(periodic))
        timed_out, dropped, output = waiting.run(), waiting.dropped, waiting.output
    status = run_dir.status()
    if status is None and not timed_out:
        return None
    return collect(run_dir, 124 if timed_out else status or 0, started, timed_out, timeout_ms, dropped, output)


def collect(run_dir: RunDir, code: int, started: float, timed_out: bool, timeout_ms: int | None,
            dropped: dict[str, int], output: Output | None = None) -> ShellResult:
    """The `ShellResult` of a command that has ended, read from its run directory (unless
    its `output` was read already, on the wait's last look)."""
    (stdout, cut_out), (stderr, cut_err) = output or (run_dir.output("out", dropped), run_dir.output("err", dropped))
    if timed_out:
        stderr += f"\n[killed: the command ran longer than its timeout of {timeout_ms or DEFAULT_TIMEOUT_MS} ms]"
    return ShellResult(stdout, stderr, code, (time.monotonic() - started) * 1000, timed_out, cut_out or cut_err)


def _exit_code(returncode: int | None) -> int:
    """The wrapper's exit code; a wrapper killed by a signal as a shell reports it (128 + n)."""
    if returncode is None:
        return 137
    return 128 - returncode if returncode < 0 else returncode


def _duties(periodic: Sequence[Periodic], progress: ProgressCallback | None) -> list[Periodic]:
    duties = list(periodic)
    if progress is not None:
        duties.append(Periodic(progress_interval(),
                               lambda elapsed: progress(elapsed, f"command still running after {elapsed:.0f} s")))
    return duties


def _spawn(command: str, cwd: Path, env: dict[str, str] | None, run_dir: RunDir,
           meta: dict[str, Any]) -> subprocess.Popen[bytes]:
    """`bash -c <wrapper> bash command` in its own session (vfork stays usable: no
    `preexec_fn`), stdin from /dev/null, stdout and stderr to the run directory's files, the
    environment without the server's credentials (`safety.environment`), copied only when
    something is left out or the step adds to it.  The wrapper is the shell that runs
    the command, recording its status from an EXIT trap (`rundir.TRAP_WRAPPER`), unless the
    text could replace that shell or its trap."""
    full_env = command_environment(env)
    bash = _bash_for(full_env)
    subshell = needs_subshell(command, env or {})
    shell = None if bash == "bash" or subshell else _fast_shell(command, full_env, cwd)  # bash not found: its error
    out, err = run_dir.open_streams(meta)
    try:
        if shell is not None:  # argv[0] stays "bash": $0 and message prefixes are bash's; the text: see dash_text
            try:
                return _popen(shell[1], run_dir.wrapper(), shell[0], cwd, full_env, out, err)
            except FileNotFoundError:
                sh_path.cache_clear()  # dash went away: bash runs it, and /bin/sh is looked at again next time
        wrapper = run_dir.wrapper(subshell)
        try:
            return _popen(command, wrapper, bash, cwd, full_env, out, err)
        except FileNotFoundError:
            if bash == "bash":
                raise
            _BASH_PATHS.clear()  # bash moved since it was looked up: look it up again, once
            return _popen(command, wrapper, None, cwd, full_env, out, err)
    finally:
        os.close(out)
        os.close(err)


def _popen(text: str, wrapper: str, executable: str | None, cwd: Path, env: dict[str, str] | None,
           out: int, err: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["bash", "-c", wrapper, "bash", text], executable=executable, cwd=cwd, env=env,
                            stdin=_devnull(), stdout=out, stderr=err, start_new_session=True)


def _fast_shell(command: str, env: dict[str, str] | None, cwd: Path) -> tuple[str, str] | None:
    """dash's path and the text to give it, when dash gives exactly what bash gives for this
    command (it starts in about 0.6 of bash's time; `shell.dialect` decides), else None.
    The text never `exec`s its last program: the shell must outlive it to record its status.
    FAST_SHELL_ENV=off: never."""
    sh = sh_path()
    if sh is None or os.environ.get(FAST_SHELL_ENV, "auto") == "off":
        return None
    text = dash_text(command, os.environ if env is None else env, cwd, exec_last=False)
    return None if text is None else (sh, text)


def _bash_for(env: dict[str, str] | None) -> str:
    """bash's absolute path on the PATH the command gets, looked up once per PATH: the child
    then execs it directly instead of trying each PATH entry in turn (about 0.08 ms with
    eleven entries).  A PATH with a relative entry depends on the working directory, so
    it is left to the child's own search."""
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    found = _BASH_PATHS.get(path)
    if found is None:
        relative = any(not entry.startswith("/") for entry in path.split(os.pathsep))
        found = "bash" if relative else (shutil.which("bash", path=path) or "bash")
        _BASH_PATHS[path] = found
    return found


def _devnull() -> int:
    """One read-only /dev/null descriptor for every command's stdin (not inherited itself;
    the child gets it as fd 0), instead of opening and closing one per command."""
    global _DEVNULL_FD
    with _running_lock:
        if _DEVNULL_FD is None:
            _DEVNULL_FD = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return _DEVNULL_FD


def _spawn_reason(exc: BaseException, command: str, env: dict[str, str] | None) -> str:
    """Why a command could not be started, in words an author can act on."""
    # Python's own text is the only handle on this ValueError ("embedded null byte"): one of
    # the two messages of another library this package reads (the other: store/pg_connect.py)
    if isinstance(exc, ValueError) and "null" in str(exc):
        return "the command or its environment contains a NUL byte, which no program can receive"
    if isinstance(exc, OSError) and exc.errno == 7:  # E2BIG
        size = len(command.encode("utf-8", "replace")) + sum(len(k) + len(v) for k, v in (env or {}).items())
        return (f"the command is too long for the operating system ({size} bytes with its environment): "
                "pass large values through a file instead of the command line")
    return f"{type(exc).__name__}: {exc}"
