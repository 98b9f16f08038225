"""Files that hold a credential (a token, a login URL): readable by their user only.

Written whole or not at all (a temporary file, then a rename), in a folder only the user
can enter, so no other local user reads one even for the moment it is being written.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def credentials_dir() -> Path:
    """The user data directory's `http/` folder, where servers keep their credential files."""
    import platformdirs

    return Path(platformdirs.user_data_dir("aromcp-workflows", appauthor=False)) / "http"


def write_private(path: Path, text: str) -> Path:
    """Replace `path` with `text`, mode 0600, in a 0700 folder (made, or narrowed when it is
    this user's and wider).  OSError when it cannot be."""
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = folder.stat()
    if info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) & 0o077:
        folder.chmod(0o700)
    temporary = folder / f".{path.name}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)
    return path


def remove_quietly(path: Path) -> None:
    """Remove a credential file a server no longer honours (at its exit)."""
    with contextlib.suppress(OSError):
        path.unlink()
