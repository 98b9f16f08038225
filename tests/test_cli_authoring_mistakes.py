"""What a workflow author meets when a file or a flag is wrong, found by a probe and pinned:
`test | head` keeps the verdict, an answers file that is not UTF-8 or not YAML and a
workflow file with a control character say `file:line:column: message` in one line, the
step history names the type of a step in nested loops, and usage mistakes exit 2.

Every command runs as a subprocess (`python -m aromcp_workflows`, so `PYTHONPATH` picks the
code under test), with HOME and the store in the test's own folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FAILING = """\
name: "dd:fail"
steps:
  - type: user_message
    message: "hi"
"""
ASKS = """\
name: "mm:ask"
steps:
  - id: ask
    type: user_input
    prompt: "Ship it?"
"""
NESTED = """\
name: "ff:nest"
steps:
  - id: outer
    type: while
    condition: "{{ true }}"
    max_iterations: 2
    body:
      - id: inner
        type: while
        condition: "{{ true }}"
        max_iterations: 2
        body:
          - { type: state_update, path: raw.n, operation: increment }
"""
CASES = 20


def environment(base: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    return {**env, "HOME": str(base / "home"), "AROMCP_WORKFLOWS_STORE": str(base / "store.sqlite3")}


def cli(project: Path, *args: str, **options: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "aromcp_workflows", "--project-dir", str(project), *args]
    settings: dict[str, object] = {"capture_output": True, "stdin": subprocess.DEVNULL, **options}
    return subprocess.run(command, text=True, env=environment(project.parent), timeout=120, cwd=project,
                          **settings)  # type: ignore[call-overload]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "dd:fail.yaml").write_text(FAILING)
    (folder / "dd:fail.test.yaml").write_text("cases:\n" + "".join(
        f'  - name: c{i}\n    expect: {{ messages: ["nope"] }}\n' for i in range(CASES)))
    (folder / "mm:ask.yaml").write_text(ASKS)
    return tmp_path / "project"


def said(done: subprocess.CompletedProcess[str]) -> str:
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text
    return text


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The `error: ` lines and any line a multi-line error would continue with."""
    return [line for line in said(done).splitlines() if line.startswith(("error: ", "  in ", "    "))]


# -- 1. `test | head` keeps the verdict ----------------------------------------------------------

def test_test_into_a_closed_pipe_still_runs_every_case_and_fails(project: Path, tmp_path: Path) -> None:
    """The reader is gone before the first line: the cases still run (the JUnit file has all
    of them) and the exit status still says they failed, with nothing on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    junit = tmp_path / "junit.xml"
    try:
        done = cli(project, "test", "dd:fail", "--junit", str(junit), capture_output=False, stdout=write_end,
                   stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "", done.stderr
    assert f'tests="{CASES}" failures="{CASES}"' in junit.read_text()


def test_test_piped_to_head_keeps_its_exit_status(project: Path) -> None:
    """As users type it: `aromcp-workflows test | head -1` shows the first line, and the
    test command's own status is 1 (bash's PIPESTATUS), not the 0 of a listing cut short."""
    command = (f"'{sys.executable}' -m aromcp_workflows --project-dir '{project}' test dd:fail | head -1; "
               "exit ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", command], env=environment(project.parent), capture_output=True,
                          text=True, timeout=120, cwd=project)
    assert done.returncode == 1, said(done)
    assert done.stdout.splitlines() == [".aromcp/workflows/dd:fail.test.yaml::c0 FAILED"], done.stdout
    assert done.stderr == "", done.stderr


def test_a_passing_test_into_a_closed_pipe_exits_0(project: Path) -> None:
    (project / ".aromcp/workflows/dd:fail.test.yaml").write_text('cases:\n  - name: ok\n    expect: '
                                                                 '{ messages: ["hi"] }\n')
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = cli(project, "test", capture_output=False, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


# -- 2, 3. an answers file that is not UTF-8 or not YAML -------------------------------------

def test_an_answers_file_that_is_not_utf8_is_a_one_line_usage_error(project: Path, tmp_path: Path) -> None:
    answers = tmp_path / "answers.yaml"
    answers.write_bytes(b'ask: "\xff"\n')
    done = cli(project, "run", "mm:ask", "--answers", str(answers))
    assert done.returncode == 2, said(done)
    assert error_lines(done) == [f"error: {answers}:1:7: file is not UTF-8 text (invalid start byte); save it as UTF-8"]


@pytest.mark.parametrize("text,where,words", [
    (b"ask: yes\nask: no\n", "2:1", "duplicate key 'ask' (first written on line 1)"),
    (b"ask:\n\t- x\n", "2:1", "invalid YAML: tab character"),
    (b'ask: "a\x00"\n', "1:8", "invalid YAML: control character U+0000"),
    (b"ask: [a, b\n", "2:1", "invalid YAML: expected ',' or ']'"),
])
def test_an_answers_file_yaml_error_is_file_line_column(project: Path, tmp_path: Path, text: bytes, where: str,
                                                        words: str) -> None:
    """As the workflow loader says them: one line, no `<unicode string>`, no ruamel link."""
    answers = tmp_path / "answers.yaml"
    answers.write_bytes(text)
    done = cli(project, "run", "mm:ask", "--answers", str(answers))
    assert done.returncode == 2, said(done)
    lines = error_lines(done)
    assert len(lines) == 1 and lines[0].startswith(f"error: {answers}:{where}: "), lines
    assert words in lines[0], lines
    assert "<unicode string>" not in said(done) and "yaml.dev" not in said(done)


# -- 4. a control character or bad UTF-8 in a workflow file ----------------------------------

@pytest.mark.parametrize("bad,words", [(b"\x00", "control character U+0000"),
                                       (b"\x07", "control character U+0007"),
                                       (b"\xff", "file is not UTF-8 text")])
def test_a_bad_character_in_a_workflow_has_line_and_column(project: Path, bad: bytes, words: str) -> None:
    (project / ".aromcp/workflows/tt:bad.yaml").write_bytes(
        b'name: "tt:bad"\nsteps:\n  - type: user_message\n    message: "h' + bad + b'i"\n')
    done = cli(project, "validate", "tt:bad")
    assert done.returncode == 1, said(done)
    problems = [line for line in said(done).splitlines() if "tt:bad.yaml" in line]
    assert len(problems) == 1 and problems[0].startswith(".aromcp/workflows/tt:bad.yaml:4:16: "), said(done)
    assert words in problems[0]
    assert "<file>" not in said(done) and "position" not in said(done)


# -- 5. the type of a step inside nested loops -------------------------------------------------

def test_history_names_the_type_of_a_step_in_nested_loops(project: Path) -> None:
    folder = project / ".aromcp/workflows"
    (folder / "ff:nest.yaml").write_text(NESTED)
    (folder / "ff:nest.test.yaml").write_text("cases:\n  - name: n\n    expect: { state: { n: 99 } }\n")
    done = cli(project, "test", "ff:nest")
    assert done.returncode == 1, said(done)
    assert "outer.inner.state_update_1#2.1 (state_update)" in done.stdout, done.stdout
    assert "(?)" not in done.stdout, done.stdout


# -- 6, 7. usage mistakes exit 2 -----------------------------------------------------------------

def test_explain_with_a_malformed_input_is_a_usage_error_like_run(project: Path) -> None:
    for command in ("explain", "run"):
        done = cli(project, command, "mm:ask", "--input", "noequals")
        assert done.returncode == 2, (command, said(done))
        assert error_lines(done) == ["error: --input 'noequals' is not KEY=VALUE (for example --input "
                                     "base_ref=main or --input 'files=[\"a.ts\"]')"], (command, said(done))


@pytest.mark.parametrize("value", ["150", "-5", "100.5", "nan", "many"])
def test_coverage_min_outside_0_to_100_is_a_usage_error(project: Path, value: str) -> None:
    done = cli(project, "test", "dd:fail", f"--coverage-min={value}")
    assert done.returncode == 2, said(done)
    assert f"--coverage-min: {value!r} is not a percentage from 0 to 100" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["0", "100"])
def test_coverage_min_at_the_bounds_is_taken(project: Path, value: str) -> None:
    (project / ".aromcp/workflows/dd:fail.test.yaml").write_text("cases:\n  - name: ok\n")
    done = cli(project, "test", "dd:fail", "--coverage-min", value)
    assert done.returncode == 0, said(done)
    assert "branch coverage" in done.stdout


def test_a_bad_character_far_into_a_file_with_a_byte_order_mark(project: Path) -> None:
    """The line and column count as an editor does: past the parser's reading chunks, and a
    byte-order mark (which editors do not show) is no column."""
    rows = "".join(f'    k{i}: "välue ☃ {i}"\n' for i in range(3000))
    (project / ".aromcp/workflows/tt:far.yaml").write_bytes(
        ('\ufeffname: "tt:far"\ndefault_state:\n  raw:\n' + rows + '    z: "a\x00"\n'
         "steps:\n  - type: user_message\n    message: hi\n").encode())
    done = cli(project, "validate", "tt:far")
    assert done.returncode == 1, said(done)
    assert ".aromcp/workflows/tt:far.yaml:3004:10: invalid YAML: control character U+0000" in done.stdout, done.stdout


def test_validate_into_a_closed_pipe_keeps_its_verdict(project: Path) -> None:
    """`validate --all | head` in CI: an invalid workflow still fails the job."""
    (project / ".aromcp/workflows/broken.yaml").write_text("name: broken\nsteps:\n  - {type: nonsense}\n")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = cli(project, "validate", "broken", capture_output=False, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert done.returncode == 1 and done.stderr == "", done.stderr

