"""The idempotency keys of `workflow_start`: a key checked and bound to the fingerprint of
its request, and the answer to a start whose key was used already.

The same request sent again (a resend of a start whose answer was lost) gets the instance
the key started; another request under the key is refused and starts nothing.  The key
is stored per project in the same commit as the instance (`InstanceRegistry.start`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from aromcp_workflows.app.results import Started
from aromcp_workflows.instances import InstanceRegistry, ServiceError, refusals
from aromcp_workflows.store import StartKey

MAX_KEY = 200  # characters of a workflow_start idempotency_key


def start_key(key: str, workflow: str, inputs: dict[str, Any]) -> StartKey:
    """A checked idempotency key with the fingerprint of its request (workflow and inputs as
    the client sent them: the same request sent again has the same fingerprint)."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY or any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ServiceError(f"idempotency_key must be 1 to {MAX_KEY} characters without control characters "
                           "(a UUID made by the client for this one start is a good choice)")
    request = json.dumps({"workflow": workflow, "inputs": inputs}, sort_keys=True, separators=(",", ":"),
                         ensure_ascii=False, default=repr)
    return StartKey(key, hashlib.sha256(request.encode("utf-8", "surrogatepass")).hexdigest())


def started_before(instances: InstanceRegistry, key: StartKey, workflow_id: str, request: str) -> Started:
    """The answer to a start whose key was used already: that instance as it stands now."""
    if request != key.request:
        raise ServiceError(
            f"idempotency_key {key.key!r} was already used in this project to start instance {workflow_id} "
            "with a different request (another workflow or other inputs); nothing was started. Resend "
            "exactly the first request to get that instance again, or use a new key for a new start.", "conflict")
    with refusals():
        status, state = instances.read(workflow_id, lambda run, _: (run.status, run.states["main"].flattened()))
    return Started(workflow_id=workflow_id, status=status, state=state)

