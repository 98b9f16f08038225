"""The plugin's virtual environments, and starting the server from one (Python 3.11+;
`launch.py` has made sure of that).

Each plugin version gets its own venv, ``${CLAUDE_PLUGIN_DATA}/venvs/<version>-<hash>``, with
the package's dependencies and a ``.pth`` file pointing at the package source in this folder
(nothing is built). The dependencies come from ``pylock.txt`` next to this file, installed
with ``pip install --require-hashes --only-binary :all:``: exact versions, each wheel checked
against its sha256, no source build (no ``setup.py`` of whatever an index serves runs on a
user's machine). ``make plugin-lock`` makes the lock from ``pyproject.toml``. When the venv
is ready, the launcher replaces itself with ``<venv>/bin/python -m aromcp_workflows serve``.

The first start has to install the dependencies, which takes longer than the 30 s Claude
Code waits for a server's handshake; then ``proxy.py`` answers the client at once while the
install runs in a ``launch.py --prepare`` process of its own, and hands the session over to
the real server once it is ready.

A plugin update lands in a new folder, so its venv has another name, and the old one stays
while a server still runs from it: every server holds a shared lock on ``<venv>.lock``
(inherited across exec), and a venv is deleted only by a launcher that can lock it
exclusively, that is when no server uses it.

Why a venv and not ``uvx``: the plugin must start on a machine that has Python 3.11+ and
pip but no uv. Problems the user has to fix are one line on stderr, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no locks; venvs of old versions are then never deleted
    fcntl = None  # type: ignore[assignment]

SOURCE = Path(__file__).resolve().parent  # the package source (links into the repository)
LOCK = SOURCE / "pylock.txt"  # exact versions and hashes (make plugin-lock)
LOCK_OPTIONS = ("--require-hashes", "--only-binary", ":all:")  # every wheel checked, nothing built
MARKER = "aromcp-workflows-plugin.json"
STAGING = ".new"  # a venv being made: <name>.new, moved to <name> when complete
NAME = "aromcp-workflows plugin"
RECONNECT = "then reconnect the server with /mcp"


class LauncherError(Exception):
    """A problem the user has to fix; its text is the one line they see."""


def say(text: str) -> None:
    """One line on stderr (Claude Code's MCP log). A closed stderr is no reason to stop."""
    try:
        print(f"{NAME}: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def data_dir() -> Path:
    """Where the venvs live: the plugin's data folder (kept across plugin updates)."""
    configured = os.environ.get("CLAUDE_PLUGIN_DATA")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "aromcp-workflows-plugin"


def whoami() -> str:
    """The user name to put in a `chown` suggestion."""
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return "you"


@functools.cache
def project() -> dict[str, Any]:
    """`[project]` of pyproject.toml: the version names the venv, the dependencies fill it."""
    import tomllib  # 3.11+, which launch.py has made sure of

    path = SOURCE / "pyproject.toml"
    try:
        with open(path, "rb") as handle:
            return dict(tomllib.load(handle)["project"])
    except (OSError, ValueError, KeyError) as exc:  # a copy without its links (Windows without symlinks)
        raise LauncherError(f"cannot read the plugin's {path} ({exc}); reinstall the plugin "
                            f"(/plugin), {RECONNECT}") from None


@functools.cache
def lock_digest() -> str:
    """The lock's sha256: a new lock is a new venv."""
    try:
        return hashlib.sha256(LOCK.read_bytes()).hexdigest()
    except OSError as exc:
        raise LauncherError(f"cannot read the plugin's lock file {LOCK} ({exc.strerror}); reinstall the plugin "
                            f"(/plugin), {RECONNECT}") from None


def fingerprint() -> dict[str, object]:
    """What a venv is made for; anything else gets a venv of its own. The plugin folder
    changes with every plugin update; the Python minor version decides the wheels."""
    return {"dependencies": list(project()["dependencies"]), "lock": lock_digest(), "source": str(SOURCE),
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}


def venv_dir(data: Path) -> Path:
    digest = hashlib.sha256(json.dumps(fingerprint(), sort_keys=True).encode()).hexdigest()[:10]
    return data / "venvs" / f"{project()['version']}-{digest}"


def venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / ("python.exe" if os.name == "nt" else "python")


def lock_path(env_dir: Path) -> Path:
    return env_dir.with_name(env_dir.name + ".lock")


def is_ready(env_dir: Path) -> bool:
    try:
        recorded = json.loads((env_dir / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == fingerprint() and venv_python(env_dir).exists()  # a removed base Python breaks the link


def open_lock(path: Path) -> int:
    """A descriptor to flock `path` with, creating it if need be. flock needs no write
    access, so a lock file this user may only read still serves."""
    try:
        return os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        return os.open(str(path), os.O_RDONLY)


def try_lock(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def same_file(fd: int, path: Path) -> bool:
    """Whether `fd` is still the file at `path` (a pruner may have removed it meanwhile)."""
    try:
        here, there = os.fstat(fd), os.stat(str(path))
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def hold_in_use(env_dir: Path) -> int | None:
    """A shared lock on `<venv>.lock` for the server's lifetime (the descriptor is inherited
    across exec): while any server holds it, no launcher deletes that venv."""
    if fcntl is None:
        return None
    path = lock_path(env_dir)
    for _attempt in range(5):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_lock(path)
        except OSError as exc:
            say(f"cannot open {path} ({exc.strerror}), so a plugin update could delete this server's venv while "
                f"it runs; make {path.parent} writable by {whoami()}")
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        if same_file(fd, path):
            os.set_inheritable(fd, True)
            return fd
        os.close(fd)  # removed by a pruner between open and lock: lock the new file
    return None


@contextlib.contextmanager
def install_lock(data: Path, wait: bool = True) -> Iterator[bool]:
    """The data folder's install lock: one install or clean-up at a time (two sessions may
    start together). Yields whether it is held; with wait=False, False when another has it."""
    path = data / "install.lock"
    try:
        data.mkdir(parents=True, exist_ok=True)
        fd = open_lock(path)
    except OSError as exc:
        if not wait:
            yield False
            return
        raise LauncherError(f"cannot open {path} ({exc.strerror}); the plugin's data folder must be "
                            f"{whoami()}'s: fix its owner or permissions (for example sudo chown -R {whoami()} "
                            f"'{data}'), {RECONNECT}") from None
    try:
        if fcntl is None:
            yield True
        elif wait:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
        else:
            yield try_lock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def remove(path: Path, what: str) -> bool:
    """Delete a folder; one line saying how to delete it by hand when that fails."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        say(f"cannot remove {what} {path} ({exc.strerror}: {exc.filename}); remove it yourself: rm -rf '{path}'")
        return False
    return True


def remove_if_unused(env_dir: Path) -> None:
    """Delete another version's venv (and its lock file) unless a server holds its lock."""
    path = lock_path(env_dir)
    try:
        fd = open_lock(path)
    except OSError:
        return  # cannot tell whether a server uses it: leave it
    try:
        if try_lock(fd, fcntl.LOCK_EX) and remove(env_dir, "the unused venv"):
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)


def legacy_in_use(env_dir: Path) -> bool:
    """Whether a process runs from the single `venv/` of launchers before per-version venvs
    (they took no lock); only /proc can tell, so without it the folder counts as used."""
    proc = Path("/proc")
    if not (proc / "self").is_dir():
        return True
    prefix = str(env_dir) + os.sep
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv0 = (entry / "cmdline").read_bytes().split(b"\0", 1)[0]
        except OSError:
            continue
        if os.fsdecode(argv0).startswith(prefix):
            return True
    return False


def prune(data: Path, keep: Path) -> None:
    """Delete the venvs no server uses, except `keep`, and what interrupted installs left.
    Runs with the install lock held, so no install is under way."""
    if fcntl is None:
        return
    folder = keep.parent
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if entry.name.endswith(STAGING):
            remove(entry, "the unfinished venv")
        elif entry.name.endswith(".lock") and entry != lock_path(keep):
            remove_if_unused(folder / entry.name[: -len(".lock")])
        elif entry.is_dir() and entry != keep and not lock_path(entry).exists():
            remove_if_unused(entry)
    legacy = data / "venv"
    if (legacy.is_dir() or (data / ("venv" + STAGING)).is_dir()) and not legacy_in_use(legacy):
        remove(data / ("venv" + STAGING), "the unfinished venv")
        remove(legacy, "the venv of an earlier plugin version")


def prune_if_idle(data: Path, keep: Path) -> None:
    """Prune unless another launcher is installing (it prunes when it is done)."""
    with install_lock(data, wait=False) as held:
        if held:
            prune(data, keep)


def clear(path: Path) -> None:
    """Remove what an interrupted install left in the way, before pip runs: a folder that
    cannot be removed costs one line, not an install."""
    if not (path.exists() or path.is_symlink()):
        return
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise LauncherError(f"cannot remove {path} ({exc.strerror}: {exc.filename}), left by an interrupted "
                            f"install; remove it yourself (rm -rf '{path}'), {RECONNECT}") from None


def make_venv(staging: Path) -> list[str]:
    """An empty venv in `staging`; the pip command that installs into it."""
    python = venv_python(staging)
    try:
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(staging)
            return [str(python), "-m", "pip"]
        except subprocess.CalledProcessError:  # Debian without python3-venv: no ensurepip
            venv.EnvBuilder(with_pip=False, clear=True).create(staging)
            return [sys.executable, "-m", "pip", "--python", str(python)]  # this Python's pip, into the venv
    except OSError as exc:
        raise LauncherError(f"cannot make a venv in {staging} ({exc.strerror}: {exc.filename}); "
                            f"free some disk space or fix the folder's permissions, {RECONNECT}") from None


def install_command(pip: list[str]) -> list[str]:
    """pip installing exactly the lock: pinned versions, checked hashes, wheels only."""
    return [*pip, "install", "--quiet", "--disable-pip-version-check", *LOCK_OPTIONS, "-r", str(LOCK)]


def pip_install(pip: list[str], log: Path) -> None:
    """Install the dependencies; pip's output goes to `log` (stderr may be a closed pipe by
    the time pip writes, when the client has gone and the install goes on alone)."""
    command = install_command(pip)
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=out).returncode
    if code != 0:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
        last = next((line for line in reversed(lines) if line), "no output")
        raise LauncherError(f"pip could not install the dependencies of {LOCK.name} (exit {code}: {last}; the whole "
                            f"log is {log}); check the network or a proxy (PIP_INDEX_URL; it must serve these "
                            f"exact wheels), {RECONNECT}")


def build(env_dir: Path) -> None:
    """Make the venv in a side folder, then move it into place, so an interrupted install
    never leaves a venv that looks ready."""
    staging = env_dir.with_name(env_dir.name + STAGING)
    clear(env_dir)
    clear(staging)
    say(f"first start: installing dependencies into {env_dir} (needs PyPI; about a minute)")
    pip = make_venv(staging)
    python = venv_python(staging)
    try:
        pip_install(pip, env_dir.parent.parent / "install.log")
        purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
        (Path(purelib) / "aromcp_workflows_plugin.pth").write_text(str(SOURCE) + "\n", encoding="utf-8")
        (staging / MARKER).write_text(json.dumps(fingerprint()), encoding="utf-8")
        os.replace(staging, env_dir)
    except (OSError, subprocess.CalledProcessError) as exc:
        reason = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) else f"{python} exited {exc.returncode}"
        raise LauncherError(f"cannot finish the venv in {staging} ({reason}); free some disk space or fix the "
                            f"folder's permissions, {RECONNECT}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    say("dependencies installed")


def prepare(data: Path, env_dir: Path) -> None:
    """Make this version's venv unless it is ready, then delete the venvs no server uses."""
    if is_ready(env_dir):
        prune_if_idle(data, env_dir)
        return
    with install_lock(data):
        if not is_ready(env_dir):
            build(env_dir)
        prune(data, env_dir)


def serve(data: Path, env_dir: Path, argv: list[str]) -> int:
    """Become the server when its venv is ready; else answer the client at once through the
    proxy while a separate `--prepare` process installs."""
    if os.environ.get("CLAUDE_PROJECT_DIR") and not os.environ.get("AROMCP_PROJECT_DIR"):
        os.environ["AROMCP_PROJECT_DIR"] = os.environ["CLAUDE_PROJECT_DIR"]
    in_use = hold_in_use(env_dir)
    python = str(venv_python(env_dir))
    command = [python, "-m", "aromcp_workflows", "serve", *argv]
    if is_ready(env_dir):
        prune_if_idle(data, env_dir)
        os.execv(python, command)
    import proxy  # beside this file (launch.py put this folder on sys.path); standard library only

    install = [sys.executable, str(SOURCE / "launch.py"), "--prepare"]
    return proxy.run(SOURCE / "answers.json", install, command, () if in_use is None else (in_use,))


def main(argv: list[str]) -> int:
    data = data_dir()
    try:
        env_dir = venv_dir(data)
        if argv[:1] == ["--prepare"]:
            prepare(data, env_dir)
            say(f"ready: {venv_python(env_dir)}")
            return 0
        return serve(data, env_dir, argv)
    except LauncherError as exc:
        say(str(exc))
        return 1
