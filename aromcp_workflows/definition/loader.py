"""Loading workflows: names and paths → cached files, their `imports`, and whole bundles.

Reading one file into its definitions is definition/files.py's; this module finds the
file a name means, keeps what was read while no file of it changed, and follows
`imports` and `include_workflow` to every workflow a run can reach.

A *bundle* is a workflow plus every workflow it can include, each already validated.
Running instances keep a snapshot of their bundle, so editing a YAML file never changes
a workflow that is already running.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aromcp_workflows.definition.errors import DefinitionError, DefinitionProblem, WorkflowNotFound, did_you_mean
from aromcp_workflows.definition.files import Stamp, file_stamp, read_definitions, stamp_or_none
from aromcp_workflows.definition.resolver import Source, WorkflowResolver, check_name, name_problem
from aromcp_workflows.definition.shared import SharedBundles
from aromcp_workflows.definition.steps import IncludeWorkflowStep, child_step_lists
from aromcp_workflows.definition.workflow import WorkflowDefinition
from aromcp_workflows.definition.yaml_source import Positions


@dataclass
class LoadedWorkflow:
    """One validated definition and where it came from (file, positions, source)."""

    definition: WorkflowDefinition
    file: str
    positions: Positions
    source: Source | str
    imported: dict[str, LoadedWorkflow] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.definition.name


@dataclass
class WorkflowBundle:
    """A main workflow and every workflow reachable from it through `include_workflow`.

    A bundle made by `from_snapshot` is shared by every instance whose snapshot has the
    same content (definition/shared.py), and so is its snapshot dict: neither is ever
    changed once made."""

    main: LoadedWorkflow
    workflows: dict[str, LoadedWorkflow]
    shared_snapshot: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def get(self, name: str) -> WorkflowDefinition:
        return self.workflows[name].definition

    def snapshot(self) -> dict[str, Any]:
        """JSON-safe copy that `from_snapshot` turns back into definitions (for a shared
        bundle: the one shared dict, read-only)."""
        if self.shared_snapshot is not None:
            return self.shared_snapshot
        return {
            "main": self.main.name,
            "definitions": {
                name: {
                    "definition": loaded.definition.model_dump(mode="json", by_alias=True),
                    "file": loaded.file,
                    "source": loaded.source,
                }
                for name, loaded in self.workflows.items()
            },
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> WorkflowBundle:
        """The bundle for a snapshot: parsed once per distinct content, then shared.

        Treat the result and its `snapshot()` as read-only: other instances run them too."""
        return SHARED_BUNDLES.get(data)

    @classmethod
    def parse_snapshot(cls, data: dict[str, Any]) -> WorkflowBundle:
        """A new bundle of its own from a snapshot (validated again; `from_snapshot` shares)."""
        workflows = {
            name: LoadedWorkflow(
                WorkflowDefinition.model_validate(entry["definition"]),
                entry["file"],
                Positions(entry["file"]),
                entry["source"],
            )
            for name, entry in data["definitions"].items()
        }
        return cls(workflows[data["main"]], workflows, shared_snapshot=data)


SHARED_BUNDLES: SharedBundles[WorkflowBundle] = SharedBundles(WorkflowBundle.parse_snapshot)


class WorkflowLoader:
    """Reads workflow files and resolves names and imports.

    Files are cached; an entry is reused only while the file *and every file it imports*
    are unchanged, so a long-running server sees an edited shared file at once.
    """

    def __init__(self, resolver: WorkflowResolver | None = None, names_only: bool = False,
                 syntax_engine: Callable[[], Any] | None = None):
        self.resolver = resolver or WorkflowResolver()
        self.names_only = names_only  # True over MCP: only names in the workflow directories
        self.allowed_files: frozenset[Path] = frozenset()  # files a names-only loader may still read
        # Where validation compiles JavaScript: a server hands in its own engine (V8 in its
        # child processes); None is a V8 in this process, for the CLI and tools.
        self.syntax_engine = syntax_engine
        self._cache: dict[Path, tuple[dict[Path, Stamp], list[LoadedWorkflow] | DefinitionError]] = {}
        self._resolved: dict[str, tuple[Path, tuple[int, int]]] = {}  # absolute path -> real path, file id

    # -- single files -------------------------------------------------------------
    def load_file(self, path: str | os.PathLike[str], source: Source | str = "file",
                  _importing: tuple[Path, ...] = ()) -> list[LoadedWorkflow]:
        """Every workflow a file holds, with its own imports resolved."""
        resolved = self._resolve(path)
        cached = self._cache.get(resolved)
        if cached and all(stamp_or_none(p) == s for p, s in cached[0].items()):  # the file's own stamp included
            if isinstance(cached[1], DefinitionError):
                raise DefinitionError(cached[1].problems)
            return cached[1]
        stamp = file_stamp(resolved, str(path))
        if source == "file":  # a path into a workflow directory counts as that directory
            source = self.resolver.source_of(resolved)
        try:
            definitions = read_definitions(resolved)
        except DefinitionError as exc:  # remembered until the file changes: a bad file costs once
            self._cache[resolved] = ({resolved: stamp}, exc)
            raise
        loaded = [LoadedWorkflow(definition, str(resolved), positions, source)
                  for definition, positions in definitions]
        stamps = {resolved: stamp}
        for workflow in loaded:
            workflow.imported = self._load_imports(workflow, (*_importing, resolved))
            for child in workflow.imported.values():
                stamps.update(self._cache[Path(child.file)][0])
        self._cache[resolved] = (stamps, loaded)
        return loaded

    def _resolve(self, path: str | os.PathLike[str]) -> Path:
        """`Path.resolve()`, remembered for an absolute path while it still names the same file
        (device and inode of what it points to now): resolving costs an `lstat` per path
        component, about 25 µs, and `workflow_list` asks for every workflow on every call.
        A symlink pointed elsewhere names another file, so it is resolved again."""
        key = os.fspath(path)
        if not os.path.isabs(key):
            return Path(key).resolve()
        try:
            info = os.stat(key)
        except OSError:
            return Path(key).resolve()
        known = self._resolved.get(key)
        if known is not None and known[1] == (info.st_dev, info.st_ino):
            return known[0]
        resolved = Path(key).resolve()
        self._resolved[key] = (resolved, (info.st_dev, info.st_ino))
        return resolved

    def load_one_file(self, path: str | os.PathLike[str], source: Source | str = "file") -> LoadedWorkflow:
        workflows = self.load_file(path, source)
        if len(workflows) != 1:
            raise DefinitionError([DefinitionProblem(
                f"file holds {len(workflows)} workflows; name one of: "
                + ", ".join(w.name for w in workflows), str(path))])
        return workflows[0]

    def _load_imports(self, workflow: LoadedWorkflow, chain: tuple[Path, ...]) -> dict[str, LoadedWorkflow]:
        imported: dict[str, LoadedWorkflow] = {}
        problems: list[DefinitionProblem] = []
        base = Path(workflow.file).parent
        for index, entry in enumerate(workflow.definition.imports):
            target = (base / entry).resolve()
            where = ("imports", index)
            if not self._import_allowed(target, chain[0].parent):
                problems.append(workflow.positions.problem(
                    where, f"import {entry!r} leaves the workflow directories; an imported file "
                    "must be under the folder of the workflow being loaded or under "
                    ".aromcp/workflows/, ~/.aromcp/workflows/ or the built-in workflows"))
                continue
            if target in chain:
                cycle = " → ".join(p.name for p in (*chain, target))
                problems.append(workflow.positions.problem(where, f"circular import: {cycle}"))
                continue
            if not target.is_file():
                problems.append(workflow.positions.problem(
                    where, f"imported file {entry!r} not found (import paths are relative to "
                    "the importing file)"))
                continue
            try:
                children = self.load_file(target, "import", chain)
            except DefinitionError as exc:
                problems.append(workflow.positions.problem(
                    where, f"imported file {entry!r} is invalid (its errors are listed "
                    "under its own name)"))
                problems.extend(exc.problems)
                continue
            for child in children:
                imported[child.name] = child
        if problems:
            raise DefinitionError(problems)
        return imported

    def _import_allowed(self, target: Path, root_dir: Path) -> bool:
        allowed = [*self.resolver.roots(), root_dir.resolve()]
        return any(target == d or d in target.parents for d in allowed)

    # -- names and bundles --------------------------------------------------------
    def takes_file(self, target: str) -> bool:
        """Whether `target` is read as a file path: with `names_only`, only an allowed file
        (the one `aromcp-workflows run FILE` asked its own server to run)."""
        if not self.names_only:
            return looks_like_file(target)
        if not self.allowed_files or not target.endswith((".yaml", ".yml")) or len(target) > 4096:
            return False  # decided without touching the file system
        try:
            return Path(target).resolve() in self.allowed_files
        except (OSError, ValueError):
            return False

    def load(self, name_or_file: str) -> LoadedWorkflow:
        """A workflow by name (project, global, built-in) or by path to a .yaml file.

        With `names_only` (the MCP server), a path is refused before the file system is
        touched: a client may run what the workflow directories hold, not any YAML on disk.
        """
        if self.takes_file(name_or_file):
            return self.load_one_file(name_or_file)
        if self.names_only:
            refuse_paths(name_or_file)
        location = self.resolver.find(name_or_file)
        for workflow in self.load_file(location.path, location.source):
            if workflow.name == name_or_file or len(self.load_file(location.path)) == 1:
                return workflow
        raise DefinitionError([DefinitionProblem(f"{location.path} holds no workflow named {name_or_file!r}",
                                       str(location.path))])

    def load_bundle(self, name_or_file: str) -> WorkflowBundle:
        """The workflow and, recursively, every workflow it includes; cycles are errors."""
        return self.bundle_of(self.load(name_or_file))

    def bundle_of(self, main: LoadedWorkflow) -> WorkflowBundle:
        """The bundle rooted at an already loaded workflow (one of a shared file's several)."""
        workflows: dict[str, LoadedWorkflow] = {main.name: main}
        problems: list[DefinitionProblem] = []
        self._collect_includes(main, workflows, (main.name,), problems)
        if problems:
            raise DefinitionError(problems)
        return WorkflowBundle(main, workflows)

    def _collect_includes(self, workflow: LoadedWorkflow, found: dict[str, LoadedWorkflow],
                          chain: tuple[str, ...], problems: list[DefinitionProblem]) -> None:
        for path, step in iter_steps_with_paths(workflow.definition):
            if not isinstance(step, IncludeWorkflowStep):
                continue
            target = step.workflow
            if target in chain:
                cycle = " → ".join((*chain, target))
                problems.append(workflow.positions.problem((*path, "workflow"), f"circular include: {cycle}"))
                continue
            child = workflow.imported.get(target) or found.get(target)
            if child is None:
                child = self._load_included(workflow, path, target, problems)
                if child is None:
                    continue
            found[target] = child
            self._collect_includes(child, found, (*chain, target), problems)


    def _load_included(self, workflow: LoadedWorkflow, path: tuple[Any, ...], target: str,
                       problems: list[DefinitionProblem]) -> LoadedWorkflow | None:
        """The workflow an include names, or None after recording why it cannot be used."""
        where = (*path, "workflow")
        try:
            check_name(target)
            return self.load(target)
        except WorkflowNotFound as exc:
            hint = did_you_mean(target, [*workflow.imported, *exc.available])
            problems.append(workflow.positions.problem(where, (
                f"include_workflow names unknown workflow {target!r}{hint}; import the file "
                f"that defines it, or add {target}.yaml to .aromcp/workflows/")))
        except DefinitionError as exc:
            if exc.problems and exc.problems[0].file is None:  # the name itself was refused
                problems.append(workflow.positions.problem(where, exc.problems[0].message))
            else:
                problems.append(workflow.positions.problem(
                    where, f"included workflow {target!r} is invalid (its errors are listed "
                    "under its own file name)"))
                problems.extend(exc.problems)
        return None


def iter_steps_with_paths(definition: WorkflowDefinition) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every step of a definition (main steps, tasks, handlers) with its data path."""
    roots: list[tuple[tuple[Any, ...], list[Any]]] = [(("steps",), definition.steps)]
    for task_name, task in definition.sub_agent_tasks.items():
        roots.append((("sub_agent_tasks", task_name, "steps"), task.steps))
        roots.append((("sub_agent_tasks", task_name, "error_handling", "cleanup_on_error"),
                      task.error_handling.cleanup_on_error))
    roots.append((("error_handling", "on_failure"), definition.error_handling.on_failure))
    for prefix, steps in roots:
        yield from _walk_steps(prefix, steps)


def _walk_steps(prefix: tuple[Any, ...], steps: list[Any]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    for index, step in enumerate(steps):
        path = (*prefix, index)
        yield path, step
        for key, children in child_step_lists(step):
            yield from _walk_steps((*path, key), children)


def refuse_paths(name: str) -> None:
    """Refuse anything but a workflow name (used where clients, not authors, choose)."""
    reason = name_problem(name)
    if reason:
        raise DefinitionError([DefinitionProblem(
            f"invalid workflow name {name[:200]!r}: {reason}; over MCP only workflows in the workflow "
            "directories run (.aromcp/workflows/ of the project, ~/.aromcp/workflows/, built-ins): put the "
            "file there and pass its name (e.g. 'standards:fix'), or run a file from the command line with "
            "`aromcp-workflows run FILE`")])


def looks_like_file(value: str) -> bool:
    return value.endswith((".yaml", ".yml")) and ("/" in value or "\\" in value or os.path.exists(value))
