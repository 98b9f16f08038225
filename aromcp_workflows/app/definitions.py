"""An instance's copy of its workflow against what the files on disk hold now.

An instance runs the definition it started with (its bundle snapshot), whatever happens to
the YAML file afterwards.  `status` and `debug` say when the file has changed since, the
coverage report takes its line numbers from the file only while it still holds the copy,
and `migrate` loads the file to move the instance onto it.
"""

from __future__ import annotations

from pathlib import Path

from aromcp_workflows.definition import (
    DefinitionError,
    LoadedWorkflow,
    WorkflowBundle,
    WorkflowLoader,
    load_valid_bundle,
)
from aromcp_workflows.instances import ServiceError


def current_file(loader: WorkflowLoader, copy: LoadedWorkflow) -> LoadedWorkflow | None:
    """The workflow named like `copy` as its file holds it now (None: the file is gone,
    invalid, or no longer holds a workflow of that name)."""
    try:
        found = loader.load_file(copy.file)
    except DefinitionError:
        return None
    return next((w for w in found if w.name == copy.name), None)


def same_definition(current: LoadedWorkflow, bundle: WorkflowBundle, name: str) -> bool:
    """Whether the file's workflow is the bundle's copy of `name`, to the letter."""
    copy = bundle.snapshot()["definitions"][name]["definition"]
    return bool(current.definition.model_dump(mode="json", by_alias=True) == copy)


def same_definitions(one: WorkflowBundle, other: WorkflowBundle) -> bool:
    """Whether two bundles hold the same workflows, to the letter (where they were read aside)."""
    def definitions(bundle: WorkflowBundle) -> dict[str, object]:
        return {name: entry["definition"] for name, entry in bundle.snapshot()["definitions"].items()}

    return definitions(one) == definitions(other)


def changed_since_start(loader: WorkflowLoader, bundle: WorkflowBundle) -> bool:
    """Whether any file of the bundle no longer holds the copy the instance runs.  A file
    this host does not have says nothing (a replica may serve instances started elsewhere)."""
    for name, copy in bundle.workflows.items():
        if not Path(copy.file).is_file():
            continue
        current = current_file(loader, copy)
        if current is None or not same_definition(current, bundle, name):
            return True
    return False


def edited_bundle(loader: WorkflowLoader, copy: WorkflowBundle) -> WorkflowBundle:
    """The instance's workflow as its file holds it now, validated with everything it
    includes; `ServiceError` (every problem at `file:line:column`) when it does not load."""
    file = copy.main.file
    try:
        several = len(loader.load_file(file)) > 1
        return load_valid_bundle(copy.main.name if several else file, loader)
    except DefinitionError as exc:
        problems = "\n".join(str(p) for p in exc.problems) or str(exc)
        raise ServiceError(f"{file} no longer validates, so no instance can move onto it; nothing was "
                           f"changed. Fix it first (aromcp-workflows validate {file}):\n{problems}") from None
