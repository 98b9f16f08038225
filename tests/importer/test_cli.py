"""`aromcp-workflows import` as a user runs it: printed rewrites, exit codes, written files.

Exit codes: 0 all translated, 1 some part could not be (that file is not written), 2 usage
errors.  Files already valid in this project's language are copied byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aromcp_workflows.cli.entry import main
from aromcp_workflows.definition.resolver import is_workflow_file_name
from tests.importer.importer_helpers import CORPUS, FIXTURES, ORIGINALS

ROOT = Path(__file__).resolve().parents[2]
REFUSED = CORPUS / "untranslatable" / "refused.yaml"
HELLO = ORIGINALS / "later-dialect" / "hello-world.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aromcp_workflows", "import", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120, stdin=subprocess.DEVNULL)


def test_translates_a_folder_and_prints_each_rewrite(tmp_path: Path):
    done = run(str(ORIGINALS), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in ORIGINALS.glob("*.yaml"))
    lines = done.stdout.splitlines()
    source = ORIGINALS / "code-standards:enforce.yaml"
    assert f"{source}:85: then_steps → then" in lines
    assert f"{source}:135: type: while_loop → type: while" in lines
    assert any(line.startswith(f"{source}:95: stdout → {{{{ result.stdout }}}}") for line in lines)
    for name in ("test:simple.yaml", "test:sub-agents.yaml"):
        assert (tmp_path / "out" / name).read_text() == (FIXTURES / name).read_text()


def test_check_prints_and_writes_nothing(tmp_path: Path):
    done = run(str(ORIGINALS / "test:simple.yaml"), "--check", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert f"{ORIGINALS / 'test:simple.yaml'}:36: stdout → {{{{ result.stdout }}}}" in done.stdout
    assert not (tmp_path / "out").exists()


def test_untranslatable_parts_exit_1_and_that_file_is_not_written(tmp_path: Path):
    good = CORPUS / "corpus:branches.yaml"
    done = run(str(REFUSED), str(HELLO), str(good), "--out", str(tmp_path))
    assert done.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus:branches.yaml"]
    out = done.stdout
    assert f"{REFUSED}:19: computed field reads 'loop.item'" in out
    assert f"{REFUSED}:23: operation 'multiply' on state.score has no counterpart here" in out
    assert f"{REFUSED}:29: state_update path writes 'inputs.limit'; inputs.* is read-only here" in out
    assert f"{REFUSED}:34: step type 'teleport' has no counterpart here" in out
    assert f"{HELLO}:12: an 'action:' step (AroMCP's later Temporal dialect) cannot be translated" in out
    assert f"{REFUSED}:23: this.score → state.score" not in out  # a refused file shows only why


def test_check_reports_untranslatable_with_exit_1(tmp_path: Path):
    assert main(["import", str(REFUSED), "--check"]) == 1


@pytest.mark.parametrize("args", [["missing.yaml", "--out", "x"], [str(ORIGINALS / "test:simple.yaml")], []])
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]):
    try:
        code = main(["import", *args])
    except SystemExit as exc:  # argparse: no PATH at all
        code = int(exc.code or 0)
    assert code == 2
    assert capsys.readouterr().err


def test_same_file_name_twice_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    (tmp_path / "a").mkdir()
    shutil.copy(ORIGINALS / "test:simple.yaml", tmp_path / "a" / "test:simple.yaml")
    code = main(["import", str(ORIGINALS / "test:simple.yaml"), str(tmp_path / "a" / "test:simple.yaml"),
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "share the file name test:simple.yaml" in capsys.readouterr().err


def test_own_dialect_passes_through_unchanged(tmp_path: Path):
    ours = sorted(p for p in (ROOT / "workflows").glob("*.yaml") if is_workflow_file_name(p.name))
    assert ours
    done = run(*[str(p) for p in ours], "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    for path in ours:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes()
        assert f"{path}: already valid in this project's language; copied unchanged" in done.stdout


def test_translated_output_imports_again_unchanged(tmp_path: Path):
    """An imported file is valid here, so importing it again changes nothing."""
    done = run(str(FIXTURES / "test:sub-agents.yaml"), "--out", str(tmp_path))
    assert done.returncode == 0
    assert (tmp_path / "test:sub-agents.yaml").read_bytes() == (FIXTURES / "test:sub-agents.yaml").read_bytes()


def test_help_describes_the_command():
    done = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert "translate AroMCP workflow files" in done.stdout
    detail = run("--help")
    assert "--out DIR" in detail.stdout and "--check" in detail.stdout and "Exit 0" in detail.stdout


def test_valid_in_both_languages_is_copied_with_a_hint_or_translated_on_request(tmp_path: Path):
    both = tmp_path / "both.yaml"
    both.write_text('name: both\ndescription: d\nversion: "1.0.0"\nsteps:\n  - id: run\n    type: shell_command\n'
                    '    command: "echo hi"\n    state_update:\n      path: state.out\n      value: stdout\n')
    copied = run(str(both), "--out", str(tmp_path / "a"))
    assert copied.returncode == 0
    assert f"{both}:10: note: 'stdout' is plain text here; AroMCP reads it as {{{{ result.stdout }}}}" in copied.stdout
    assert (tmp_path / "a" / "both.yaml").read_bytes() == both.read_bytes()
    translated = run(str(both), "--assume-aromcp", "--out", str(tmp_path / "b"))
    assert translated.returncode == 0
    assert "value: '{{ result.stdout }}'" in (tmp_path / "b" / "both.yaml").read_text()


def test_never_overwrites_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    source = tmp_path / "test:simple.yaml"
    shutil.copy(ORIGINALS / "test:simple.yaml", source)
    assert main(["import", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert source.read_bytes() == (ORIGINALS / "test:simple.yaml").read_bytes()


def test_a_file_that_is_not_text_is_said_and_the_others_go_on(tmp_path: Path):
    """Found by a bad-input probe: a binary or non-UTF-8 file ended the command with a traceback."""
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\x00\xba\xff name: x\n")
    done = run(str(binary), str(ORIGINALS / "test:simple.yaml"), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{binary}: not translated: the file is not UTF-8 text" in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["test:simple.yaml"]


def test_out_naming_a_file_is_a_usage_error(tmp_path: Path):
    taken = tmp_path / "taken.yaml"
    taken.write_text("keep me\n")
    done = run(str(ORIGINALS / "test:simple.yaml"), "--out", str(taken))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"--out {taken} is a file, not a folder" in done.stderr
    assert taken.read_text() == "keep me\n"
