"""The workflows the repair tests run (the MCP tests in this folder, the CLI test in e2e/)."""

AGENT = """
name: "repair:agent"
default_state:
  raw: {log: [], errors: [], answer: null, cleaned_up: false, count: 0}
state_schema:
  raw: {count: number, answer: string}
  computed:
    doubled: {from: raw.count, transform: "input * 2"}
error_handling:
  error_collection: {state_path: raw.errors}
  on_failure:
    - {id: mark, type: state_update, path: raw.cleaned_up, value: true}
steps:
  - {id: first, type: state_update, path: raw.log, operation: append, value: first}
  - id: ask
    type: agent_prompt
    prompt: "log has {{ log.length }} entries, doubled is {{ doubled }}"
    state_update: {path: raw.answer}
  - {id: last, type: state_update, path: raw.log, operation: append, value: last}
"""

SERVER_SIDE = """
name: "repair:server-side"
default_state:
  raw: {log: [], errors: []}
error_handling:
  error_collection: {state_path: raw.errors}
steps:
  - {id: ask, type: agent_prompt, prompt: "anything", state_update: {path: raw.answer}}
  - {id: note, type: state_update, path: raw.log, operation: append, value: "after ask"}
  - {id: boom, type: state_update, path: raw.value, value: "{{ config.deep.value }}"}
  - {id: done, type: state_update, path: raw.log, operation: append, value: "done"}
"""

FANOUT = """
name: "repair:fanout"
default_state:
  raw: {done: [], errors: []}
error_handling:
  error_collection: {state_path: raw.errors}
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ ['a', 'b', 'c'] }}"
    max_parallel: 3
    sub_agent_task: work
  - {id: after, type: state_update, path: raw.finished, value: true}
sub_agent_tasks:
  work:
    steps:
      - {id: record, type: state_update, path: raw.done, operation: append, value: "{{ item }}"}
      - {id: check, type: shell_command, command: "test {{ item }} != b || test -f go.txt"}
"""

LOOPS = """
name: "repair:loops"
default_state:
  raw: {applied: [], tone: "plain"}
steps:
  - id: fan
    type: parallel_foreach
    items: "{{ [['x1', 'x2'], ['y1', 'y2']] }}"
    sub_agent_task: fix
  - {id: close, type: agent_prompt, prompt: "applied {{ applied.length }} in tone {{ tone }}"}
sub_agent_tasks:
  fix:
    steps:
      - id: files
        type: foreach
        items: "{{ item }}"
        steps:
          - id: apply
            type: agent_prompt
            prompt: "fix {{ item }} in tone {{ tone }}"
            state_update: {path: raw.applied, operation: append}
"""

EXITS = """
name: "repair:exits"
steps:
  - {id: ask, type: agent_prompt, prompt: "go?"}
  - {id: stop, type: exit, status: failed, message: "stopped on purpose"}
"""

WORKFLOWS = {"repair:agent": AGENT, "repair:server-side": SERVER_SIDE, "repair:fanout": FANOUT,
             "repair:loops": LOOPS, "repair:exits": EXITS}

# The agent workflow with a command between `ask` and `last` that fails until ready.txt exists.
CLI = AGENT.replace('name: "repair:agent"', 'name: "repair:cli"').replace(
    "  - {id: last,", "  - {id: needs_file, type: shell_command, command: \"cat ready.txt\", "
    "state_update: {path: raw.ready}}\n  - {id: last,")
