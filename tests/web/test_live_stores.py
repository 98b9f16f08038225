"""Live across processes and hosts: an open instance page's event stream reports a change
made by another process — a server on the same SQLite file, or a replica on another host
through PostgreSQL — within 2 s.  The web view runs as its own `aromcp-workflows ui`
process; the change is made by this test process through its own service.  Slow tier (a
subprocess, and a PostgreSQL cluster)."""

from __future__ import annotations

import http.client
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from web_helpers import Project, Site, fan_out_midway, finish_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from pg_cluster import PgCluster, find_bin_dir, unavailable  # tests/store/pg_cluster.py

pytestmark = pytest.mark.slow
LIVE_S = 2.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[PgCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        unavailable("PostgreSQL is not installed (no pg_ctl; apt-get install -y postgresql)")
    running = PgCluster(bin_dir).start()  # type: ignore[arg-type]
    yield running
    running.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    url = request.getfixturevalue("cluster").create_database() if request.param == "postgres" else None
    project = Project.make(tmp_path, url)
    monkeypatch.setenv("HOME", str(project.home))
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", project.store)
    yield project


def test_the_event_stream_reports_another_process_change(shared: Project) -> None:
    service = shared.service()
    wid, tasks = fan_out_midway(service)
    site = Site.start(shared)
    versions: list[tuple[float, int]] = []
    try:
        with open_stream(f"{site.base}/api/instances/{wid}/events", site.session_headers()) as stream:
            reader = threading.Thread(target=_read_versions, args=(stream, versions), daemon=True)
            reader.start()
            _wait_for(lambda: bool(versions), 5.0)
            first = versions[0][1]
            assert first == service.instance_version(wid)
            changed_at = time.monotonic()
            finish_task(service, wid, tasks[1])  # this process: another server, or a replica on another host
            _wait_for(lambda: any(v > first for _, v in versions), LIVE_S)
            seen = next(at for at, v in versions if v > first) - changed_at
            assert seen < LIVE_S, f"the change showed after {seen:.2f} s"
        reader.join(10)
    finally:
        site.stop()


@contextmanager
def open_stream(url: str, headers: dict[str, str]) -> Iterator[http.client.HTTPResponse]:
    """The event stream, ended on leaving by shutting its socket down: the reader thread
    blocked in a read then sees the end at once, and so does the server, which ends the
    stream (closing the response instead waited for the stream's next line, and the server
    for the stream to end before it stopped: 30 s a test)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    conn.request("GET", parts.path, headers=headers)
    sock = conn.sock
    assert sock is not None
    try:
        yield conn.getresponse()
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        conn.close()


def _read_versions(stream: http.client.HTTPResponse, versions: list[tuple[float, int]]) -> None:
    event = ""
    try:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "version":
                versions.append((time.monotonic(), int(line.split(":", 1)[1])))
    except Exception:  # the stream closed at the end of the test
        return


def _wait_for(condition: object, seconds: float) -> None:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds} s")
