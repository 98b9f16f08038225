"""`aromcp-workflows import` reads files with the loader's YAML bounds, and `--out` never
writes through a planted symbolic link (security issue "Trust, second round", item 6).

The importer parsed whatever it was given: a 485-byte alias bomb ("billion laughs") ran on
for minutes, YAML nested 3,000 deep ended in a RecursionError traceback, and a 3.5 MB file
took 44 s and 345 MB before it was refused as "does not validate … please report it".  Now
size is checked before the file is read, and nesting and alias expansion before anything is
built, with the loader's own messages (`definition/yaml_limits.py`).

`--out DIR` wrote `DIR/<name>.yaml` with a plain open: a symbolic link planted there (in a
shared folder, by another local user) made the import overwrite whatever it pointed at.

The command runs in process (`cli.entry`), as a user's shell would run it, output captured.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aromcp_workflows.cli.entry import main
from tests.importer.importer_helpers import ORIGINALS

LAUGHS = "".join(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 10))
STEPS = "steps:\n  - type: user_message\n    message: hi\n"
BAD = {
    "bomb": ("name: bomb\nl0: &l0 [lol]\n" + LAUGHS + STEPS, "the YAML expands to more than 200,000 values"),
    "deep": ("name: deep\nsteps: " + "[" * 3000 + "]" * 3000 + "\n", "the YAML nests deeper than 64 levels"),
    "huge": ("name: huge\n" + STEPS + "# padding\n" * 350_000, "more than the limit of 1,000,000"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_hostile_file_is_refused_at_once_with_the_loaders_message(name: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text, message = BAD[name]
    source = tmp_path / f"{name}.yaml"
    source.write_text(text, encoding="utf-8")
    started = time.monotonic()
    code = main(["import", str(source), "--out", str(tmp_path / "out")])
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == 1, (out, err)
    assert message in out, out
    assert out.startswith(f"{source}:"), out  # file:line: reason, like every refusal
    assert "Traceback" not in out + err and "please report" not in out
    assert not (tmp_path / "out" / f"{name}.yaml").exists()
    assert seconds < 30, f"{name}: {seconds:.1f} s"  # generous: a refused file is not parsed at all


def test_out_does_not_write_through_a_planted_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    out_dir = tmp_path / "shared"
    out_dir.mkdir()
    source = ORIGINALS / "test:simple.yaml"
    (out_dir / source.name).symlink_to(victim)
    code = main(["import", str(source), "--out", str(out_dir)])
    out, err = capsys.readouterr()
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert code == 1, (out, err)
    assert "symbolic link" in err and str(out_dir / source.name) in err, err
    assert (out_dir / source.name).is_symlink()  # left as it was, for its owner to look at


def test_out_writes_a_regular_file_and_replaces_an_old_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    source = ORIGINALS / "test:simple.yaml"
    (out_dir / source.name).write_text("old\n", encoding="utf-8")
    assert main(["import", str(source), "--out", str(out_dir)]) == 0, capsys.readouterr()
    written = out_dir / source.name
    assert not written.is_symlink() and written.read_text(encoding="utf-8").startswith("# Translated from AroMCP")
    assert sorted(p.name for p in out_dir.iterdir()) == [source.name]  # no temporary file left behind
