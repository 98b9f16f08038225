"""The package has no import circle, and each layer imports only the layers below it.

Read from the source (module-level and function-level imports alike), so the test fails
the moment a handler imports the loop back or the runner reaches into the server.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "aromcp_workflows"

DOC = PACKAGE.parent / "docs" / "architecture.md"


def floors_from_doc() -> list[set[str]]:
    """The floors, lowest first, as docs/architecture.md's table states them (the page is
    the one place they are written: this test and the reader see the same rule)."""
    floors: dict[int, set[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            floors[int(cells[0])] = {name.strip("`/") for name in re.findall(r"`[\w_]+/?`", cells[1])}
    assert floors and sorted(floors) == list(range(len(floors))), "the floor table of docs/architecture.md"
    return [floors[n] for n in sorted(floors)]


FLOORS = floors_from_doc()


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _relative_imports() -> list[str]:
    """Every import in the package is absolute: the graph below reads module names, and a
    relative import would hide a module's edges from the layering and circle checks."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aromcp_workflows"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    graph[name].add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name.startswith("aromcp_workflows"))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def _floor(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for level, names in enumerate(FLOORS):
        if top in names:
            return level
    raise AssertionError(f"{module} is on no floor: add its package to the floor table of docs/architecture.md")


def test_imports_are_absolute() -> None:
    assert _relative_imports() == []


def test_top_level_holds_only_the_entry_points() -> None:
    """Everything lives in a package of its own concept; the top holds `__init__`/`__main__`."""
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_interpreter_handlers_do_not_import_the_loop() -> None:
    graph = _graph()
    handlers = [m for m in graph if m.startswith("aromcp_workflows.interpreter.") and not m.endswith(".run")]
    assert handlers
    for module in handlers:
        assert "aromcp_workflows.interpreter.run" not in graph[module], module


def _package_graph() -> dict[str, set[str]]:
    """Which of our packages each package imports (a module of it imports a module of them)."""
    packages: dict[str, set[str]] = defaultdict(set)
    for module, targets in _graph().items():
        source = module.split(".")[1] if "." in module else ""
        for target in targets:
            dest = target.split(".")[1] if "." in target else ""
            if source and dest and source != dest:
                packages[source].add(dest)
    return packages


def test_no_package_circle() -> None:
    """Two packages that import each other, even through modules that do not, are one room
    with two doors: the floors allow it on one floor, this does not."""
    assert _cycles(_package_graph()) == []


def test_layers_import_only_downwards() -> None:
    wrong = []
    for module, targets in _graph().items():
        if module == "aromcp_workflows":
            continue
        for target in targets:
            if target != "aromcp_workflows" and _floor(target) > _floor(module):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_interpreter_does_no_io() -> None:
    """The machine returns effects; processes, files and the store belong to the instance layer."""
    forbidden = {"subprocess", "sqlite3", "socket", "aromcp_workflows.integrations", "aromcp_workflows.store"}
    for path in (PACKAGE / "interpreter").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not any(name == f or name.startswith(f + ".") for f in forbidden), f"{path.name}: {name}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{path.name} opens a file"
