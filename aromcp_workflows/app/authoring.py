"""The service's operations for workflow authors: which branches an instance took
(coverage), what it did as a test case replays it (recording), and moving a waiting
instance onto its edited workflow file (migrate).

`Authoring` is a part the service has (`WorkflowService.authoring`): each reads or commits
through the instance layer like the MCP tools, and `aromcp-workflows test` and `migrate`
are thin callers of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aromcp_workflows.app.definitions import current_file, edited_bundle, same_definition, same_definitions
from aromcp_workflows.app.results import (
    Blocker,
    BranchCoverage,
    Coverage,
    Migration,
    RecordedAnswer,
    RecordedCommand,
    Recording,
    WorkflowCoverage,
)
from aromcp_workflows.definition import WorkflowBundle, WorkflowLoader
from aromcp_workflows.instances import InstanceRegistry, ServiceError, refusals

if TYPE_CHECKING:
    from aromcp_workflows.interpreter import WorkflowRun
    from aromcp_workflows.store import InstanceRecord


class Authoring:
    """Coverage, recording and migration, of the service's instances; the loader reads the
    workflow files as they are now."""

    def __init__(self, instances: InstanceRegistry, loader: WorkflowLoader):
        self.instances, self.loader = instances, loader

    def coverage(self, workflow_id: str) -> Coverage:
        """The branches the instance took of its workflow and of each one it includes, read
        from its history; lines come from the files while they still hold its copy."""
        from aromcp_workflows.explain import branches, covered

        with refusals():
            events = self.instances.history(workflow_id)
            bundle = self.instances.read(workflow_id, lambda run, _: run.bundle)
        taken = covered(bundle, events)
        rows = []
        for name, copy in bundle.workflows.items():
            current = current_file(self.loader, copy)
            fresh = current if current is not None and same_definition(current, bundle, name) else None
            definition = (fresh or copy).definition  # the file's own: it knows which keys were written
            rows.append(WorkflowCoverage(workflow=name, file=copy.file, branches=[
                BranchCoverage(key=b.key, label=b.label, covered=(name, b.key) in taken,
                               line=fresh.positions.locate(b.path)[0] if fresh else None)
                for b in branches(definition)]))
        return Coverage(workflow_id=workflow_id, workflows=rows)

    def recording(self, workflow_id: str) -> Recording:
        """What a finished instance did, as a test case replays it (secrets masked)."""
        from aromcp_workflows.explain import replay_of

        with refusals():
            events = self.instances.history(workflow_id)
            outcome = self.instances.read(workflow_id, _outcome)
        replay, masker = replay_of(events), self.instances.masker(workflow_id)
        data = {"inputs": replay.inputs, "state": outcome["state"], "messages": replay.messages,
                "error": outcome["error"],
                "answers": [vars(a) for a in replay.answers], "commands": [vars(c) for c in replay.commands]}
        shown = masker(data)
        return Recording(workflow_id=workflow_id, workflow=outcome["workflow"], file=outcome["file"],
                         inputs=shown["inputs"], status=outcome["status"], error=shown["error"],
                         state=shown["state"], messages=shown["messages"],
                         answers=[RecordedAnswer(**a) for a in shown["answers"]],
                         commands=[RecordedCommand(**c) for c in shown["commands"]], masked=shown != data)

    def migrate(self, workflow_id: str, dry_run: bool = False) -> Migration:
        """Move a waiting or running instance onto its workflow's file as it is now, when that
        is safe (`interpreter.migration`); else the exact reasons, and nothing is written.
        The move is one commit of the instance layer, like any step."""
        from aromcp_workflows.interpreter import apply_move, plan_move

        with refusals():
            bundle = self.instances.read(workflow_id, lambda run, _: run.bundle)
        new = edited_bundle(self.loader, bundle)
        shared = WorkflowBundle.from_snapshot(new.snapshot())
        result = Migration(workflow_id=workflow_id, workflow=bundle.main.name, file=bundle.main.file,
                           outcome="unchanged", plan=[], blockers=[])
        if same_definitions(shared, bundle):
            result.plan = ["the file holds the definition this instance runs: nothing to move"]
            return result

        def change(run: WorkflowRun) -> None:
            if run.status not in ("running", "waiting"):
                raise ServiceError(f"instance {workflow_id} is {run.status}: only a waiting or running instance "
                                   "moves onto an edited workflow (a finished one keeps the definition it ran)",
                                   "conflict")
            move = plan_move(run.machine, new)
            result.plan = move.notes
            result.blockers = [Blocker(message=b.message, file=b.file, line=b.line) for b in move.blockers]
            result.outcome = "refused" if move.blockers else "would_move" if dry_run else "moved"
            if result.outcome == "moved":
                apply_move(run.machine, shared, move, bundle.main.file)

        with refusals():
            self.instances.transact(workflow_id, change)
        return result


def _outcome(run: WorkflowRun, record: InstanceRecord) -> dict[str, Any]:
    """Where an instance ended: its workflow and file, status, error and final state."""
    state = {k: v for k, v in run.states["main"].flattened().items() if k != "inputs"}
    return {"workflow": record.workflow, "file": run.bundle.main.file, "status": run.status, "error": run.error,
            "state": state}
