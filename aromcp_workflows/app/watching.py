"""The service's reads for the web view: a page of instances, an instance's whole view, its
version (which changes with every commit of any process), its state at a point of history,
a command's output as it comes (the page, `run` and `debug` read it).

`Watching` is a part the service has (`WorkflowService.watching`): these methods read
through the same instance layer, under the same project scope and masker, as the MCP tools.  The
views themselves are built in `app/views.py` from what `explain/` finds.
"""

from __future__ import annotations

from typing import Any

from aromcp_workflows.app.page_results import CommandOutput, InstancePageView, InstanceView, StateAt
from aromcp_workflows.definition import DefinitionError, Step, WorkflowLoader
from aromcp_workflows.instances import InstanceRegistry, refusals
from aromcp_workflows.store import InstanceFilter, InstanceSummary


class Watching:
    """The web view's reads, of the service's instances; the loader finds where a step is
    written in its file now."""

    def __init__(self, instances: InstanceRegistry, loader: WorkflowLoader):
        self.instances, self.loader = instances, loader

    def instance_page(self, statuses: list[str] | None = None, workflow: str | None = None,
                      project_dir: str | None = None, page: int = 1, per_page: int = 50) -> InstancePageView:
        """Instances of every project in the store, newest started first, one page at a time;
        a running one says whether it is stalled.  The status `stalled` keeps only those."""
        from aromcp_workflows.app.views import summary_row

        page, per_page = max(1, page), min(max(1, per_page), 500)
        stalled_only = bool(statuses) and "stalled" in (statuses or [])
        wanted = ("running", "waiting") if stalled_only else tuple(statuses) if statuses else None
        where = InstanceFilter(project_dir=project_dir or None, statuses=wanted, workflow=workflow or None)
        with refusals():
            found, groups = self.instances.page(where, per_page, (page - 1) * per_page)  # groups: the whole store
            rows, total = found.rows, found.total
            if stalled_only:
                rows, total = self._stalled_rows(where, per_page, (page - 1) * per_page)
            stalled = {r.workflow_id: self._stalled(r.workflow_id) for r in rows if r.status in ("running", "waiting")}
        counts: dict[str, int] = {}
        for group in groups:
            counts[group.status] = counts.get(group.status, 0) + group.count
        return InstancePageView(rows=[summary_row(r).model_copy(update={"stalled": stalled.get(r.workflow_id)})
                                      for r in rows], total=total, page=page,
                                per_page=per_page, workflows=sorted({g.workflow for g in groups}),
                                projects=sorted({g.project_dir for g in groups}), statuses=counts)

    def _stalled(self, workflow_id: str) -> bool:
        """From the stored record: no run is built for a row (the live copy, when this process
        holds one, knows of later calls: `status` reads that)."""
        from aromcp_workflows.app.statuses import stalled_of

        return stalled_of(self.instances.load(workflow_id))

    def _stalled_rows(self, where: InstanceFilter, limit: int, offset: int) -> tuple[list[InstanceSummary], int]:
        """The running instances that are stalled, a page of them (each running one is read
        to know: this filter costs a read per running instance)."""
        found: list[InstanceSummary] = []
        start = 0
        while True:
            batch, _ = self.instances.page(where, 200, start)
            found += [r for r in batch.rows if self._stalled(r.workflow_id)]
            start += 200
            if start >= batch.total:
                return found[offset:offset + limit], len(found)

    def command_output(self, workflow_id: str, step_id: str | None = None, task_id: str | None = None,
                       stdout_since: int | None = None, stderr_since: int | None = None,
                       limit: int = 16 * 1024) -> CommandOutput:
        """A server-side command's stdout and stderr: of the thread's command running now
        (from byte `*_since` on, or the last `limit` bytes; poll again from each slice's
        `end`), else of its last command that ended (or the last run of `step_id`), as the
        history kept it: from the same byte offsets when it kept the whole output, so a page
        that followed the command live gets just its last bytes.  Readable from any process
        of the machine the command runs on."""
        from aromcp_workflows.app import command_output as output

        masker = self.instances.masker(workflow_id)
        limit = max(1, min(limit, 1024 * 1024))
        with refusals():
            busy = self.instances.read(workflow_id, lambda run, _: run.busy_shell(task_id))
            if busy is not None and step_id in (None, busy.step_id):
                return output.from_run_dir(workflow_id, task_id, busy, (stdout_since, stderr_since), limit,
                                           masker.mask_text)
            events = self.instances.history(workflow_id, kinds=["step_started", "step_completed"])
        return output.from_history(workflow_id, task_id, step_id, events, (stdout_since, stderr_since), limit,
                                   masker.mask_text)

    def instance_version(self, workflow_id: str) -> int:
        """The instance's committed version: it changes with every commit of any process."""
        with refusals():
            return self.instances.version(workflow_id)

    def instance_view(self, workflow_id: str) -> InstanceView:
        """Everything the instance page shows: graph with marks, tasks, messages, failures
        with their `file:line`, the step timeline, the state now and the points it changed."""
        from aromcp_workflows.app.views import VIEW_KINDS, instance_view

        masker = self.instances.masker(workflow_id)
        with refusals():
            events = self.instances.history(workflow_id, kinds=VIEW_KINDS)
            return self.instances.read(workflow_id, lambda run, record: instance_view(
                run, record, events, masker, self._locate))

    def state_at(self, workflow_id: str, seq: int | None = None) -> StateAt:
        """The main state (raw, state, computed) after history event `seq` (None: now), replayed."""
        from aromcp_workflows.app.views import state_at
        from aromcp_workflows.explain import TIERS

        def checkpoint_state(checkpoint_id: str) -> dict[str, Any] | None:
            point = self.instances.last_checkpoint(workflow_id, checkpoint_id)
            main = point.snapshot.get("state", {}).get("states", {}).get("main") if point else None
            return None if main is None else {t: main.get(t) or {} for t in TIERS}

        masker = self.instances.masker(workflow_id)
        with refusals():
            events = self.instances.history(workflow_id, kinds=["started", "state_changed", "rolled_back"])
        return StateAt(**state_at(events, seq, checkpoint_state, masker))

    def _locate(self, file: str, workflow: str, path: tuple[Any, ...], step: Step) -> tuple[int | None, int | None,
                                                                                          bool] | None:
        """Where a step an instance runs is written in its file now (see `explain.locate`)."""
        from aromcp_workflows.explain import where_now

        try:
            found = [w for w in self.loader.load_file(file) if w.name == workflow]
        except (DefinitionError, OSError):
            return None
        return where_now(found[0].definition, found[0].positions, path, step) if found else None
