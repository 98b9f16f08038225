"""Running `shell_command` steps on the server: one of the effects the instance layer performs.

Commands run with `bash -c` in the project root (or `working_dir`), with a timeout that
kills the whole process group, and with stdout/stderr capped so a chatty command cannot
exhaust memory or flood the agent.  A command that cannot be started at all (an argument
list too long for the kernel, a NUL byte, a missing shell) is a failed `ShellResult` with
`spawn_error` set — never an exception — so the step's `on_error` decides what happens.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aromcp_workflows.interpreter.output import ShellResult

OUTPUT_CAP = 1024 * 1024  # bytes kept per stream
DEFAULT_TIMEOUT_MS = 10 * 60 * 1000
ProgressCallback = Callable[[float, str], None]
PROGRESS_INTERVAL_ENV = "AROMCP_PROGRESS_INTERVAL"  # seconds between progress reports (default 1)

_running: set[int] = set()  # process groups of the commands running now
_running_lock = threading.Lock()
_stopping = threading.Event()


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
              timeout_ms: int | None = None, progress: ProgressCallback | None = None) -> ShellResult:
    """Run `command` with bash; never raises for the command's own failures."""
    if not cwd.is_dir():
        return ShellResult("", f"working directory does not exist: {cwd}", 127, 0.0)
    timeout = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000
    started = time.monotonic()
    if _stopping.is_set():
        raise ShellInterrupted("the server is shutting down; the command was not started")
    try:
        process = subprocess.Popen(
            ["bash", "-c", command], cwd=cwd, env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except (OSError, ValueError) as exc:  # E2BIG, ENOENT, "embedded null byte", ...
        reason = _spawn_reason(exc, command, env)
        return ShellResult("", reason, 127, (time.monotonic() - started) * 1000, spawn_error=reason)
    with _running_lock:
        _running.add(process.pid)
    try:
        out, err = _Capture(process.stdout), _Capture(process.stderr)
        timed_out = _wait(process, timeout, started, progress)
        out.join()
        err.join()
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


def _spawn_reason(exc: BaseException, command: str, env: dict[str, str] | None) -> str:
    """Why a command could not be started, in words an author can act on."""
    if isinstance(exc, ValueError) and "null" in str(exc):
        return "the command or its environment contains a NUL byte, which no program can receive"
    if isinstance(exc, OSError) and exc.errno == 7:  # E2BIG
        size = len(command.encode("utf-8", "replace")) + sum(len(k) + len(v) for k, v in (env or {}).items())
        return (f"the command is too long for the operating system ({size} bytes with its environment): "
                "pass large values through a file instead of the command line")
    return f"{type(exc).__name__}: {exc}"


def _wait(process: subprocess.Popen[bytes], timeout: float, started: float,
          progress: ProgressCallback | None) -> bool:
    """Wait for the process, reporting progress every `progress_interval()`; kill it on timeout."""
    interval = progress_interval()
    while True:
        try:
            process.wait(timeout=min(interval, max(0.01, timeout - (time.monotonic() - started))))
            return False
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - started
            if elapsed >= timeout:
                _kill_group(process)
                return True
            if progress is not None:
                progress(elapsed, f"command still running after {elapsed:.0f} s")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class _Capture:
    """Drain a pipe on a thread, keeping at most OUTPUT_CAP bytes (the rest is counted)."""

    def __init__(self, pipe: Any):
        self.chunks: list[bytes] = []
        self.size = 0
        self.dropped = 0
        self.thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self.thread.start()

    def _drain(self, pipe: Any) -> None:
        for chunk in iter(lambda: pipe.read(65536), b""):
            room = OUTPUT_CAP - self.size
            if room > 0:
                self.chunks.append(chunk[:room])
                self.size += min(room, len(chunk))
            self.dropped += max(0, len(chunk) - max(room, 0))
        pipe.close()

    def join(self) -> None:
        self.thread.join()

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def text(self) -> str:
        text = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[output truncated: {self.dropped} more bytes not kept (cap {OUTPUT_CAP} bytes)]"
        return text
