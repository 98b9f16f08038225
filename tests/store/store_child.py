"""A second process for the store tests (run as a script: `python store_child.py MODE WHERE ...`).

WHERE is a SQLite path or a postgresql:// URL, as --store takes it.

Modes:
  conflict PATH ID      load ID, print "loaded", wait for a line on stdin, save with the
                        loaded version; print "conflict <expected> <found>" or "saved <v>".
  increment PATH ID N   print "ready", wait for a line on stdin, then N read-modify-write
                        increments of state.counter, retrying on ConflictError;
                        prints "done <retries>".
  crash PATH ID         save forever, one event per save; prints each committed version
                        (after save returned) so the parent knows what must survive.
"""

from __future__ import annotations

import sys
import time

from aromcp_workflows.store import ConflictError, HistoryEvent, open_store


def main(argv: list[str]) -> int:
    mode, path, workflow_id = argv[0], argv[1], argv[2]
    store = open_store(path)
    if mode == "conflict":
        record = store.load(workflow_id)
        print("loaded", flush=True)
        sys.stdin.readline()
        record.state["writer"] = "child"
        try:
            print("saved", store.save(record, record.version), flush=True)
        except ConflictError as exc:
            print("conflict", exc.expected_version, exc.found_version, flush=True)
        return 0
    if mode == "increment":
        store.load(workflow_id)  # connection open and modules imported before the start line
        print("ready", flush=True)
        sys.stdin.readline()
        retries = 0
        for _ in range(int(argv[3])):
            while True:
                record = store.load(workflow_id)
                record.state["counter"] = record.state.get("counter", 0) + 1
                time.sleep(0.001)  # think time between read and write, as a real service has
                try:
                    store.save(record, record.version, [HistoryEvent("state_changed")])
                    break
                except ConflictError:
                    retries += 1
        print("done", retries, flush=True)
        return 0
    if mode == "crash":
        record = store.load(workflow_id)
        i = 0
        while True:
            i += 1
            record.state["i"] = i
            version = store.save(
                record, record.version, [HistoryEvent("state_changed", data={"i": i})]
            )
            print(version, flush=True)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
