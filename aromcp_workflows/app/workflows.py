"""The service's operations that need no instance: workflows listed, described,
validated, loaded with all they include (a bundle), their plan explained, and a transform
tried on its own.

`Workflows` is a part the service has (`WorkflowService.workflows`): it reads workflow
files through the service's resolver and loader, and runs JavaScript in the instance
layer's engine, as a started instance would.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aromcp_workflows.app.results import (
    DefinitionView,
    Plan,
    Problem,
    TransformTest,
    Validation,
    WorkflowInfo,
    WorkflowList,
    WorkflowSummary,
)
from aromcp_workflows.definition import (
    DefinitionError,
    WorkflowBundle,
    WorkflowLoader,
    WorkflowResolver,
    check,
    load_valid_bundle,
)
from aromcp_workflows.instances import InstanceRegistry, ServiceError, refusals


class Workflows:
    """Workflows before any instance: found by `resolver`, read by `loader`, their
    JavaScript compiled and tried in the instance layer's engine (V8 in its child
    processes, opened on first use)."""

    def __init__(self, resolver: WorkflowResolver, loader: WorkflowLoader, instances: InstanceRegistry):
        self.resolver, self.loader, self.instances = resolver, loader, instances

    def _engine(self) -> Any:
        return self.instances.engine

    def list_workflows(self, include_global: bool = True) -> WorkflowList:
        rows = []
        for location in self.resolver.list(include_global=include_global):
            description, version = "", ""
            try:
                definition = self.loader.load_one_file(location.path, location.source).definition
                description, version = definition.description, definition.version
            except DefinitionError as exc:
                description = f"(invalid: {exc.problems[0] if exc.problems else exc})"
            rows.append(WorkflowSummary(name=location.name, description=description, version=version,
                                        source=location.source, path=str(location.path)))
        return WorkflowList(workflows=rows)

    def get_info(self, workflow: str) -> WorkflowInfo:
        with refusals():
            loaded = self.loader.load(workflow)
        definition = loaded.definition
        return WorkflowInfo(name=definition.name, description=definition.description, version=definition.version,
                            inputs={n: s.model_dump(exclude_none=True) for n, s in definition.inputs.items()},
                            found_at=loaded.file, source=loaded.source)

    def check_start(self, workflow: str, inputs: dict[str, Any]) -> None:
        """What `start` would refuse before it runs anything — an unknown workflow, inputs
        missing or of the wrong type — found from the workflow file alone, without
        validating the whole definition (no JavaScript is compiled): `aromcp-workflows run`
        says it before it starts a server.  The same `ServiceError` `start` raises."""
        from aromcp_workflows.interpreter import check_inputs

        with refusals():
            loaded = self.loader.load(workflow)
            check_inputs(loaded.name, loaded.definition.inputs, inputs)

    def validate(self, workflow: str | None = None, yaml: str | None = None) -> Validation:
        if (workflow is None) == (yaml is None):
            raise ServiceError("workflow_validate needs exactly one of `workflow` (a name or file path) "
                               "or `yaml` (the text of a workflow)")
        if yaml is not None:
            return self._validate_text(yaml)
        report = check(workflow or "", self.loader)
        return Validation(valid=report.valid, errors=[Problem(**p.to_dict()) for p in report.errors],
                          warnings=[Problem(**p.to_dict()) for p in report.warnings])

    def _validate_text(self, text: str) -> Validation:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "workflow.yaml"
            path.write_text(text, encoding="utf-8")
            report = check(str(path), WorkflowLoader(self.resolver, syntax_engine=self._engine))

        def clean(problem: Any) -> Problem:
            data = problem.to_dict()
            if data["file"] == str(path):
                data["file"] = "<yaml>"
            return Problem(**data)

        return Validation(valid=report.valid, errors=[clean(p) for p in report.errors],
                          warnings=[clean(p) for p in report.warnings])

    def bundle(self, workflow: str) -> WorkflowBundle:
        """The workflow with everything it imports, validated: what `start` would run."""
        with refusals():
            return load_valid_bundle(workflow, self.loader)

    def load_definition(self, workflow: str) -> DefinitionView:
        bundle = self.bundle(workflow)
        definition = bundle.main.definition.model_dump(mode="json", by_alias=True, exclude_none=True)
        return DefinitionView(name=definition["name"], steps=definition["steps"],
                              state_schema=definition.get("state_schema", {}),
                              sub_agent_tasks=definition.get("sub_agent_tasks", {}), loaded_from=bundle.main.file,
                              imports={name: w.file for name, w in bundle.workflows.items()
                                       if name != bundle.main.name})

    def explain_plan(self, workflow: str, inputs: dict[str, Any] | None = None) -> Plan:
        from aromcp_workflows.explain import explain_plan

        bundle = self.bundle(workflow)
        with refusals():
            return Plan(**explain_plan(bundle, inputs or {}, self.instances.engine))

    def test_transformation(self, transform: str, input: Any = None,
                            context: dict[str, Any] | None = None) -> TransformTest:
        from aromcp_workflows.expressions import ExpressionError

        started = time.perf_counter()
        try:
            output = self.instances.engine.test_transform(transform, input, context or {})
        except ExpressionError as exc:
            return TransformTest(success=False, error=str(exc), execution_time_ms=_ms_since(started))
        return TransformTest(success=True, output=output, execution_time_ms=_ms_since(started))


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
