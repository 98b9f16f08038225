"""The definition commands of the CLI, run as a user runs them: in a subprocess.

HOME points at a temporary folder so `~/.aromcp/workflows` is under the test's control,
and the project is either the working directory, `--project-dir` or `AROMCP_PROJECT_DIR`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "aromcp_workflows"]
SHIPPED = ["ci:retry-tests", "deps:analyze", "standards:check", "standards:fix"]
MALFORMED = REPO / "tests" / "definition" / "malformed"


class Env:
    """A fake home and project, and a way to run the CLI inside them."""

    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        self.project = tmp_path / "project"
        self.elsewhere = tmp_path / "elsewhere"
        for folder in (self.home, self.project, self.elsewhere):
            (folder / ".aromcp" / "workflows").mkdir(parents=True)

    def put(self, root: Path, name: str, text: str) -> Path:
        path = root / ".aromcp" / "workflows" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in os.environ.items() if k != "AROMCP_PROJECT_DIR"}
        environ.update(HOME=str(self.home), PYTHONPATH=str(REPO), **(env or {}))
        return subprocess.run([*CLI, *args], check=False, cwd=cwd or self.project, env=environ,
                              capture_output=True, text=True, timeout=60)


def flow(name: str, description: str = "demo") -> str:
    return f'name: "{name}"\ndescription: "{description}"\nsteps:\n  - type: exit\n'


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_list_shows_builtins_and_shadowing(env: Env) -> None:
    env.put(env.home, "standards:fix", flow("standards:fix", "my global copy"))
    env.put(env.project, "my:flow", flow("my:flow", "project flow"))
    result = env.run("list")
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert rows == [["ci:retry-tests", "builtin"], ["deps:analyze", "builtin"],
                    ["my:flow", "project"], ["standards:check", "builtin"],
                    ["standards:fix", "global"]]
    assert "my global copy" in result.stdout


def test_list_json_and_no_global(env: Env) -> None:
    env.put(env.home, "gl:only", flow("gl:only"))
    data = json.loads(env.run("list", "--json").stdout)["workflows"]
    assert [w["name"] for w in data] == sorted([*SHIPPED, "gl:only"])
    entry = next(w for w in data if w["name"] == "gl:only")
    assert entry == {"name": "gl:only", "source": "global", "description": "demo", "version": "1.0.0",
                     "path": str(env.home / ".aromcp" / "workflows" / "gl:only.yaml")}
    local = json.loads(env.run("list", "--json", "--no-global").stdout)["workflows"]
    assert [w["name"] for w in local] == SHIPPED


def test_list_marks_an_invalid_workflow_instead_of_failing(env: Env) -> None:
    env.put(env.project, "bad:one", "name: bad:one\nsteps: [\n")
    result = env.run("list")
    assert result.returncode == 0
    line = next(row for row in result.stdout.splitlines() if row.startswith("bad:one"))
    assert "(invalid: " in line and ":3:1: invalid YAML" in line


def test_project_dir_option_and_environment_variable(env: Env) -> None:
    env.put(env.elsewhere, "far:away", flow("far:away"))
    assert "far:away" not in env.run("list").stdout
    assert "far:away" in env.run("--project-dir", str(env.elsewhere), "list").stdout
    by_env = env.run("list", env={"AROMCP_PROJECT_DIR": str(env.elsewhere)})
    assert "far:away" in by_env.stdout


def test_info_text_and_json(env: Env) -> None:
    result = env.run("info", "standards:fix")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == (
        f"standards:fix 1.0.0  (builtin: {REPO / 'workflows' / 'standards:fix.yaml'})")
    assert "  --input batch_size=<integer>  (default 3) — Files per sub-agent batch" in result.stdout
    data = json.loads(env.run("info", "ci:retry-tests", "--json").stdout)
    assert data["name"] == "ci:retry-tests" and data["source"] == "builtin"
    assert data["inputs"]["max_attempts"] == {"type": "integer", "required": False, "default": 3,
                                              "description": "How many runs at most"}


def test_info_on_a_missing_workflow_says_where_it_looked(env: Env) -> None:
    result = env.run("info", "standards:fx")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: workflow 'standards:fx' not found; looked in:",
        f"  - {env.project / '.aromcp' / 'workflows' / 'standards:fx.yaml'}",
        f"  - {env.home / '.aromcp' / 'workflows' / 'standards:fx.yaml'}",
        f"  - {REPO / 'workflows' / 'standards:fx.yaml'}",
        ("available workflows (closest first): standards:fix, standards:check, deps:analyze, "
        "ci:retry-tests"),
    ]


@pytest.mark.parametrize("name", ["../etc/passwd", "/etc/passwd", "..", "a\\b", "C:x"])
def test_traversal_names_are_refused(env: Env, name: str) -> None:
    result = env.run("info", name)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: invalid workflow name {name!r}: ")


def test_validate_valid_names_and_all(env: Env) -> None:
    result = env.run("validate", "standards:fix", "deps:analyze")
    assert (result.returncode, result.stdout) == (0, "standards:fix: valid\ndeps:analyze: valid\n")
    everything = env.run("validate", "--all")
    assert everything.returncode == 0
    assert everything.stdout.splitlines() == [f"{name}: valid" for name in SHIPPED]


def test_validate_invalid_file_prints_positions_and_exits_1(env: Env) -> None:
    case = MALFORMED / "17-max-parallel-out-of-range.yaml"
    result = env.run("validate", str(case))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{case}:8:5: 'max_parallel' in parallel_foreach step must be between 1 and 100, not 0",
        f"{case}:12:5: 'max_parallel' in parallel_foreach step must be between 1 and 100, not 1000",
        f"{case}: INVALID (2 errors)",
    ]


def test_validate_mixed_targets_and_warnings(env: Env) -> None:
    warn = MALFORMED / "39-unused-task-warning.yaml"
    result = env.run("validate", "standards:fix", str(warn), "nope:x")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "standards:fix: valid"
    assert lines[1] == (f"{warn}:7:3: warning: sub-agent task 'forgotten' is never used by a "
                        "parallel_foreach")
    assert lines[2] == f"{warn}: valid, 1 warning"
    assert lines[3] == "workflow 'nope:x' not found; looked in:"
    assert lines[-1] == "nope:x: INVALID (1 error)"


def test_validate_json(env: Env) -> None:
    case = MALFORMED / "08-unknown-step-type.yaml"
    result = env.run("validate", "--json", str(case), "ci:retry-tests")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["valid"] is False
    bad, good = data["results"]
    assert bad == {"target": str(case), "valid": False, "warnings": [], "errors": [{
        "message": "unknown step type 'shel_command' (did you mean 'shell_command'?)",
        "file": str(case), "line": 6, "column": 5, "severity": "error"}]}
    assert good == {"target": "ci:retry-tests", "valid": True, "errors": [], "warnings": []}


def test_validate_a_relative_file_path(env: Env) -> None:
    (env.project / "local.yaml").write_text(flow("local"), encoding="utf-8")
    result = env.run("validate", "local.yaml")
    assert (result.returncode, result.stdout) == (0, "local.yaml: valid\n")


@pytest.mark.parametrize("args", [["validate"], ["bogus"], ["info"], ["list", "--nope"], []])
def test_usage_errors_exit_2(env: Env, args: list[str]) -> None:
    result = env.run(*args)
    assert result.returncode == 2
    assert "usage: aromcp-workflows" in (result.stderr + result.stdout) or \
        result.stderr == "validate: name at least one workflow or file, or pass --all\n"


def test_schema_command_prints_the_committed_schema(env: Env, tmp_path: Path) -> None:
    result = env.run("schema")
    assert result.returncode == 0
    committed = (REPO / "docs" / "workflow.schema.json").read_text(encoding="utf-8")
    assert result.stdout == committed
    target = tmp_path / "out.json"
    assert env.run("schema", "-o", str(target)).returncode == 0
    assert target.read_text(encoding="utf-8") == committed


@pytest.mark.parametrize("command", ["list", "info", "validate", "schema"])
def test_each_command_has_help(env: Env, command: str) -> None:
    result = env.run(command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: aromcp-workflows {command}")


def test_top_level_help_and_version(env: Env) -> None:
    result = env.run("--help")
    assert result.returncode == 0
    for command in ("list", "info", "validate", "schema"):
        assert command in result.stdout
    assert env.run("--version").stdout.startswith("aromcp-workflows ")


def test_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("aromcp-workflows")
    if not script.exists():
        pytest.skip("console script not installed in this environment")
    result = subprocess.run([str(script), "schema"], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and json.loads(result.stdout)["title"] == "aromcp-workflows workflow"


def test_validate_a_folder_checks_every_file_in_it(env: Env, tmp_path: Path) -> None:
    folder = tmp_path / "flows"
    folder.mkdir()
    (folder / "b.yaml").write_text(flow("b"), encoding="utf-8")
    (folder / "a.yaml").write_text("name: a\nsteps: {}\n", encoding="utf-8")
    result = env.run("validate", str(folder))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{folder / 'a.yaml'}:2:1: 'steps' must be a list, not a mapping",
        f"{folder / 'a.yaml'}: INVALID (1 error)",
        f"{folder / 'b.yaml'}: valid",
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    nothing = env.run("validate", str(empty))
    assert (nothing.returncode, nothing.stderr) == (1, f"validate: no .yaml files in {empty}\n")


def test_problems_under_the_current_directory_are_shown_relative(env: Env) -> None:
    env.put(env.project, "rel:flow", 'name: "rel:flow"\nsteps:\n  - type: shel_command\n')
    result = env.run("validate", "rel:flow")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        (".aromcp/workflows/rel:flow.yaml:3:5: unknown step type 'shel_command' "
        "(did you mean 'shell_command'?)"),
        "rel:flow: INVALID (1 error)",
    ]
    data = json.loads(env.run("validate", "--json", "rel:flow").stdout)  # JSON keeps full paths
    assert data["results"][0]["errors"][0]["file"] == str(
        env.project / ".aromcp" / "workflows" / "rel:flow.yaml")
