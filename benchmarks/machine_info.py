"""What machine a benchmark ran on, printed with every result (figures drift between
machines and loads, so each run says where it came from)."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> dict[str, str]:
    info = {"nproc": str(os.cpu_count()), "cpu": cpu_model(), "python": platform.python_version(),
            "platform": platform.platform()}
    for package in ("mcp", "mini-racer"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = "not installed"
    return info


def rss_mb_tree(pid: int | str = "self") -> float:
    """VmRSS of a process plus all its descendants, in MB: the server's V8 runs in a
    child process, and memory budgets are about everything the server costs."""
    total, todo = 0.0, [str(pid)]
    if todo == ["self"]:
        todo = [str(os.getpid())]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{current}/task").iterdir():
                todo.extend((task / "children").read_text().split())
        except OSError:
            continue
    return total
