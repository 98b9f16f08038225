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
