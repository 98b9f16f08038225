"""The workflow language: YAML files → validated `WorkflowDefinition`s (runs nothing).

`check()` is the one call the CLI, the MCP `workflow_validate` tool and the service use:
it loads a workflow by name or path, resolves imports and includes, and returns every
error and warning with file, line and column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aromcp_workflows.definition.computed import computed_specs
from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem, WorkflowNotFound, did_you_mean
from aromcp_workflows.definition.loader import (
    LoadedWorkflow,
    WorkflowBundle,
    WorkflowLoader,
)
from aromcp_workflows.definition.references import names_read, written_paths
from aromcp_workflows.definition.resolver import (
    PROJECT_SUBDIR,
    TEST_FILE_SUFFIX,
    WorkflowLocation,
    WorkflowResolver,
    check_name,
    project_root,
)
from aromcp_workflows.definition.schema import workflow_json_schema
from aromcp_workflows.definition.scopes import sites
from aromcp_workflows.definition.secrets import SecretFields, secret_fields
from aromcp_workflows.definition.steps import (
    LOOP_NAME_RESERVED,
    STEP_TYPES,
    AgentPromptStep,
    AgentShellCommandStep,
    AgentStep,
    ApplyHintsStep,
    BoolOrTemplate,
    BreakStep,
    ConditionalStep,
    ContinueStep,
    ExitStep,
    ForeachStep,
    IncludeWorkflowStep,
    LoopStep,
    McpCallStep,
    ParallelForeachStep,
    ResultStep,
    ShellCommandStep,
    StateUpdateStep,
    Step,
    StepBase,
    UserInputStep,
    UserMessageStep,
    WhileStep,
    child_step_lists,
)
from aromcp_workflows.definition.validation import validate_bundle
from aromcp_workflows.definition.workflow import InputSpec, WorkflowDefinition, json_type
from aromcp_workflows.definition.yaml_limits import check_events, check_size
from aromcp_workflows.definition.yaml_source import NodePath, Positions, parse_yaml


@dataclass
class CheckReport:
    """What `validate` tells an author: valid or not, every problem, and the bundle."""

    target: str
    errors: list[DefinitionProblem] = field(default_factory=list)
    warnings: list[DefinitionProblem] = field(default_factory=list)
    bundle: WorkflowBundle | None = None

    @property
    def valid(self) -> bool:
        return not self.errors


def check(target: str, loader: WorkflowLoader) -> CheckReport:
    """Load and validate a workflow by name or file path; never raises for bad input."""
    report = CheckReport(target)
    try:
        _check_into(report, target, loader)
    except DefinitionError as exc:
        _split(exc.problems, report)
    except Exception as exc:
        report.errors.append(DefinitionProblem(f"internal error while checking ({type(exc).__name__}: "
                                     f"{exc}); please report this with the file", target))
    return report


def _check_into(report: CheckReport, target: str, loader: WorkflowLoader) -> None:
    if loader.takes_file(target):  # a shared file may hold several workflows: check each
        bundles = [loader.bundle_of(w) for w in loader.load_file(target)]
    else:
        bundles = [loader.load_bundle(target)]
    report.bundle = bundles[0]
    seen: set[DefinitionProblem] = set()
    for bundle in bundles:
        new = [p for p in validate_bundle(bundle, loader.syntax_engine) if p not in seen]
        seen.update(new)
        _split(new, report)


def load_valid_bundle(target: str, loader: WorkflowLoader) -> WorkflowBundle:
    """A bundle ready to run, or `DefinitionError` listing every error."""
    if loader.takes_file(target):
        loader.load_one_file(target)  # running a file needs exactly one workflow in it
    report = check(target, loader)
    if report.errors or report.bundle is None:
        raise DefinitionError(report.errors)
    return report.bundle


def _split(problems: list[DefinitionProblem], report: CheckReport) -> None:
    for problem in problems:
        (report.errors if problem.severity == "error" else report.warnings).append(problem)


__all__ = [
    "LOOP_NAME_RESERVED",
    "PROJECT_SUBDIR",
    "STEP_TYPES",
    "TEST_FILE_SUFFIX",
    "AgentPromptStep",
    "AgentShellCommandStep",
    "AgentStep",
    "ApplyHintsStep",
    "BoolOrTemplate",
    "BreakStep",
    "CheckReport",
    "ConditionalStep",
    "ContinueStep",
    "DefinitionError",
    "DefinitionProblem",
    "ExitStep",
    "ForeachStep",
    "IncludeWorkflowStep",
    "InputSpec",
    "LoadedWorkflow",
    "LoopStep",
    "McpCallStep",
    "NodePath",
    "ParallelForeachStep",
    "Positions",
    "ResultStep",
    "SecretFields",
    "ShellCommandStep",
    "StateUpdateStep",
    "Step",
    "StepBase",
    "UserInputStep",
    "UserMessageStep",
    "WhileStep",
    "WorkflowBundle",
    "WorkflowDefinition",
    "WorkflowLoader",
    "WorkflowLocation",
    "WorkflowNotFound",
    "WorkflowResolver",
    "check",
    "check_events",
    "check_name",
    "check_size",
    "child_step_lists",
    "computed_specs",
    "did_you_mean",
    "json_type",
    "load_valid_bundle",
    "names_read",
    "parse_yaml",
    "project_root",
    "secret_fields",
    "sites",
    "workflow_json_schema",
    "written_paths",
]
