"""Commands a dead server left behind, adopted by this one at start.

A server of this machine that died left its running commands' run directories
(`shell.rundir`); the next server of the same store claims each at once (its lease
renewed, so a server elsewhere never sees it run out and runs the command again), then
waits for it in a thread of its own and commits its result, as the next call on its
thread would.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from aromcp_workflows.app.driver import Driver
from aromcp_workflows.instances import InstanceRegistry
from aromcp_workflows.interpreter import Busy
from aromcp_workflows.shell import RunDir, orphans

log = logging.getLogger("aromcp_workflows")


def adopt_all(driver: Driver, instances: InstanceRegistry, run_dirs: list[RunDir] | None = None) -> int:
    """Adopt the commands of this store that servers of this machine started and left
    behind when they died (`shell.rundir.orphans`; `run_dirs` when the caller has just
    looked them up).  Each is claimed here and now (its lease renewed: a server on
    another machine must not see it run out and run the command again while this one
    starts), then waited for in a thread of its own and its result committed, as the
    next call on its thread would do.  Returns how many were found."""
    if run_dirs is None:
        run_dirs = orphans(store=instances.store.path)
    found = [(d, meta) for d in run_dirs if (meta := d.meta()) is not None]
    for run_dir, meta in found:
        thread = meta.get("thread_id")
        workflow_id, thread_id = str(meta.get("workflow_id")), None if thread in (None, "main") else str(thread)
        try:
            rest = driver.adopter.adopt_now(workflow_id, thread_id)
        except Exception as exc:  # a broken instance must not stop the server: its next call reports it
            log.warning("could not adopt the command left in %s: %s", run_dir.path, exc)
            continue
        threading.Thread(target=_adopt, args=(driver, instances, run_dir, workflow_id, thread_id, rest),
                         name="aromcp-adopt", daemon=True).start()
    return len(found)


def _adopt(driver: Driver, instances: InstanceRegistry, run_dir: RunDir, workflow_id: str, thread_id: str | None,
           rest: Callable[[], object] | None) -> None:
    """Take the claimed command's result (`rest`) and go on as the thread's next step would;
    then drop a run directory no claim names any more (its result was committed before its
    server could remove it).  A directory whose claim was never committed is kept while its
    instance runs: its thread's next call finds the command by the directory's name
    (`app.launch`), such as the agent's call again after its server died."""
    try:
        (rest or (lambda: driver.next_step(workflow_id, thread_id, by_agent=False)))()
        named, finished = instances.read(workflow_id, lambda run, _: (_names(run.busy_shell(thread_id), run_dir),
                                                                       run.finished))
    except Exception as exc:  # a broken instance must not stop the server: its next call reports it
        log.warning("could not adopt the command left in %s: %s", run_dir.path, exc)
        return
    if not named and (run_dir.claimed() or finished):
        run_dir.remove()


def _names(busy: Busy | None, run_dir: RunDir) -> bool:
    """Whether a thread's command in flight is the one of `run_dir` (its claim names it)."""
    return busy is not None and busy.claim.run_dir == str(run_dir.path)
