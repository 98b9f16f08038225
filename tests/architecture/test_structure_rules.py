"""The rules a maintainer relies on, with their numbers, so they cannot drift back
(docs/architecture.md, "Rules of the house").

Read from the source, as the floors test reads it: faces, typed steps, one name per thing,
errors with a kind, no class split by inheritance across files.  (No package circle is
`test_imports.test_no_package_circle`.)
"""

from __future__ import annotations

import ast
import importlib
import re
import types
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aromcp_workflows"
PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())


def _modules() -> Iterator[tuple[Path, str, ast.Module]]:
    """(path, package it belongs to or "" at the top, tree) of every module."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        yield path, parts[0] if len(parts) > 1 else "", ast.parse(path.read_text(encoding="utf-8"))


def _face(package: str) -> list[str]:
    module = importlib.import_module(f"aromcp_workflows.{package}")
    return list(getattr(module, "__all__", []))


# -- 2. faces ----------------------------------------------------------------------------------
def inner_imports() -> list[str]:
    """Imports of another package's inner module (`aromcp_workflows.X.Y` from outside X)."""
    found = []
    for path, mine, tree in _modules():
        for node in ast.walk(tree):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "aromcp_workflows" and len(parts) >= 3 and parts[1] != mine:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}")
    return found


def test_other_packages_are_entered_only_through_their_face() -> None:
    """168 imports reached inside other packages before their faces; none may now."""
    assert inner_imports() == []


def test_every_name_a_face_offers_is_there_and_is_no_module() -> None:
    """A face's name loads (a lazy face maps it to the right module), and is not shadowed by
    a submodule of the same name (importing that module would replace the name with it)."""
    for package in PACKAGES:
        module = importlib.import_module(f"aromcp_workflows.{package}")
        for name in _face(package):
            assert not (PACKAGE / package / f"{name}.py").exists(), f"{package}.{name} is also a module's name"
            value = getattr(module, name)
            assert not isinstance(value, types.ModuleType), f"aromcp_workflows.{package}.{name} is a module"


# -- 3. typed steps ------------------------------------------------------------------------
def test_no_function_takes_a_step_as_any() -> None:
    found = []
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for arg in node.args.args + node.args.kwonlyargs:
                    if arg.arg == "step" and arg.annotation is not None and ast.unparse(arg.annotation) == "Any":
                        found.append(f"{path.relative_to(PACKAGE)}:{node.name}")
    assert found == []


BARE_ANY_CEILING = 22  # public face functions taking or returning a bare `Any`: JSON values only (was 36)


def test_faces_say_what_their_functions_take_and_return() -> None:
    """A function others use names its types; a bare `Any` is left only where the value is
    any JSON value (a state value, a result, what a template gives)."""
    bare = []
    for path, package, tree in _modules():
        offered = set(_face(package)) if package else set()
        for node in tree.body:
            functions = [node] if isinstance(node, ast.FunctionDef) and node.name in offered else (
                [f for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")]
                if isinstance(node, ast.ClassDef) and node.name in offered else [])
            for function in functions:
                annotations = [a.annotation for a in function.args.args + function.args.kwonlyargs] + [function.returns]
                if any(a is not None and ast.unparse(a) == "Any" for a in annotations):
                    bare.append(f"{path.relative_to(PACKAGE)}:{function.name}")
    assert len(bare) <= BARE_ANY_CEILING, bare


# -- 4. one name, one thing ------------------------------------------------------------------------
def _type_names() -> dict[str, set[str]]:
    defined: dict[str, set[str]] = defaultdict(set)
    for path, _, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined[node.name].add(str(path.relative_to(PACKAGE)))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                alias = isinstance(node.value, ast.Subscript | ast.BinOp) or (
                    isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") in ("TypeVar", "NewType"))
                for target in targets:
                    if isinstance(target, ast.Name) and alias and target.id[:1].isupper() and not target.id.isupper():
                        defined[target.id].add(str(path.relative_to(PACKAGE)))
    return defined


def test_no_public_type_name_is_defined_twice() -> None:
    """19 type names (Answer, Pending, Path hiding pathlib.Path, ...) had two or three meanings."""
    assert {name: sorted(where) for name, where in _type_names().items() if len(where) > 1} == {}


def _identifiers() -> Iterator[tuple[str, str]]:
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield str(path.relative_to(PACKAGE)), node.name
            elif isinstance(node, ast.Name):
                yield str(path.relative_to(PACKAGE)), node.id


def test_one_verb_for_adoption_and_no_settle() -> None:
    """Six verbs named a command taken over from a dead server (adopt is the one); "settle"
    meant five things on one call (each has a name of its own now)."""
    other_verbs = re.compile(r"take_?back|take_?over|claim_abandoned|take_result|reattach", re.I)
    found = [f"{where}: {name}" for where, name in _identifiers()
             if other_verbs.search(name) or "settle" in name.lower()]
    assert found == []


def test_the_command_claim_is_a_typed_record() -> None:
    """The claim was a dict with five keys known in four files: it is `ShellClaim`."""
    found = []
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and isinstance(node.func.value, ast.Attribute | ast.Name)
                    and ast.unparse(node.func.value).endswith("claim")):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


# -- 5. errors with a kind ----------------------------------------------------------------------------
WORDING = re.compile(r"[\"'] in str\((exc|e|err|error)\)|str\((exc|e|err|error)\)\.(startswith|endswith)|"
                     r"[\"'] in (exc|e|err|error)\.args|\b(exc|e|err|error)\.args\[0\]\s*(==|in)")


def test_no_code_decides_on_an_error_wording_but_two_commented_third_party_messages() -> None:
    found = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines):
            if WORDING.search(line):
                said = " ".join(lines[max(0, number - 3):number])
                found.append((str(path.relative_to(PACKAGE)), "the two messages of another library" in said))
    assert sorted(found) == [("shell/runner.py", True)], found


def test_every_domain_error_says_its_kind() -> None:
    from aromcp_workflows.errors import KINDS, KindedError

    def all_subclasses(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from all_subclasses(sub)

    for package in PACKAGES:
        importlib.import_module(f"aromcp_workflows.{package}")
    for name in ("store", "state", "definition", "interpreter", "instances", "expressions"):
        importlib.import_module(f"aromcp_workflows.{name}")
    kinded = list(all_subclasses(KindedError))
    assert len(kinded) >= 12
    assert all(cls.kind in KINDS for cls in kinded)


# -- 7. no class split by inheritance across files ------------------------------------------------
def test_no_base_class_has_its_only_subclass_in_another_file() -> None:
    """A base class with one subclass elsewhere hides the main road from "go to definition"
    (Machine → WorkflowRun, LiveInstances → InstanceRegistry, the service's three parts were
    so).  A Protocol or an ABC, or a base with several subclasses, is an interface and stays."""
    classes: dict[str, tuple[str, list[str]]] = {}
    for path, _, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (str(path.relative_to(PACKAGE)), [ast.unparse(b) for b in node.bases])
    subclasses: dict[str, list[str]] = defaultdict(list)
    for where, bases in classes.values():
        for base in bases:
            subclasses[base.split(".")[-1]].append(where)
    split = []
    for base, wheres in subclasses.items():
        if base not in classes or len(wheres) != 1:
            continue
        home, bases = classes[base]
        interface = any(b.split("[")[0].split(".")[-1] in ("Protocol", "ABC", "Exception", "BaseModel", "Enum")
                        for b in bases) or base.endswith(("Error", "Exception"))
        if wheres[0] != home and Path(wheres[0]).parent == Path(home).parent and not interface:
            split.append(f"{base} ({home}) -> its one subclass in {wheres[0]}")
    assert split == []
