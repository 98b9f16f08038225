"""`aromcp-workflows test`: fifty cases, start to finish, in one CLI run (target ≤ 5 s on 2 cores).

Run: ``.venv/bin/python benchmarks/bench_testing.py [--cases 50] [--rounds 3]``

The cases are the shipped workflows' own (``workflows/*.test.yaml``: stubbed commands,
agent answers, parallel sub-agent tasks, an included workflow, and a few cases that run
``find``, ``grep`` and ``test`` for real), repeated under new names until there are
``--cases`` of them, in a copy of ``workflows/``.  Each round times one
``aromcp-workflows test DIR`` process from spawn to exit (Python start, V8 start, every
case, the summary), once without and once with ``--coverage``.  The reference row, in the
same rounds, is the same process doing nothing but ``--version`` (interpreter and CLI
start).  Printed: the median and the slowest round of each, and the cases per second.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import cycle, islice
from pathlib import Path

from ruamel.yaml import YAML

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from machine_info import machine  # noqa: E402

CLI = [sys.executable, "-m", "aromcp_workflows"]


def build(folder: Path, wanted: int) -> int:
    """A copy of workflows/ whose test files hold `wanted` cases in all (the shipped ones, repeated)."""
    shutil.copytree(REPO / "workflows", folder)
    yaml = YAML(typ="rt")
    files = sorted(folder.glob("*.test.yaml"))
    documents = {path: yaml.load(path.read_text(encoding="utf-8")) for path in files}
    shipped = [(path, case) for path, doc in documents.items() for case in doc["cases"]]
    for doc in documents.values():
        doc["cases"] = []
    for number, (path, case) in enumerate(islice(cycle(shipped), wanted)):
        copy = dict(case)
        copy["name"] = f"{case['name']} #{number}"
        documents[path]["cases"].append(copy)
    for path, doc in documents.items():
        with path.open("w", encoding="utf-8") as out:
            yaml.dump(doc, out)
    return sum(len(doc["cases"]) for doc in documents.values())


def timed(args: list[str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "workflows"
        count = build(folder, options.cases)
        rows: dict[str, list[float]] = {"--version (reference)": [], "test": [], "test --coverage": []}
        for _ in range(options.rounds):
            rows["--version (reference)"].append(timed([*CLI, "--version"], Path(tmp)))
            rows["test"].append(timed([*CLI, "test", str(folder)], Path(tmp)))
            rows["test --coverage"].append(timed([*CLI, "test", str(folder), "--coverage"], Path(tmp)))
    print(f"{count} cases, {options.rounds} rounds; one CLI process per round")
    for name, seconds in rows.items():
        median = statistics.median(seconds)
        rate = "" if name.startswith("--version") else f"   {count / median:6.1f} cases/s"
        print(f"  {name:<24} median {median:6.2f} s   slowest {max(seconds):6.2f} s{rate}")


if __name__ == "__main__":
    main()
