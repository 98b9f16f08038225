"""Interleavings too narrow to hit reliably through the protocol, pinned at the service
level with the exact order of events a concurrent tool call would produce."""

from __future__ import annotations

from pathlib import Path

import pytest
from srv_helpers import make_project


@pytest.mark.xfail(reason="service.py WorkflowService._roll_back mutates the shared LiveInstance.record in place "
                          "(state, threads, status, and version = store.save(...)): a tool call that already holds "
                          "that LiveInstance (e.g. a sub-agent's state_update or step_complete waiting on the lock "
                          "during workflow_resume(checkpoint_id)) then commits its pre-rollback run at the new "
                          "version, the compare-and-set passes, and the rollback is silently undone. The old "
                          "LiveInstance should be marked broken (or get a copied record) so that commit conflicts "
                          "and the caller reloads.", strict=False)
def test_a_call_holding_the_instance_during_a_rollback_cannot_undo_it(tmp_path: Path) -> None:
    from aromcp_workflows.instances import ServiceError
    from aromcp_workflows.service import WorkflowService
    from aromcp_workflows.state import Update

    project = make_project(tmp_path / "project")
    service = WorkflowService(project_dir=project, store_path=tmp_path / "s.sqlite3", home=tmp_path)
    workflow_id = service.start("messages")["workflow_id"]
    service.next_step(workflow_id)
    checkpoint = service.checkpoint(workflow_id, "before")["checkpoint_id"]
    service.state_update(workflow_id, [{"path": "raw.n", "value": 1}])
    held = service.instances.get(workflow_id)  # a concurrent tool call got the live instance ...
    service.resume(workflow_id, checkpoint)  # ... and the orchestrator rolls back meanwhile
    assert service.state_read(workflow_id, ["raw.n"])["state"] == {"raw.n": 0}
    with held.lock:  # the concurrent call goes on with what it holds
        held.run.states["main"].apply([Update(path="raw.hits", operation="append", value="late")], trigger="race")
        try:
            service.instances.commit(held)
        except ServiceError:
            pass  # refused: the caller is told to retry on the reloaded instance
    service.instances.forget(workflow_id)
    state = service.state_read(workflow_id, ["raw.n"])["state"]
    assert state == {"raw.n": 0}, "the rollback was undone by a call that started before it"
