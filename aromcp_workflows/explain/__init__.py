"""Seeing inside workflows without running them (plan, graph) and instances after
they ran (traces, debug info), with secrets masked everywhere.

The face: what other packages may use, each name loaded with its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aromcp_workflows import lazy_face

if TYPE_CHECKING:
    from aromcp_workflows.explain.coverage import branches, covered
    from aromcp_workflows.explain.graph_layout import layout
    from aromcp_workflows.explain.inspect import debug_info, step_history, step_type, step_types, transform_traces
    from aromcp_workflows.explain.locate import Failure, failures, step_of, step_path, where_now
    from aromcp_workflows.explain.mermaid import flow_graph, mermaid_flowchart
    from aromcp_workflows.explain.plan import explain_plan
    from aromcp_workflows.explain.recording import replay_of
    from aromcp_workflows.explain.state_history import TIERS

__all__ = [
    "TIERS",
    "Failure",
    "branches",
    "covered",
    "debug_info",
    "explain_plan",
    "failures",
    "flow_graph",
    "layout",
    "mermaid_flowchart",
    "replay_of",
    "step_history",
    "step_of",
    "step_path",
    "step_type",
    "step_types",
    "transform_traces",
    "where_now",
]
__getattr__ = lazy_face(
    __name__,
    {
        "branches": "coverage",
        "covered": "coverage",
        "debug_info": "inspect",
        "step_history": "inspect",
        "step_type": "inspect",
        "step_types": "inspect",
        "transform_traces": "inspect",
        "layout": "graph_layout",
        "Failure": "locate",
        "failures": "locate",
        "step_of": "locate",
        "step_path": "locate",
        "where_now": "locate",
        "flow_graph": "mermaid",
        "mermaid_flowchart": "mermaid",
        "explain_plan": "plan",
        "replay_of": "recording",
        "TIERS": "state_history",
    },
)
