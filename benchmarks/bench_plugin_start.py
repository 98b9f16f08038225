"""The Claude Code plugin's first start: how soon a client is answered, measured from an
empty plugin data folder and an empty pip cache, next to the alternatives in the same run.

Run: ``.venv/bin/python benchmarks/bench_plugin_start.py [--rounds R] [--local-index]``

A. first start through the proxy (what the launcher does now), each protocol generation:
   spawn → handshake answered (`initialize`, or `server/discover`), → `tools/list`
   answered, → first tool call (`workflow_list`, sent right after) answered by the real
   server once the install is done.
B. install first, then serve: `launch.py --prepare` from an empty data folder, plus C's
   marks (the handshake waits for the whole install).
C. a later start (venv ready): the same three marks.

Claude Code gives a server 30 s to answer its handshake (`MCP_TIMEOUT`); the target is 2 s
for A. pip uses PyPI only (``PIP_CONFIG_FILE`` is emptied, as on a user's machine) unless
``--local-index`` keeps this machine's pip configuration.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests" / "integrations"))
from machine_info import machine  # noqa: E402
from plugin_helpers import LAUNCHER, PLUGIN, RawClient, launcher_env, modern_meta  # noqa: E402

CALL = {"name": "workflow_list", "arguments": {"include_global": False}}


def pip_env(cache: Path, local_index: bool) -> dict[str, str]:
    env = {"PIP_CACHE_DIR": str(cache)}
    if not local_index:
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="")
    return env


def client_env(data: Path, pip: dict[str, str]) -> dict[str, str]:
    env = launcher_env(data, **pip)
    if not pip.get("PIP_FIND_LINKS", "x"):
        env.pop("PIP_FIND_LINKS")  # unset, not empty: pip reads an empty value as a location
    return env


def marks(data: Path, folder: Path, pip: dict[str, str], era: str) -> dict[str, float]:
    """Seconds from spawn to the handshake answer, the tools/list answer, the first call's."""
    client = RawClient([sys.executable, str(LAUNCHER)], client_env(data, pip), folder)
    with client:
        if era == "2026":
            client.request("server/discover", {"_meta": modern_meta()}, timeout=900)
        else:
            client.handshake()
        handshake = time.perf_counter() - client.started
        params: dict[str, Any] = {"_meta": modern_meta()} if era == "2026" else {}
        client.request("tools/list", params or None, timeout=900)
        tools = time.perf_counter() - client.started
        answer = client.request("tools/call", {**CALL, **params}, timeout=900)
        assert "result" in answer and not answer["result"].get("isError"), answer
        call = time.perf_counter() - client.started
    return {"handshake": handshake, "tools/list": tools, "first call": call}


def first_start(era: str, local_index: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "cache").mkdir()
        return marks(folder / "data", folder, pip_env(folder / "cache", local_index), era)


def install_first(local_index: bool) -> tuple[float, dict[str, float]]:
    """`--prepare` from nothing (the old launcher's wait before the handshake), then a
    start with the venv ready."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "cache").mkdir()
        pip = pip_env(folder / "cache", local_index)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(LAUNCHER), "--prepare"], capture_output=True, text=True,
                              env=client_env(folder / "data", pip), timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        install = time.perf_counter() - started
        return install, marks(folder / "data", folder, pip, "2025")


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--local-index", action="store_true", help="keep this machine's pip configuration")
    args = parser.parse_args()
    print(machine(), f"plugin: {PLUGIN}", f"rounds: {args.rounds}", sep="\n")
    rows: dict[str, list[dict[str, float]]] = {"A 2025 era (initialize)": [], "A 2026 era (server/discover)": [],
                                               "C venv ready": []}
    installs: list[float] = []
    for _ in range(args.rounds):  # interleaved, so that load drifts hit every row alike
        rows["A 2025 era (initialize)"].append(first_start("2025", args.local_index))
        rows["A 2026 era (server/discover)"].append(first_start("2026", args.local_index))
        install, ready = install_first(args.local_index)
        installs.append(install)
        rows["C venv ready"].append(ready)
    print(f"\n{'medians, seconds from spawn':34} {'handshake':>10} {'tools/list':>11} {'first call':>11}")
    for name, measured in rows.items():
        print(f"{name:34} {median(measured, 'handshake'):10.2f} {median(measured, 'tools/list'):11.2f} "
              f"{median(measured, 'first call'):11.2f}")
    install = statistics.median(installs)
    ready = rows["C venv ready"]
    waited = install + median(ready, "handshake")
    print(f"{'B install first, then serve':34} {waited:10.2f} {install + median(ready, 'tools/list'):11.2f} "
          f"{install + median(ready, 'first call'):11.2f}   (--prepare {install:.2f} s + C)")
    handshake = median(rows["A 2025 era (initialize)"], "handshake")
    print(f"\nA's handshake: {handshake / 30:.3f} of Claude Code's 30 s, {handshake / 2:.2f} of the 2 s target; "
          f"B's: {waited / 30:.2f} of the 30 s")


if __name__ == "__main__":
    main()
