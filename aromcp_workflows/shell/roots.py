"""Where run directories are made: `AROMCP_COMMANDS_DIR`, or a private per-user directory.

Whoever can write in that directory can replace a command's output or exit status before
its server reads them, so the directory is held to an owner rule (`commands_root`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

COMMANDS_DIR_ENV = "AROMCP_COMMANDS_DIR"  # where run directories are made (default: a tmpfs)

_roots: dict[str, Path] = {}


class CommandsDirError(ValueError):
    """`AROMCP_COMMANDS_DIR` names a directory commands must not use (another user's, one
    others can write, a link); the one-line text says what to do instead."""


def commands_root() -> Path:
    """The directory run directories are made in: `AROMCP_COMMANDS_DIR`, else a per-user
    directory on a tmpfs (`$XDG_RUNTIME_DIR`, `/dev/shm`), else in the temp directory.  A
    per-user directory that is not this user's own private directory (someone else made it
    first, or a link) is not used: a private one is made for this process instead.  The
    configured one is held to the same owner rule and may not be writable by others
    (`CommandsDirError`): whoever can write there can replace a command's output or exit
    status before its server reads them."""
    configured = os.environ.get(COMMANDS_DIR_ENV) or ""
    found = _roots.get(configured)
    if found is None:
        found = _roots[configured] = _configured_root(Path(configured)) if configured else _default_root()
    return found


def _configured_root(path: Path) -> Path:
    """`AROMCP_COMMANDS_DIR` when it is this user's directory (not a link) that no one else
    can write; made, private, when it does not exist yet."""
    where = f"{COMMANDS_DIR_ENV}={path}"
    try:
        with contextlib.suppress(FileExistsError):
            path.mkdir(parents=True, mode=0o700)
        info = path.lstat()
    except OSError as exc:
        raise CommandsDirError(f"{where} cannot be used: {exc.strerror or exc}; name a directory of yours, "
                               f"or unset {COMMANDS_DIR_ENV}") from None
    if stat.S_ISLNK(info.st_mode):
        raise CommandsDirError(f"{where} is a symbolic link: name the directory itself (a link can be pointed "
                               "elsewhere by whoever owns it)")
    if not stat.S_ISDIR(info.st_mode):
        raise CommandsDirError(f"{where} is not a directory: name a directory of yours, or unset {COMMANDS_DIR_ENV}")
    if info.st_uid != os.getuid():
        raise CommandsDirError(f"{where} is owned by uid {info.st_uid}, not by you (uid {os.getuid()}): its owner "
                               f"could read or replace your commands' output; use a directory of your own "
                               f"(mkdir -m 700 DIR)")
    if info.st_mode & 0o022:
        raise CommandsDirError(f"{where} can be written by others (mode {stat.S_IMODE(info.st_mode):o}): they could "
                               f"replace your commands' output and exit status; chmod 700 {path}, or use another "
                               "directory")
    return path


def _default_root() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    for base in (runtime, "/dev/shm", tempfile.gettempdir()):
        if base and os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            root = Path(base) / f"aromcp-commands-{os.getuid()}"
            with contextlib.suppress(FileExistsError):
                root.mkdir(mode=0o700)
            info = root.lstat()
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077:
                return root
            return Path(tempfile.mkdtemp(prefix="aromcp-commands-", dir=base))
    return Path(tempfile.mkdtemp(prefix="aromcp-commands-"))
