"""A command's output as a page reads it, slice by slice: offsets in bytes of what the
command wrote whether it still runs or has ended, and whole characters in every slice.

Found by a person-at-the-page probe: once a command ended, the page's last read came from
the history counted in characters (so the page dropped what it had and kept 16 KiB); a cut
output was shown from the middle of its kept start, labelled as its end; and "€" split
between two slices showed as U+FFFD.  Real commands through a real service and store; the
run-directory reads on real files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aromcp_workflows.app import WorkflowService
from aromcp_workflows.shell import RunDir, live

EURO = "€" * 7000  # 21,000 bytes: every 16 KiB boundary falls inside a character

WORKFLOW = """name: printer
steps:
  - id: sh
    type: shell_command
    command: "{command}"
    on_error: continue
  - {{id: done, type: agent_prompt, prompt: "done"}}
"""


def service_after(tmp_path: Path, command: str) -> tuple[WorkflowService, str]:
    """A service whose `printer` instance ran `command` to its end."""
    folder = tmp_path / "project" / ".aromcp" / "workflows"
    folder.mkdir(parents=True)
    (folder / "printer.yaml").write_text(WORKFLOW.format(command=command))
    service = WorkflowService(project_dir=tmp_path / "project", store_path=tmp_path / "s.sqlite3",
                              home=tmp_path / "home")
    wid = service.start("printer").workflow_id
    assert service.next_step(wid).step["id"] == "done"
    return service, wid


def read_all(read: object, first: object) -> str:
    """Slices appended as the page appends them, from `first` on until one comes back empty."""
    text, part = "", first
    for _ in range(100):  # a reader that never comes to the end is a failure, not a hang
        if not part.text:  # type: ignore[attr-defined]
            return text
        text += part.text  # type: ignore[attr-defined]
        part = read(part.end)  # type: ignore[attr-defined,operator]
    raise AssertionError(f"still reading after 100 slices ({len(text)} characters)")


def test_live_slices_hold_whole_characters(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    run_dir.file("out").write_bytes(EURO.encode())
    first = live.read_slice(run_dir, "out", 0)
    assert first.end % 3 == 0 and "\ufffd" not in first.text
    assert read_all(lambda at: live.read_slice(run_dir, "out", at), first) == EURO
    tail = live.read_slice(run_dir, "out", None)  # the last 16 KiB, starting on a character
    assert tail.start % 3 == 0 and tail.cut and "\ufffd" not in tail.text and EURO.endswith(tail.text)


def test_after_the_end_a_reader_that_followed_gets_just_the_rest(tmp_path: Path) -> None:
    """The page's last read comes from the history: it must go on from its own offset."""
    service, wid = service_after(tmp_path, "for i in $(seq 1 600); do printf 'line-%04d %0080d\\\\n' $i 0; done")
    whole = "".join(f"line-{i:04d} {0:080d}\n" for i in range(1, 601))  # 54,600 bytes: kept whole
    first = service.command_output(wid, stdout_since=0)
    assert first.source == "history" and first.stdout.start == 0 and not first.stdout.cut
    assert read_all(lambda at: service.command_output(wid, stdout_since=at).stdout, first.stdout) == whole
    rest = service.command_output(wid, stdout_since=40_000).stdout
    assert (rest.start, rest.end) == (40_000, 40_000 + 14_600) and rest.text == whole[40_000:]
    tail = service.command_output(wid).stdout  # a new reader: the end, as a live read gives it
    assert tail.end == len(whole) and tail.cut and whole.endswith(tail.text)


def test_after_the_end_characters_stay_whole_too(tmp_path: Path) -> None:
    service, wid = service_after(tmp_path, f"printf '{EURO}'")
    first = service.command_output(wid, stdout_since=0)
    assert read_all(lambda at: service.command_output(wid, stdout_since=at).stdout, first.stdout) == EURO


def test_a_cut_output_is_shown_from_its_start_and_a_follower_keeps_what_it_has(tmp_path: Path) -> None:
    """Over the runner's cap the start is what is kept: a new reader gets it, marked cut; a
    page that followed the end live is not sent back to the start."""
    service, wid = service_after(tmp_path, "seq -f 'n%07g' 0 119999; echo FINAL")
    fresh = service.command_output(wid).stdout
    assert fresh.cut and fresh.start == 0 and fresh.text.startswith("n0000000\nn0000001\n")
    assert "\ufffd" not in fresh.text
    follower = service.command_output(wid, stdout_since=1_000_000).stdout
    assert (follower.text, follower.start, follower.end, follower.cut) == ("", 1_000_000, 1_000_000, True)


@pytest.mark.parametrize("inside", [False, True])
def test_whole_characters_never_splits_one(inside: bool) -> None:
    data = ("a€" * 50).encode()
    boundaries = [i for i in range(12) if data[i] & 0xC0 != 0x80]  # where a read that ended may start again
    for start in range(12) if inside else boundaries:
        for end in range(start, len(data) + 1):
            part, skipped = live.whole_characters(data[start:end], inside=inside)
            text = part.decode("utf-8")  # raises on a split character
            assert not text or data[start + skipped:].decode("utf-8").startswith(text)
            assert end - start - skipped - len(part) < 3  # at most one character held back


def test_right_after_a_cut_a_live_reader_still_sees_the_latest_output(tmp_path: Path) -> None:
    """A command printing faster than a page looks: its file is cut back to the cap every
    20 ms and may be empty at each look, so the page showed nothing while it printed."""
    from aromcp_workflows.shell.rundir import OUTPUT_CAP

    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    written = "".join(f"n{i:07d}\n" for i in range(80_000)).encode()  # 720,000 bytes: past twice the cap
    assert len(written) > 2 * OUTPUT_CAP
    run_dir.file("out").write_bytes(written)
    assert run_dir.trim({}) and run_dir.file("out").stat().st_size == 0
    latest = live.read_slice(run_dir, "out", None)
    assert latest.end == len(written) and latest.text.endswith("n0079999\n") and latest.cut
    assert latest.text == written[latest.start:].decode()
    with open(run_dir.file("out"), "ab") as more:
        more.write(b"after the cut\n")
    across = live.read_slice(run_dir, "out", None)  # the tail kept and the file's new bytes, as one slice
    assert across.text.endswith("n0079999\nafter the cut\n") and across.end == len(written) + 14
    follower = live.read_slice(run_dir, "out", latest.end)
    assert (follower.text, follower.start, follower.cut) == ("after the cut\n", len(written), False)
    behind = live.read_slice(run_dir, "out", 1000)  # far behind the cut: from what is kept, marked cut
    assert behind.cut and behind.start == len(written) - live.SLICE_BYTES
    assert behind.text == written[behind.start:].decode()
