"""Server-side shell commands: which shell runs a command (`grammar`, `dialect`), running it
with capped output, a timeout and progress (`runner`), and who owns a running command across
processes and hosts (`owner`).  One concept, one reason to change; the instance layer
(`app/`) calls it, the interpreter only asks for it with a `ShellRequest`.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.shell.roots import CommandsDirError, commands_root
    from aromcp_workflows.shell.rundir import RunDir, local_run_dir, orphans
    from aromcp_workflows.shell.runner import (
        DEFAULT_TIMEOUT_MS,
        Periodic,
        ProgressCallback,
        RunningCommand,
        ShellInterrupted,
        adopt,
        run_shell,
        start_command,
        stop_all_commands,
        stop_command,
        wait_command,
    )

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "CommandsDirError",
    "Periodic",
    "ProgressCallback",
    "RunDir",
    "RunningCommand",
    "ShellInterrupted",
    "adopt",
    "commands_root",
    "local_run_dir",
    "orphans",
    "run_shell",
    "start_command",
    "stop_all_commands",
    "stop_command",
    "wait_command",
]
__getattr__ = lazy_face(
    __name__,
    {
        "CommandsDirError": "roots",
        "commands_root": "roots",
        "RunDir": "rundir",
        "orphans": "rundir",
        "local_run_dir": "rundir",
        "DEFAULT_TIMEOUT_MS": "runner",
        "Periodic": "runner",
        "ProgressCallback": "runner",
        "ShellInterrupted": "runner",
        "adopt": "runner",
        "run_shell": "runner",
        "stop_all_commands": "runner",
        "RunningCommand": "runner",
        "start_command": "runner",
        "wait_command": "runner",
        "stop_command": "runner",
    },
)
