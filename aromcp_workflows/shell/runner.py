"""Running `shell_command` steps on the server: one of the effects the instance layer performs.

Commands run with `bash -c` in the project root (or `working_dir`), in a session of their
own so that a timeout kills the whole process group, and with stdout/stderr capped so a
chatty command cannot exhaust memory or flood the agent.  A command that cannot be started
at all (an argument list too long for the kernel, a NUL byte, a missing shell) is a failed
`ShellResult` with `spawn_error` set — never an exception — so the step's `on_error`
decides what happens.

The spawn path is lean because a `true` step should cost about what a bare spawn costs
(`benchmarks/bench_shell.py`): no helper threads, no polling.  The calling thread waits in
one `poll` on both pipes and on a pidfd of the child, with a timeout that is the next
thing due (the deadline, a progress report, a periodic duty such as renewing a lease).
`start_new_session=True` (not a `preexec_fn`) keeps CPython's vfork fast path.

A command that dash runs with exactly bash's result (`shell.dialect`: simple commands,
plain quoting, known programs, nothing in the environment that changes bash) is executed by
dash, which starts in about 0.6 of bash's time, with argv[0] still "bash";
`AROMCP_SHELL_FAST=off` runs everything with bash.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from aromcp_workflows.interpreter.output import ShellResult
from aromcp_workflows.shell.dialect import dash_text, sh_path

OUTPUT_CAP = 1024 * 1024  # bytes kept per stream
DEFAULT_TIMEOUT_MS = 10 * 60 * 1000
ProgressCallback = Callable[[float, str], None]
PROGRESS_INTERVAL_ENV = "AROMCP_PROGRESS_INTERVAL"  # seconds between progress reports (default 1)
FAST_SHELL_ENV = "AROMCP_SHELL_FAST"  # "auto" (default): dash where it gives bash's result; "off": bash always
READ_CHUNK = 65536
_POLL_IN = select.POLLIN | select.POLLHUP | select.POLLERR

_running: set[int] = set()  # process groups of the commands running now
_running_lock = threading.Lock()
_stopping = threading.Event()
_BASH_PATHS: dict[str, str] = {}  # PATH value -> bash's absolute path on it ("bash": let the child search)
_DEVNULL_FD: int | None = None


class ShellInterrupted(RuntimeError):
    """The process is shutting down: the command was stopped and its result must not be used."""


@dataclass
class Periodic:
    """Something to do every `interval_s` seconds while a command runs, with the elapsed time
    (progress reports, renewing the command's lease).  Runs on the waiting thread."""

    interval_s: float
    action: Callable[[float], None]
    due: float = field(default=0.0, init=False)


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
    _stopping.set()
    with _running_lock:
        groups = list(_running)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signum)
        deadline = time.monotonic() + grace_s
        while signum == signal.SIGTERM and time.monotonic() < deadline and any(_alive(g) for g in groups):
            time.sleep(0.02)
    return len(groups)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def run_shell(command: str, cwd: Path, *, env: dict[str, str] | None = None,
              timeout_ms: int | None = None, progress: ProgressCallback | None = None,
              periodic: Sequence[Periodic] = ()) -> ShellResult:
    """Run `command` with bash; never raises for the command's own failures."""
    if not cwd.is_dir():
        return ShellResult("", f"working directory does not exist: {cwd}", 127, 0.0)
    timeout = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
    started = time.monotonic()
    if _stopping.is_set():
        raise ShellInterrupted("the server is shutting down; the command was not started")
    try:
        process = _spawn(command, cwd, env)
    except (OSError, ValueError) as exc:  # E2BIG, ENOENT, "embedded null byte", ...
        reason = _spawn_reason(exc, command, env)
        return ShellResult("", reason, 127, (time.monotonic() - started) * 1000, spawn_error=reason)
    with _running_lock:
        _running.add(process.pid)
    duties = list(periodic)
    if progress is not None:
        duties.append(Periodic(progress_interval(),
                               lambda elapsed: progress(elapsed, f"command still running after {elapsed:.0f} s")))
    try:
        out, err = _Capture(), _Capture()
        timed_out = _Wait(process, started + timeout, started, duties).run(out, err)
    except BaseException:  # a duty raised (or the thread was interrupted): leave no command behind
        _kill_group(process)
        raise
    finally:
        with _running_lock:
            _running.discard(process.pid)
    if _stopping.is_set():
        raise ShellInterrupted(f"the server is shutting down; the command was stopped after "
                               f"{time.monotonic() - started:.1f} s and will run again on resume")
    stderr = err.text()
    if timed_out:
        stderr += f"\n[killed: the command ran longer than its timeout of {timeout_ms or DEFAULT_TIMEOUT_MS} ms]"
    return ShellResult(out.text(), stderr, process.returncode if not timed_out else 124,
                       (time.monotonic() - started) * 1000, timed_out, out.truncated or err.truncated)


def _spawn(command: str, cwd: Path, env: dict[str, str] | None) -> subprocess.Popen[bytes]:
    """`bash -c command` in its own session (vfork stays usable: no `preexec_fn`), stdin
    from /dev/null, the environment copied only when the step adds to it."""
    full_env = {**os.environ, **env} if env else None
    bash = _bash_for(full_env)
    fast = _fast_shell(command, full_env, cwd) if bash != "bash" else None  # bash not found: keep its error
    if fast is not None:  # argv[0] stays "bash": $0 and message prefixes are bash's; the text: see dash_text
        dash, text = fast
        try:
            return subprocess.Popen(["bash", "-c", text], executable=dash, cwd=cwd, env=full_env,
                                    stdin=_devnull(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except FileNotFoundError:
            sh_path.cache_clear()  # dash went away: bash runs it, and /bin/sh is looked at again next time
    try:
        return subprocess.Popen(["bash", "-c", command], executable=bash, cwd=cwd, env=full_env, stdin=_devnull(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        if bash == "bash":
            raise
        _BASH_PATHS.clear()  # bash moved since it was looked up: look it up again, once
        return subprocess.Popen(["bash", "-c", command], cwd=cwd, env=full_env, stdin=_devnull(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _fast_shell(command: str, env: dict[str, str] | None, cwd: Path) -> tuple[str, str] | None:
    """dash's path and the text to give it when it gives exactly what bash gives for this
    command (it starts in about 0.6 of bash's time; `shell.dialect` decides), else None.
    FAST_SHELL_ENV=off: never."""
    sh = sh_path()
    if sh is None or os.environ.get(FAST_SHELL_ENV, "auto") == "off":
        return None
    text = dash_text(command, os.environ if env is None else env, cwd)
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
    if isinstance(exc, ValueError) and "null" in str(exc):
        return "the command or its environment contains a NUL byte, which no program can receive"
    if isinstance(exc, OSError) and exc.errno == 7:  # E2BIG
        size = len(command.encode("utf-8", "replace")) + sum(len(k) + len(v) for k, v in (env or {}).items())
        return (f"the command is too long for the operating system ({size} bytes with its environment): "
                "pass large values through a file instead of the command line")
    return f"{type(exc).__name__}: {exc}"


class _Wait:
    """One thread waits for everything: output on either pipe, the child's exit, the
    deadline and the periodic duties.  Done when both pipes reached end of file (a
    background grandchild still holding them is waited for, within the timeout) and the
    child has exited."""

    def __init__(self, process: subprocess.Popen[bytes], deadline: float, started: float,
                 duties: list[Periodic]):
        self.process, self.deadline, self.started, self.duties = process, deadline, started, duties
        for duty in duties:
            duty.due = started + duty.interval_s
        self.poller = select.poll()
        self.pidfd = _pidfd(process.pid)
        if self.pidfd is not None:
            self.poller.register(self.pidfd, select.POLLIN)

    def run(self, out: _Capture, err: _Capture) -> bool:
        """Collect the output; True when the timeout killed the command."""
        assert self.process.stdout is not None and self.process.stderr is not None
        pipes: dict[int, tuple[IO[bytes], _Capture]] = {
            self.process.stdout.fileno(): (self.process.stdout, out),
            self.process.stderr.fileno(): (self.process.stderr, err)}
        for fd in pipes:
            self.poller.register(fd, _POLL_IN)
        exited = False
        try:
            while pipes or not exited:
                if not pipes and self.pidfd is None:  # no pidfd (not Linux): wait for the exit itself
                    return self._wait_exit()
                now = time.monotonic()
                if now >= self.deadline:
                    self._kill()
                    self._drain(pipes)
                    return True
                self._run_duties(now)
                for fd, _ in self.poller.poll(self._poll_ms(now)):
                    if fd == self.pidfd:
                        exited = True
                        self.poller.unregister(fd)
                    elif fd in pipes and not pipes[fd][1].read_from(fd):
                        self.poller.unregister(fd)
                        pipes.pop(fd)[0].close()
            self.process.wait()  # it has exited: this only reaps it
            return False
        finally:
            for pipe, _ in pipes.values():
                pipe.close()
            if self.pidfd is not None:
                os.close(self.pidfd)

    def _drain(self, pipes: dict[int, tuple[IO[bytes], _Capture]]) -> None:
        """After a kill: keep what the command wrote before it died, without waiting for
        a writer that escaped the process group."""
        for _ in range(256):  # a writer outside the group could go on for ever: bounded
            ready = [fd for fd, _ in self.poller.poll(0) if fd in pipes]
            if not ready:
                return
            for fd in ready:
                if not pipes[fd][1].read_from(fd):
                    self.poller.unregister(fd)
                    pipes.pop(fd)[0].close()

    def _poll_ms(self, now: float) -> int:
        wake = min([self.deadline, *(duty.due for duty in self.duties)])
        return max(1, int((wake - now) * 1000) + 1)

    def _run_duties(self, now: float) -> None:
        for duty in self.duties:
            if now >= duty.due:
                duty.action(now - self.started)
                duty.due = time.monotonic() + duty.interval_s

    def _wait_exit(self) -> bool:
        """Fallback without a pidfd: wait for the exit in slices (deadline and duties still apply)."""
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                self._kill()
                return True
            self._run_duties(now)
            try:
                self.process.wait(timeout=self._poll_ms(now) / 1000)
                return False
            except subprocess.TimeoutExpired:
                pass

    def _kill(self) -> None:
        _kill_group(self.process)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the command's whole process group (its session), then reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _pidfd(pid: int) -> int | None:
    """A descriptor that polls readable when the child exits (Linux ≥ 5.3), or None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:  # ENOSYS on an old kernel, or a seccomp filter refusing it
        return None


class _Capture:
    """One stream's output, keeping at most OUTPUT_CAP bytes (the rest is counted)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0

    def read_from(self, fd: int) -> bool:
        """Read what is there; False at end of file."""
        chunk = os.read(fd, READ_CHUNK)
        if not chunk:
            return False
        room = OUTPUT_CAP - self.size
        if room > 0:
            self.chunks.append(chunk[:room])
            self.size += min(room, len(chunk))
        self.dropped += max(0, len(chunk) - max(room, 0))
        return True

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more bytes not kept (cap {OUTPUT_CAP} bytes)]"
        return text
