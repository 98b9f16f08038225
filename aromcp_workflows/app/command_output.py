"""A server-side command's output as it comes, and as it was kept once it ended.

While a command runs on this machine, its stdout and stderr are read from its run directory
(the step's claim names it): any process can, at any offset (`shell.live.read_slice`).  Once
it ended, the history's `step_completed` event has kept them: the first
`HISTORY_OUTPUT_CAP` characters of each stream (with `stdout_cut`/`stderr_cut` when there
was more) and its last 500 characters.  Either way offsets count bytes of what the command
wrote, slices hold whole characters, nothing beyond one slice is read from a run directory,
and the text is masked like every other value shown.
"""

from __future__ import annotations

from collections.abc import Callable

from aromcp_workflows.app.page_results import CommandOutput, OutputSlice
from aromcp_workflows.interpreter import Busy
from aromcp_workflows.shell import live, local_run_dir
from aromcp_workflows.store import HistoryEvent

Mask = Callable[[str], str]


def from_run_dir(workflow_id: str, task_id: str | None, busy: Busy, since: tuple[int | None, int | None],
                 limit: int, mask: Mask) -> CommandOutput:
    """The output of the command in flight, read where it runs (if that is this machine)."""
    run_dir = local_run_dir(busy.claim)
    slices = [OutputSlice(text="", start=0, end=0, cut=False)] * 2
    if run_dir is not None:
        slices = [_slice(live.read_slice(run_dir, stream, start, limit), mask)
                  for stream, start in zip(("out", "err"), since, strict=True)]
    return CommandOutput(workflow_id=workflow_id, step_id=busy.step_id, task_id=task_id, running=True,
                         source="live" if run_dir is not None else "elsewhere", command=mask(busy.command),
                         stdout=slices[0], stderr=slices[1])


def from_history(workflow_id: str, task_id: str | None, step_id: str | None, events: list[HistoryEvent],
                 since: tuple[int | None, int | None], limit: int, mask: Mask) -> CommandOutput:
    """The output the history kept of the thread's last command (or of `step_id`'s last run)."""
    thread = task_id if task_id not in (None, "main") else None
    ended = [e for e in events if e.kind == "step_completed" and e.data.get("type") == "shell_command"
             and (e.task_id or None) == thread and (step_id is None or e.step_id == step_id)]
    empty = OutputSlice(text="", start=0, end=0, cut=False)
    if not ended:
        return CommandOutput(workflow_id=workflow_id, step_id=step_id, task_id=task_id, running=False, source="none",
                             stdout=empty, stderr=empty)
    data = ended[-1].data
    started = [e for e in events if e.kind == "step_started" and e.step_id == ended[-1].step_id]
    command = started[-1].data.get("command") if started else None
    stdout, stderr = (_kept(data, stream, offset, limit, mask) for stream, offset in zip(("stdout", "stderr"), since,
                                                                                         strict=True))
    return CommandOutput(workflow_id=workflow_id, step_id=ended[-1].step_id, task_id=task_id, running=False,
                         source="history", command=mask(str(command)) if command is not None else None,
                         exit_code=data.get("exit_code"), stdout=stdout, stderr=stderr)


def _kept(data: dict[str, object], stream: str, since: int | None, limit: int, mask: Mask) -> OutputSlice:
    """A slice of what the history kept of a stream, in bytes of the command's output as a
    live read counts them.  Kept whole (the common case), it is sliced like the live file:
    from `since`, or its last `limit` bytes.  Kept in part — the history keeps a stream's
    start (the runner keeps its first `OUTPUT_CAP` bytes, the history the first
    `HISTORY_OUTPUT_CAP` characters of those) — a reader that followed it live (`since`)
    keeps what it has (an empty slice there), and a new reader gets the start, `cut`."""
    text = str(data.get(stream) or data.get(f"{stream}_tail") or "")
    whole = not data.get(f"{stream}_cut") and "[output truncated:" not in text
    kept = text.encode("utf-8")
    if not whole:
        if since:
            return OutputSlice(text="", start=since, end=since, cut=True)
        head, _ = live.whole_characters(kept[:limit], inside=False)
        return OutputSlice(text=mask(head.decode("utf-8")), start=0, end=len(head), cut=True)
    start = max(0, len(kept) - limit) if since is None else min(since, len(kept))
    part, skipped = live.whole_characters(kept[start:start + limit], inside=since is None and start > 0)
    start += skipped
    return OutputSlice(text=mask(part.decode("utf-8")), start=start, end=start + len(part),
                       cut=start > (since or 0))


def _slice(part: live.Slice, mask: Mask) -> OutputSlice:
    return OutputSlice(text=mask(part.text), start=part.start, end=part.end, cut=part.cut)
