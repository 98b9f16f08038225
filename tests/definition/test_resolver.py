"""Name resolution: project shadows global shadows built-in; names never become paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from definition_helpers import BUILTIN_DIR, minimal, write

from aromcp_workflows.definition import (
    DefinitionError,
    WorkflowLoader,
    WorkflowNotFound,
    WorkflowResolver,
    check,
    check_name,
)
from aromcp_workflows.definition.resolver import is_workflow_file_name

SHIPPED = sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml") if is_workflow_file_name(p.name))


def resolver(project: Path, home: Path, builtin: Path | None = None) -> WorkflowResolver:
    return WorkflowResolver(project_dir=project, home=home, builtin_dir=builtin)


def put(root: Path, name: str, message: str) -> Path:
    return write(root / ".aromcp" / "workflows" / f"{name}.yaml", minimal(name, message))


def test_order_is_project_then_global_then_builtin(project: Path, home: Path, tmp_path: Path) -> None:
    builtin = tmp_path / "builtin"
    write(builtin / "demo:x.yaml", minimal("demo:x", "builtin"))
    found = resolver(project, home, builtin)
    assert found.find("demo:x").source == "builtin"
    put(home, "demo:x", "global")
    assert found.find("demo:x").source == "global"
    put(project, "demo:x", "project")
    location = found.find("demo:x")
    assert (location.source, location.path) == (
        "project", project / ".aromcp" / "workflows" / "demo:x.yaml")
    loaded = WorkflowLoader(found).load("demo:x")
    assert loaded.definition.steps[0].message == "project"  # type: ignore[union-attr]


def test_listing_shows_each_name_once_with_the_winning_source(project: Path, home: Path,
                                                              tmp_path: Path) -> None:
    builtin = tmp_path / "builtin"
    write(builtin / "a:one.yaml", minimal("a:one"))
    write(builtin / "shared" / "helper.yaml", minimal("shared:helper"))  # not a top-level name
    write(builtin / "notes.txt", "not a workflow")
    put(home, "a:one", "global")
    put(home, "b:two", "global")
    put(project, "b:two", "project")
    put(project, "c:three", "project")
    listing = resolver(project, home, builtin).list()
    assert [(w.name, w.source) for w in listing] == [
        ("a:one", "global"), ("b:two", "project"), ("c:three", "project")]
    without_global = resolver(project, home, builtin).list(include_global=False)
    assert [(w.name, w.source) for w in without_global] == [
        ("a:one", "builtin"), ("b:two", "project"), ("c:three", "project")]


def test_builtins_are_listed_from_a_bare_project(project: Path, home: Path) -> None:
    assert [w.name for w in resolver(project, home).list()] == SHIPPED
    assert {w.source for w in resolver(project, home).list()} == {"builtin"}


def test_project_dir_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, project: Path,
                                                home: Path) -> None:
    put(project, "env:flow", "from env")
    monkeypatch.setenv("AROMCP_PROJECT_DIR", str(project))
    found = WorkflowResolver(home=home)
    assert found.project_dir == project.resolve()
    assert found.find("env:flow").source == "project"
    monkeypatch.chdir(home)  # an explicit directory still beats the environment
    assert WorkflowResolver(project_dir=home, home=home).project_dir == home.resolve()


def test_missing_workflow_lists_where_it_looked_and_closest_names(project: Path, home: Path) -> None:
    put(project, "standards:lint", "p")
    with pytest.raises(WorkflowNotFound) as caught:
        resolver(project, home).find("standards:fx")
    message = str(caught.value)
    assert message.splitlines()[:4] == [
        "workflow 'standards:fx' not found; looked in:",
        f"  - {project / '.aromcp' / 'workflows' / 'standards:fx.yaml'}",
        f"  - {home / '.aromcp' / 'workflows' / 'standards:fx.yaml'}",
        f"  - {BUILTIN_DIR / 'standards:fx.yaml'}",
    ]
    closest = message.splitlines()[4]
    assert closest.startswith("available workflows (closest first): standards:fix, ")
    assert set(closest.split(": ", 1)[1].split(", ")) == {*SHIPPED, "standards:lint"}


def test_missing_workflow_with_nothing_available(project: Path, home: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkflowNotFound) as caught:
        resolver(project, home, tmp_path / "none").find("ab:cd")
    assert str(caught.value).endswith(
        "no workflows are available; create one in ./.aromcp/workflows/")


@pytest.mark.parametrize("name, reason", [
    ("../secrets", "it contains a path separator"),
    ("..", "it contains '..'"),
    ("a..b", "it contains '..'"),
    ("/etc/passwd", "it contains a path separator"),
    ("sub/flow", "it contains a path separator"),
    ("..\\..\\win", "it contains a path separator"),
    ("C:\\Windows\\x", "it contains a path separator"),
    ("C:flow", "it starts like a Windows drive ('C:'); use a namespace of two letters or more"),
    ("", "it is empty"),
    ("flow.yaml", "drop the file extension (or pass a path to the file)"),
    ("has space", "only letters, digits, '-', '_' and ':' are allowed, and not ':' first"),
])
def test_names_that_could_escape_are_refused_before_any_file_access(
        name: str, reason: str, project: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touched: list[Path] = []
    monkeypatch.setattr(Path, "is_file", lambda self: touched.append(self) or False)
    with pytest.raises(DefinitionError) as caught:
        resolver(project, home).find(name)
    assert str(caught.value) == (
        f"invalid workflow name {name!r}: {reason}; a name looks like 'standards:fix'")
    assert touched == []


def test_namespaced_names_are_fine() -> None:
    for name in ("standards:fix", "deps:update-all", "a_b", "ci:retry-tests", "v2", "ns:sub:leaf"):
        check_name(name)


def test_name_differing_from_file_name_is_a_warning(project: Path, loader: WorkflowLoader) -> None:
    write(project / ".aromcp" / "workflows" / "tools:fmt.yaml", minimal("tools:format"))
    report = check("tools:fmt", loader)
    assert report.valid
    assert [str(w) for w in report.warnings] == [
        (f"{project / '.aromcp' / 'workflows' / 'tools:fmt.yaml'}:1:1: warning: workflow name "
        "'tools:format' differs from its file name 'tools:fmt'; it is found by the file name")]


def test_load_by_path_and_by_name_agree(project: Path, loader: WorkflowLoader) -> None:
    path = put(project, "same:flow", "x")
    by_name, by_path = loader.load("same:flow"), loader.load(str(path))
    assert by_name.definition == by_path.definition
    assert (by_name.source, by_path.source) == ("project", "project")  # cached by file


def test_a_path_into_a_workflow_directory_is_treated_as_found_there(project: Path,
                                                                    loader: WorkflowLoader) -> None:
    path = write(project / ".aromcp" / "workflows" / "tools:fmt.yaml", minimal("tools:format"))
    report = check(str(path), loader)
    assert report.bundle is not None and report.bundle.main.source == "project"
    assert [w.message for w in report.warnings] == [
        ("workflow name 'tools:format' differs from its file name 'tools:fmt'; it is found by "
        "the file name")]


def test_a_workflow_symlink_pointed_elsewhere_is_read_from_its_new_target(project: Path, tmp_path: Path,
                                                                         loader: WorkflowLoader) -> None:
    """The loader remembers where a listed path resolves to (resolving costs an lstat per
    component, on every `workflow_list`), but only while the path still names the same file."""
    first = write(tmp_path / "shared" / "one.yaml", minimal("demo:linked", "first"))
    second = write(tmp_path / "shared" / "two.yaml", minimal("demo:linked", "second"))
    link = project / ".aromcp" / "workflows" / "demo:linked.yaml"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(first)
    assert loader.load_one_file(link).file == str(first)
    link.unlink()
    link.symlink_to(second)
    reread = loader.load_one_file(link)
    assert reread.file == str(second)
    assert "second" in str(reread.definition.steps[0].model_dump())


def test_listing_skips_what_is_not_a_yaml_file(project: Path, home: Path) -> None:
    put(project, "demo:real", "x")
    workflows = project / ".aromcp" / "workflows"
    (workflows / "demo:dir.yaml").mkdir()
    (workflows / "notes.txt").write_text("not a workflow")
    (workflows / "bad name!.yaml").write_text("")
    names = [w.name for w in resolver(project, home).list(include_global=False)]
    assert "demo:real" in names and "demo:dir" not in names and "notes" not in names
    assert not any("!" in n for n in names)
