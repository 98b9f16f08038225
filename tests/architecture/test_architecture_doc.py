"""docs/architecture.md stays true: its import map is the package's real imports, arrow for
arrow, and every `module:Name.attr` it cites exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
CITED = re.compile(r"`(aromcp_workflows(?:\.\w+)*):([\w.]+)`")


def package_imports() -> dict[str, set[str]]:
    """Which of our packages each package imports (a module of it imports a module of them)."""
    from test_imports import _graph  # tests/architecture is on sys.path (rootdir import mode)

    edges: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        source = module.split(".")[1] if "." in module else ""
        for target in targets:
            dest = target.split(".")[1] if "." in target else ""
            if source and dest and source != dest:
                edges.setdefault(source, set()).add(dest)
    return edges


def doc_imports() -> dict[str, set[str]]:
    """The arrows of the ```imports block: `package ▶ what it imports`."""
    block = re.search(r"```imports\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert block, "docs/architecture.md has no ```imports block"
    arrows = {}
    for line in block.group(1).strip().splitlines():
        source, _, targets = line.partition("▶")
        arrows[source.strip()] = set(targets.split())
    return arrows


def test_the_import_map_is_the_real_imports() -> None:
    real, drawn = package_imports(), doc_imports()
    missing = sorted(f"{a} ▶ {b}" for a, bs in real.items() for b in bs - drawn.get(a, set()))
    extra = sorted(f"{a} ▶ {b}" for a, bs in drawn.items() for b in bs - real.get(a, set()))
    assert missing == [], f"imports the page does not draw: {missing}"
    assert extra == [], f"arrows the page draws that no import makes: {extra}"


def test_every_cited_name_exists() -> None:
    cited = CITED.findall(DOC.read_text(encoding="utf-8"))
    assert len(cited) >= 15, "the walk of get_next_step names each function on the way"
    for module_name, qualname in cited:
        target: object = importlib.import_module(module_name)
        for part in qualname.split("."):
            assert hasattr(target, part), f"docs/architecture.md cites {module_name}:{qualname}, which does not exist"
            target = getattr(target, part)


def test_the_handler_table_lists_every_instruction() -> None:
    from aromcp_workflows.interpreter import program
    from aromcp_workflows.interpreter.run import HANDLERS

    instructions = {cls for cls in vars(program).values() if isinstance(cls, type)
                    and issubclass(cls, program.Instruction) and cls is not program.Instruction}
    assert set(HANDLERS) == instructions
    text = DOC.read_text(encoding="utf-8")
    for cls in instructions:
        assert f"`{cls.__name__}`" in text


def test_the_measured_road_is_the_one_quoted(tmp_path: Path) -> None:
    """The walk of one `workflow_get_next_step` quotes what `benchmarks/call_road.py` measures
    (files and packages its code runs in): a change that adds a file to the road updates the
    figure, as the 38th file once did silently."""
    import os
    import subprocess
    import sys

    repo = DOC.parents[1]
    printed = subprocess.run([sys.executable, str(repo / "benchmarks" / "call_road.py")], capture_output=True,
                             text=True, timeout=120, cwd=repo, check=True,
                             env={**os.environ, "TMPDIR": str(tmp_path), "HOME": str(tmp_path)}).stdout
    files, packages = re.match(r"(\d+) files in (\d+) packages", printed).groups()  # type: ignore[union-attr]
    assert f"its code runs in {files} files of {packages} packages" in DOC.read_text(encoding="utf-8"), printed
