"""The plugin installs exactly what was reviewed: pinned versions, their hashes, wheels only.

The attack (issue 31): the Claude Code plugin's launcher ran `pip install` with the version
ranges of pyproject.toml, no lock and no hashes, source builds allowed: whatever an index
(or a compromised mirror, or a new release) served on a user's first start was installed
and run, `setup.py` included.  Now the launcher installs from `plugin/server/pylock.txt`
with `pip install --require-hashes --only-binary :all:`: every package pinned with `==`
and its sha256 hashes, no source distribution.  This test proves the lock matches
pyproject.toml (`make plugin-lock` regenerates it), and that a lock whose hash does not
match what the index serves installs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "plugin" / "server" / "pylock.txt"
PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)")


def launcher_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("aromcp_plugin_venvs_lock", REPO / "plugin" / "server" / "venvs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def entries(text: str) -> list[tuple[str, str, list[str]]]:
    """(name, version, hashes) of each requirement of a pip requirements file with hashes."""
    found, current = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        current += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            pin = PIN.match(current)
            assert pin, f"not a pinned requirement: {current!r}"
            found.append((canonicalize_name(pin[1]), pin[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", current)))
            current = ""
    return found


def test_the_lock_pins_every_dependency_of_pyproject_with_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = entries(LOCK.read_text())
    assert locked, "the lock is empty"
    for name, version, hashes in locked:
        assert hashes, f"{name}=={version} has no hash"
    versions: dict[str, set[str]] = {}
    for name, version, _ in locked:
        versions.setdefault(name, set()).add(version)
    for text in project["dependencies"]:
        wanted = Requirement(text)
        pinned = versions.get(canonicalize_name(wanted.name))
        assert pinned, f"{wanted.name} (pyproject.toml) is not in {LOCK.name}: run make plugin-lock"
        for version in pinned:
            assert wanted.specifier.contains(version, prereleases=True), (
                f"{wanted.name}=={version} in {LOCK.name} does not meet {wanted} of pyproject.toml: "
                "run make plugin-lock")
    digest = hashlib.sha256("\n".join(sorted(project["dependencies"])).encode()).hexdigest()
    assert f"pyproject-dependencies-sha256: {digest}" in LOCK.read_text(), (
        "the lock was made from other dependencies: run make plugin-lock")


def test_the_launcher_installs_from_the_lock_with_hashes_and_wheels_only(tmp_path: Path) -> None:
    venvs = launcher_module()
    command = venvs.install_command(["pip"])
    assert "--require-hashes" in command and command[command.index("--only-binary") + 1] == ":all:"
    assert command[command.index("-r") + 1] == str(venvs.SOURCE / "pylock.txt")
    assert not [arg for arg in command if ">=" in arg or "<" in arg], "no version range reaches pip"
    assert venvs.fingerprint()["lock"] == hashlib.sha256(LOCK.read_bytes()).hexdigest()  # a new lock, a new venv


@pytest.mark.slow  # pip, with the index (or its cache)
def test_a_hash_that_does_not_match_installs_nothing(tmp_path: Path) -> None:
    """One small locked wheel (platformdirs) with its hashes replaced: pip, run with the
    launcher's options, refuses it and installs nothing."""
    name, version, hashes = next(entry for entry in entries(LOCK.read_text()) if entry[0] == "platformdirs")
    lock = tmp_path / "pylock.txt"
    lock.write_text(f"{name}=={version} --hash=sha256:{'0' * 64}\n")
    target = tmp_path / "target"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--target", str(target), *launcher_module().LOCK_OPTIONS, "-r", str(lock)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode != 0 and "HASH" in done.stderr.upper(), done.stderr[-2000:]
    assert not target.exists() or not any(target.iterdir()), f"{name} was installed from a tampered lock"
    real = tmp_path / "real.txt"
    real.write_text(f"{name}=={version} " + " ".join(f"--hash=sha256:{h}" for h in hashes) + "\n")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--target", str(target), *launcher_module().LOCK_OPTIONS, "-r", str(real)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]  # the true hashes install
