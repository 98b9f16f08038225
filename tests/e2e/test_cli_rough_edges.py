"""What a new user hit on day one, each fixed and pinned: text inputs, the exit status of
`run`, error text without SDK wrappers, output piped into `head`, a stale `.venv`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import ROOT, git_repo


def test_a_string_input_takes_the_text_as_given(tmp_path: Path, cli) -> None:
    """`command=true` is the shell command `true`, not the JSON boolean."""
    repo = git_repo(tmp_path / "repo")
    proc = cli(repo, "run", "ci:retry-tests", "--input", "command=true", "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "Tests passed after 1 attempt(s)."


def test_typed_inputs_are_converted_from_text_by_the_server(tmp_path: Path, cli) -> None:
    """`42` stays text for a string input (the shell runs `42`: not found, 127) while
    `max_attempts=2` becomes the integer 2; the run fails, and so does its exit status."""
    repo = git_repo(tmp_path / "repo")
    proc = cli(repo, "run", "ci:retry-tests", "--input", "command=42", "--input", "max_attempts=2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Attempt 2 failed with exit code 127." in proc.stdout
    assert '  inputs = {"command": "42", "max_attempts": 2}' in proc.stdout


def test_exit_status_follows_the_final_outcome(tmp_path: Path, cli) -> None:
    """ci:retry-tests whose tests still fail ends `failed`, and `run` exits 1."""
    repo = git_repo(tmp_path / "repo")
    proc = cli(repo, "run", "ci:retry-tests", "--input", "command=echo broken >&2; exit 3",
               "--input", "max_attempts=2", "--quiet")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "Attempt 1 failed with exit code 3.", "Attempt 2 failed with exit code 3.",
        "Tests still failing after 2 attempt(s).", proc.stdout.splitlines()[3],
        "error: Tests still failing after 2 attempt(s)."]
    assert proc.stdout.splitlines()[3].startswith("status: failed (wf_")
    usage = cli(repo, "run", "--help")
    assert "exit status: 0 the workflow completed; 1 it failed" in " ".join(usage.stdout.split())


def test_tool_errors_carry_no_sdk_prefix(tmp_path: Path, cli) -> None:
    repo = git_repo(tmp_path / "repo")
    proc = cli(repo, "run", "ci:retry-tests", "--input", "max_attempts=many", "--quiet")
    assert proc.returncode == 2
    assert "Error executing tool" not in proc.stdout + proc.stderr
    assert "error: invalid inputs for ci:retry-tests: input 'max_attempts' must be an integer, got " \
           '"many"' in proc.stdout


@pytest.mark.parametrize("args", [["list"], ["explain", "standards:fix"], ["schema"], ["--help"]])
def test_output_into_a_closed_pipe_is_no_error(tmp_path: Path, args: list[str]) -> None:
    """`aromcp-workflows list | head -1`: the reader is gone before the command writes;
    no traceback, no 'Exception ignored', exit 0."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already exited, as `head -1` may
    env = {**os.environ, "HOME": str(tmp_path), "AROMCP_WORKFLOWS_STORE": str(tmp_path / "s.sqlite")}
    proc = subprocess.run([sys.executable, "-m", "aromcp_workflows", "--project-dir", str(tmp_path), *args],
                          stdout=write_end, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    os.close(write_end)
    assert proc.stderr == "" and proc.returncode == 0, proc.stderr


def test_shell_pipe_into_head(tmp_path: Path) -> None:
    """The same through a real shell pipeline, as users type it."""
    env = {**os.environ, "HOME": str(tmp_path)}
    proc = subprocess.run(f"'{sys.executable}' -m aromcp_workflows schema | head -1; "
                          f"'{sys.executable}' -m aromcp_workflows list | head -1",
                          shell=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines()[0] == "{"


# -- the Makefile's .venv -------------------------------------------------------------

def make_dry_run(tmp_path: Path, python: str = "python3") -> subprocess.CompletedProcess[str]:
    # a fresh make, not a sub-make of `make test`: no inherited MAKELEVEL/MAKEFLAGS, no directory lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    return subprocess.run(["make", "--no-print-directory", "-n", "setup", f"PYTHON={python}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def make_project(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def fake_venv(project: Path, python: str) -> None:
    """A .venv whose `python` is `python` (a script or a real interpreter), installed earlier."""
    bindir = project / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").write_text(python)
    (bindir / "python").chmod(0o755)
    stamp = project / ".venv" / ".installed"
    stamp.write_text("")
    os.utime(stamp, (os.stat(project / "pyproject.toml").st_mtime + 10,) * 2)


def test_make_recreates_a_venv_made_by_another_python(make_project: Path) -> None:
    fake_venv(make_project, "#!/bin/sh\necho 3.8\n")  # what an old python3.8 venv answers
    proc = make_dry_run(make_project, sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert "rm -rf .venv" in proc.stdout and f"{sys.executable} -m venv .venv" in proc.stdout


def test_make_recreates_a_venv_whose_python_is_gone(make_project: Path) -> None:
    fake_venv(make_project, "#!/bin/sh\nexit 127\n")
    proc = make_dry_run(make_project, sys.executable)
    assert "rm -rf .venv" in proc.stdout and "-m venv .venv" in proc.stdout


def test_make_keeps_a_good_venv(make_project: Path) -> None:
    fake_venv(make_project, f"#!/bin/sh\nexec '{sys.executable}' \"$@\"\n")
    proc = make_dry_run(make_project, sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert "venv" not in proc.stdout, proc.stdout


def test_make_refuses_a_python_older_than_3_11(make_project: Path) -> None:
    old = make_project / "python3.9"
    old.write_text("#!/bin/sh\nif [ \"$1\" = -c ]; then case \"$2\" in *exit*) exit 1;; *) echo 3.9;; esac; fi\n")
    old.chmod(0o755)
    proc = subprocess.run(["make", "setup", f"PYTHON={old}"], cwd=make_project, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "needs Python 3.11 or newer" in proc.stderr and "make PYTHON=python3.11" in proc.stderr
    assert not (make_project / ".venv").exists()
