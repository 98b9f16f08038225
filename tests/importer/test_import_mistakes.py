"""`aromcp-workflows import` on AroMCP files with mistakes in them, as a user runs it.

Found by an authoring probe: a wrong number of retries ended the import with a traceback
(and skipped every later file), a valid `max_retries` was changed without being printed
and then refused as a translator bug, a plain-text `error_handling` vanished, refusals
inside a renamed key pointed at line 1, and `decrement` of a text became `increment`.
Each mistake must be named at its file:line, and the other files still translated.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "import", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL)


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


PROMPT_RETRIES = 'name: "mm:retries"\nsteps:\n  - type: agent_prompt\n    prompt: "p"\n    max_retries: 2\n'


def test_agent_prompt_max_retries_is_translated_and_printed(tmp_path: Path):
    """The only rewrite of the file: it was made but not printed, then validated as the original."""
    source = write(tmp_path / "in", "retries.yaml", PROMPT_RETRIES)
    done = run(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "please report it" not in done.stdout
    assert f"{source}:5: max_retries: 2 → max_attempts: 3" in done.stdout
    written = (tmp_path / "out" / "retries.yaml").read_text()
    assert "max_attempts: 3" in written and "max_retries" not in written


def test_agent_prompt_max_retries_is_printed_among_other_rewrites(tmp_path: Path):
    source = write(tmp_path, "both.yaml", PROMPT_RETRIES + "  - type: while_loop\n    condition: \"x < 3\"\n"
                                                          "    max_iterations: 3\n    body: []\n")
    done = run(str(source), "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{source}:5: max_retries: 2 → max_attempts: 3" in done.stdout
    assert f"{source}:6: type: while_loop → type: while" in done.stdout


BAD_COUNTS = {
    "a_text.yaml": ('name: "mm:a"\nsteps:\n  - type: agent_prompt\n    prompt: "p"\n    max_retries: "x"\n', 5),
    "b_retry.yaml": ('name: "mm:b"\nsteps:\n  - type: shell_command\n    command: "echo"\n'
                     '    error_handling: {strategy: retry, max_retries: "lots"}\n', 5),
    "c_null.yaml": ('name: "mm:c"\nsteps:\n  - type: agent_prompt\n    prompt: "p"\n    max_retries: null\n', 5),
    "d_negative.yaml": ('name: "mm:d"\nsteps:\n  - type: agent_prompt\n    prompt: "p"\n    max_retries: -1\n', 5),
    "e_huge.yaml": ('name: "mm:e"\nsteps:\n  - type: shell_command\n    command: "echo"\n    error_handling:\n'
                    '      strategy: retry\n      max_retries: 5000\n', 7),
    "f_response.yaml": ('name: "mm:f"\nsteps:\n  - type: agent_prompt\n    prompt: "p"\n  - type: agent_response\n'
                        '    error_handling:\n      strategy: retry\n      max_retries: [1]\n', 8),
    "g_input.yaml": ('name: "mm:g"\nsteps:\n  - type: user_input\n    prompt: "p"\n    max_retries: 2.5\n', 5),
}
GOOD = 'name: "mm:z"\nsteps:\n  - type: while_loop\n    condition: "x < 3"\n    body:\n      - type: user_message\n' \
       '        message: hi\n'


def test_a_wrong_retry_count_is_refused_at_its_line_and_the_other_files_still_translated(tmp_path: Path):
    """Each used to end the whole import with a ValueError/TypeError traceback."""
    folder = tmp_path / "in"
    for name, (text, _) in BAD_COUNTS.items():
        write(folder, name, text)
    write(folder, "z_good.yaml", GOOD)
    done = run(str(folder), "--out", str(tmp_path / "out"))
    assert TRACEBACK not in done.stdout + done.stderr, done.stderr
    assert done.returncode == 1
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["z_good.yaml"]
    for name, (_, line) in BAD_COUNTS.items():
        reported = [x for x in done.stdout.splitlines() if x.startswith(f"{folder / name}:{line}: ")]
        assert reported and "max_retries" in reported[0], (name, done.stdout)
        assert "please report" not in reported[0]
        assert f"{folder / name}: not translated" in done.stderr


def test_plain_text_error_handling_is_translated_with_a_note(tmp_path: Path):
    """`error_handling: "continue"` was removed without a word."""
    source = write(tmp_path / "in", "eh.yaml", 'name: "mm:eh"\nsteps:\n  - type: shell_command\n    command: "echo"\n'
                                               '    error_handling: "continue"\n')
    done = run(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [x for x in done.stdout.splitlines() if x.startswith(f"{source}:5: error_handling: continue → ")]
    assert printed and "on_error: continue" in printed[0] and "strategy" in printed[0], done.stdout
    assert "on_error: continue" in (tmp_path / "out" / "eh.yaml").read_text()


def test_error_handling_that_names_no_strategy_is_refused_at_its_line(tmp_path: Path):
    folder = tmp_path / "in"
    text = write(folder, "text.yaml", 'name: "mm:t"\nsteps:\n  - type: shell_command\n    command: "echo"\n'
                                      '    error_handling: "ignore"\n')
    number = write(folder, "number.yaml", 'name: "mm:n"\nsteps:\n  - type: mcp_call\n    tool: "t"\n'
                                          '    error_handling: 3\n')
    strategy = write(folder, "strategy.yaml", 'name: "mm:s"\nsteps:\n  - type: shell_command\n    command: "echo"\n'
                                              '    error_handling:\n      strategy: skip\n')
    done = run(str(folder), "--check")
    assert done.returncode == 1 and TRACEBACK not in done.stderr, done.stderr
    for path, line in ((text, 5), (number, 5), (strategy, 6)):
        reported = [x for x in done.stdout.splitlines() if x.startswith(f"{path}:{line}: ")]
        assert reported and "error_handling" in reported[0] and "fail, continue, retry, fallback" in reported[0], \
            (path, done.stdout)


def test_a_refusal_inside_a_renamed_key_points_at_that_key(tmp_path: Path):
    """`then_steps: 5` on line 5 was reported at line 1: the renamed key had lost its line."""
    folder = tmp_path / "in"
    then = write(folder, "then.yaml", 'name: "mm:b"\nsteps:\n  - type: conditional\n    condition: "x"\n'
                                      '    then_steps: 5\n')
    other = write(folder, "else.yaml", 'name: "mm:e"\nsteps:\n  - type: conditional\n    condition: "x"\n'
                                       '    then_steps: []\n    else_steps:\n      - 7\n')
    body = write(folder, "body.yaml", 'name: "mm:f"\nsteps:\n  - type: foreach\n    items: "xs"\n'
                                      '    body: "notalist"\n')
    done = run(str(folder), "--check")
    assert done.returncode == 1, done.stdout
    out = done.stdout.splitlines()
    assert f"{then}:5: a step list must be a YAML list of steps" in out, done.stdout
    assert f"{other}:7: a step must be a mapping with a 'type'" in out, done.stdout
    assert f"{body}:5: a step list must be a YAML list of steps" in out, done.stdout


DECREMENT = 'name: "mm:dec"\ndefault_state:\n  state: {n: 5}\nsteps:\n  - type: state_update\n    path: this.n\n' \
            '    operation: decrement\n    value: {value}\n'


def test_decrement_of_a_text_is_refused_not_turned_into_an_increment(tmp_path: Path):
    """`decrement` by "abc" became `increment` by "abc"; AroMCP's subtraction fails on a text."""
    folder = tmp_path / "in"
    text = write(folder, "text.yaml", DECREMENT.replace("{value}", '"abc"'))
    mixed = write(folder, "mixed.yaml", DECREMENT.replace("{value}", '"{{ inputs.k }} items"'))
    good = write(folder, "good.yaml", DECREMENT.replace("{value}", "2"))
    one = write(folder, "one.yaml", DECREMENT.replace("    value: {value}\n", ""))
    done = run(str(folder), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and TRACEBACK not in done.stderr, done.stderr
    for path in (text, mixed):
        reported = [x for x in done.stdout.splitlines() if x.startswith(f"{path}:8: ")]
        assert reported and "decrement" in reported[0] and "number" in reported[0], (path, done.stdout)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good.yaml", "one.yaml"]
    assert f"{good}:7: operation: decrement → operation: increment, value: -2" in done.stdout
    assert "value: -2" in (tmp_path / "out" / "good.yaml").read_text()
    # without a value AroMCP decrements by 1: the -1 must be written, not only printed
    assert f"{one}:7: operation: decrement → operation: increment, value: -1" in done.stdout
    assert "value: -1" in (tmp_path / "out" / "one.yaml").read_text()
