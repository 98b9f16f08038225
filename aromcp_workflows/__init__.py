"""aromcp-workflows: an MCP server that runs YAML workflows for coding agents.

The server holds the program counter: it evaluates conditions, loops and data
transforms itself and hands the agent one atomic step at a time.

Each package's `__init__.py` is its face: the names other packages may use, and nothing
else (docs/architecture.md).  A face whose modules are heavy to import (the MCP SDK, V8,
the store) names them through `lazy_face`, so that importing one name costs only its module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__version__ = "0.1.0"


def lazy_face(package: str, where: dict[str, str]) -> Callable[[str], object]:
    """A face's module `__getattr__` (PEP 562): `where` maps each name it offers to the
    module that defines it (of the package, or a whole dotted name for one it passes on
    from below), imported on the first use of the name (a server starts without the parts
    it has not used yet).  The face lists the same names under
    `TYPE_CHECKING` for the type checker and the reader."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        dotted = module if module.startswith("aromcp_workflows.") else f"{package}.{module}"
        # __import__, not importlib.import_module: the import statement's own road, which
        # `python -X importtime` reports (the start-up tests read it)
        value = getattr(__import__(dotted, fromlist=[name]), name)
        setattr(sys.modules[package], name, value)  # asked once: later uses are plain attribute reads
        return value

    return __getattr__
