"""The command line: argument parsing and dispatch (`entry`) and the commands themselves (`commands`).

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.cli.entry import main

__all__ = ["main"]
__getattr__ = lazy_face(
    __name__,
    {
        "main": "entry",
    },
)
