"""docs/architecture.md stays true: every `module:Name.attr` it cites must exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
CITED = re.compile(r"`(aromcp_workflows(?:\.\w+)*):([\w.]+)`")


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
