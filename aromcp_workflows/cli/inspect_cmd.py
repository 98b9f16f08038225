"""CLI commands that look at workflows and instances without changing them: `explain`,
`graph`, `trace`, `debug`.  Formatting only; the service and `explain/` do the work."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from aromcp_workflows.cli.common import call, parse_inputs, pipe_safe, print_json, service_for


def register_inspecting(commands: Any) -> None:
    """`explain`, `graph`, `trace` and `debug`."""
    explain = commands.add_parser("explain", help="show what a workflow will do, without running it")
    explain.add_argument("workflow", help="workflow name or path to a .yaml file")
    explain.add_argument("--input", "-i", action="append", default=[], metavar="KEY=VALUE",
                         help="a workflow input (repeatable); VALUE is text, converted to the "
                          "input's declared type (JSON for arrays and objects)")
    explain.add_argument("--json", action="store_true", help="print JSON")
    explain.set_defaults(handler=cmd_explain)

    graph = commands.add_parser("graph", help="print a Mermaid flowchart of a workflow")
    graph.add_argument("workflow", help="workflow name or path to a .yaml file")
    graph.set_defaults(handler=cmd_graph)

    trace = commands.add_parser("trace", help="show an instance's computed-field recomputes")
    trace.add_argument("workflow_id")
    trace.add_argument("--field", help="only this computed field")
    trace.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    trace.add_argument("--json", action="store_true", help="print JSON")
    trace.set_defaults(handler=cmd_trace)

    debug = commands.add_parser("debug", help="show an instance's steps, state size and transform timing")
    debug.add_argument("workflow_id")
    debug.add_argument("--store", metavar="PATH", help="SQLite store file or postgresql:// URL")
    debug.add_argument("--json", action="store_true", help="print JSON")
    debug.set_defaults(handler=cmd_debug)


@pipe_safe
def cmd_explain(args: argparse.Namespace) -> int:
    plan = call(lambda: service_for(args).explain_plan(args.workflow, parse_inputs(args.input)))
    if args.json:
        print_json(plan)
        return 0
    estimate = plan.estimated_sub_agents
    print(f"Plan for {plan.workflow}: {len(plan.steps)} steps; sub-agents: "
          f"{estimate['total'] if estimate['total'] is not None else 'see the parallel steps'}")
    print()
    for step in plan.steps:
        print(f"  {step['step_id']}  {step['type']} ({step['side']})")
        for condition in step.get("conditions", []):
            print(f"      {condition}")
        for loop in step.get("loops", []):
            print(f"      in {loop}")
        if step.get("mcp_method"):
            print(f"      calls MCP tool {step['mcp_method']}")
        if step.get("includes"):
            print(f"      runs workflow {step['includes']}")
        if "sub_agent_task" in step:
            note = f" ({step['estimate_note']})" if step.get("estimate_note") else ""
            print(f"      one sub-agent per item running task {step['sub_agent_task']}, at most "
                  f"{step['max_parallel']} at once; sub-agents: {step['estimated_sub_agents']}{note}")
        for path in step.get("writes", []):
            print(f"      writes {path}")
    print()
    print("MCP tools called: " + (", ".join(plan.required_tools) or "none"))
    print("State written: " + (", ".join(plan.state_paths_written) or "nothing"))
    print()
    print("Program:")
    for workflow, programs in plan.program.items():
        for key, lines in programs.items():
            print(f"  {workflow} / {key}")
            for line in lines:
                print(f"    {line}")
    return 0


@pipe_safe
def cmd_graph(args: argparse.Namespace) -> int:
    from aromcp_workflows.definition import DefinitionError, WorkflowLoader, WorkflowResolver
    from aromcp_workflows.explain import mermaid_flowchart

    loader = WorkflowLoader(WorkflowResolver(project_dir=args.project_dir))
    try:  # with what it includes, when the whole bundle loads; else the workflow alone
        bundle = loader.load_bundle(args.workflow)
        definition = bundle.main.definition
        included = {name: w.definition for name, w in bundle.workflows.items() if name != bundle.main.name}
    except DefinitionError:
        definition, included = loader.load(args.workflow).definition, {}
    sys.stdout.write(mermaid_flowchart(definition, included))
    return 0


@pipe_safe
def cmd_trace(args: argparse.Namespace) -> int:
    found = call(lambda: service_for(args).trace_transformations(args.workflow_id, args.field, True))
    if args.json:
        print_json(found)
        return 0
    for trace in found.traces:
        error = trace.get("error")
        if error:
            message = error.get("message", error) if isinstance(error, dict) else error
            status = f"ERROR {message}"
        else:
            status = f"{_short(trace['input'])} → {_short(trace['output'])}"
        print(f"{trace['timestamp']}  {trace['field']:<20} {trace.get('duration_ms') or 0:>8.2f} ms  "
              f"[{trace['trigger']}]  {status}")
    if not found.traces:
        print("No transform traces recorded" + (f" for field {args.field!r}." if args.field else "."))
    return 0


@pipe_safe
def cmd_debug(args: argparse.Namespace) -> int:
    service = service_for(args)
    info = call(lambda: service.debug_info(args.workflow_id))
    if args.json:
        print_json(info)
        return 0
    print(f"{args.workflow_id}  {info.status}")
    if info.definition_changed:
        print(f"Definition changed since start (aromcp-workflows migrate {args.workflow_id} moves it onto the file)")
    for move in info.migrations or []:
        print(f"Migrated at {move['timestamp']} onto {move['file']}; the definition it ran before is in "
              "`debug --json` (migrations[].old_definition)")
    print("Current steps: " + (", ".join(f"{t}: {s or '-'}" for t, s in info.current_steps.items()) or "none"))
    if info.error:
        print(f"Error: {info.error}")
    print("Step history:")
    for entry in info.step_history:
        task = f" [{entry['task_id']}]" if entry.get("task_id") else ""
        took = f" {entry['duration_ms']:.0f} ms" if entry.get("duration_ms") is not None else ""
        error = f"  {entry['error']}" if entry.get("error") else ""
        if entry.get("ended_by"):  # a loop's end: what ended it
            error = f"  ended by {entry['ended_by']} after {entry.get('iterations')} iteration(s)" + error
        print(f"  {entry['status']:<8} {entry['step_id']}{task} ({entry.get('type') or '?'}) "
              f"{entry['started_at']} → {entry.get('completed_at') or '…'}{took}{error}")
    _print_command_output(service, args.workflow_id)
    size = info.state_size
    print(f"State size: raw {size['raw_bytes']} B, state {size.get('state_bytes', 0)} B, computed "
          f"{size['computed_bytes']} B; {size['total_transformations']} transformations")
    perf = info.performance
    print(f"Transform time: average {perf['avg_transformation_time']} ms")
    for row in perf["slowest_transformations"]:
        print(f"  {row['field']:<24} avg {row['avg_ms']} ms over {row.get('count', '?')} runs")
    return 0


def _print_command_output(service: Any, workflow_id: str, lines: int = 20) -> None:
    """The main thread's server-side command: its output so far while it runs, else what the
    history kept of its last one (the last `lines` lines of each stream)."""
    output = call(lambda: service.command_output(workflow_id))
    if output.source == "none":
        return
    if output.running:
        where = "runs on another host: its output is readable there" if output.source == "elsewhere" else "running"
        print(f"Command of step {output.step_id} ({where}): {output.command}")
    else:
        print(f"Last command, step {output.step_id} (exit code {output.exit_code}): {output.command}")
    for name, part in (("stdout", output.stdout), ("stderr", output.stderr)):
        shown = part.text.rstrip("\n").split("\n")[-lines:] if part.text.strip() else []
        if shown:
            cut = " (earlier output not shown)" if part.cut or part.text.count("\n") > lines else ""
            print(f"  {name}{cut}:")
            print("\n".join(f"    {line}" for line in shown))


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
