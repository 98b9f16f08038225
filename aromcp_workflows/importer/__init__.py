"""`aromcp-workflows import`: translate AroMCP's workflow dialect into this project's language.

Split by job: `reading` (round-trip YAML with lines), `js` (renaming inside JavaScript),
`scope` (names in scope, paths, magic result names), `rules_workflow` / `rules_steps` /
`results` (the rewrite rules), `writing` (validate, then write), `report` (what is printed),
`translate` (the whole translation of one file: `translate_text`, `translate_file`),
`command` (the CLI).  This module imports nothing: the CLI registers `import` on every
start (`serve` included), and the rules pull in the whole definition layer.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.importer.command import register

__all__ = ["register"]
__getattr__ = lazy_face(
    __name__,
    {
        "register": "command",
    },
)
