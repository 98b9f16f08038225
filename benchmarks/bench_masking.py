"""What masking secrets costs: a reply over a 10,000-item state, and a log line with many known secrets.

Run: ``.venv/bin/python benchmarks/bench_masking.py [--items N] [--known N] [--json]``

Rows (medians of repeated calls, in one process, no server):

- ``find secrets (append)``: `SecretIndex.secrets` on a state whose 10,000-item list grew by
  one item since the last call (what `Machine.masker()` does after a step that appends);
- ``build masker``: finding the secrets of an unchanged state and building the `Masker`
  (once per saved version, see `WorkflowService.masker`);
- ``mask reply (N items)``: `Masker.mask` of a `workflow_state_read`-like reply holding the
  10,000 strings (file paths, messages), with three secrets in the state;
- ``mask text (short)``: one 60-character string;
- ``redact log line, K known``: `safety.redaction.redact` of a 4,000-character log line after the
  process has seen K secrets of other instances (the process-wide list used for logs).

Absolute times drift on shared machines; compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from machine_info import machine  # noqa: E402

from aromcp_workflows.safety import redact as guard  # noqa: E402
from aromcp_workflows.safety.masking import Masker, SecretIndex  # noqa: E402

LOG_LINE = ('2026-11-25 12:00:00,123 mcp.server.lowlevel DEBUG Response sent {"jsonrpc": "2.0", "id": 42, '
            '"result": {"content": [{"type": "text", "text": "src/components/button_42.tsx: 3 issues"}]}} ' * 40)[:4000]


def timed(action: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of `repeat` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def state(items: int) -> dict[str, Any]:
    return {"files": [f"src/module_{n % 97}/component_{n}.tsx" for n in range(items)],
            "notes": [f"reviewed file {n}: 2 warnings, max_tokens 4096, year 2026" for n in range(items // 10)],
            "api_token": "sk-test-00000000000000000000aa", "db": {"password": "hunter2-long-pw"},
            "max_tokens": 4096, "token_count": 1234, "use_token_cache": True}


def fill_known(count: int) -> None:
    """The process has seen `count` secrets of other instances (the list the log masking uses)."""
    secrets = [f"other-instance-secret-{n:06d}-x" for n in range(count)]
    known = guard.KNOWN_SECRETS
    if isinstance(known, set):
        known.update(secrets)
    else:
        known.add(secrets)


def run(items: int, known: int) -> dict[str, float]:
    data = state(items)
    index = SecretIndex()
    index.secrets(data)
    grown = {**data, "files": [*data["files"], "src/extra.ts"]}
    rows: dict[str, float] = {}

    def append_one() -> None:
        nonlocal grown
        grown = {**grown, "files": [*grown["files"], "src/extra.ts"]}
        index.secrets(grown)

    rows["find secrets (append)"] = timed(append_one, 50)
    rows["build masker"] = timed(lambda: Masker(index.secrets(grown)), 200)
    masker = Masker(index.secrets(grown))
    reply = {"state": {**grown, "inputs": {}}}
    rows[f"mask reply ({items:,} items)"] = timed(lambda: masker.mask(reply), 30)
    rows["mask text (short)"] = timed(lambda: [masker.mask_text("src/components/button_42.tsx reviewed: 3 issues")
                                               for _ in range(1000)], 30) / 1000
    rows["redact log line, 0 known"] = timed(lambda: guard.redact(LOG_LINE), 50)
    fill_known(known)
    rows[f"redact log line, {known:,} known"] = timed(lambda: guard.redact(LOG_LINE), 50)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=10_000, help="items of the big list in state")
    parser.add_argument("--known", type=int, default=10_000, help="secrets the process has seen")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    args = parser.parse_args()
    info = machine()
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    rows = run(args.items, args.known)
    for name, value in rows.items():
        print(f"  {name:34s} {value:10.4f} ms")
    if args.json:
        print(json.dumps({"machine": info, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
