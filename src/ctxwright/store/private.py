"""Files and folders only their owner can read: the database, offloaded tool results and
recovery files hold whatever the agent read (source code, logs, keys it came across).

Why explicit modes: a file created with ``open()`` gets ``0666 & ~umask`` -- ``0644`` under
the usual umask, readable by every local user -- and ``mkdir`` gets ``0755``. So every file
made here is created ``0600`` and every folder ``0700``, then ``chmod``-ed to exactly that,
because a umask can only remove bits (a umask of ``0077`` is fine, one of ``0777`` would leave
a file its owner cannot read). Folders that already exist are left as they are: they are the
user's (the current directory, a ``--db`` folder), not ours to change.

Files are opened with ``O_NOFOLLOW``: a symlink planted where a file is about to be written
is refused instead of followed to wherever it points.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o600
DIR_MODE = 0o700
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def private_dir(path: Path) -> Path:
    """``mkdir -p path``; each folder this call creates is ``0700`` (existing ones untouched)."""
    missing: list[Path] = []
    p = path
    while not p.exists() and not p.is_symlink() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
        except FileExistsError:  # another process made it meanwhile
            continue
        os.chmod(d, DIR_MODE)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    return path


def open_private(path: Path, *, append: bool = False) -> BinaryIO:
    """Open ``path`` for writing as a ``0600`` file (created, or truncated unless ``append``);
    a symlink at ``path`` raises ``OSError`` (ELOOP) instead of being followed."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    try:
        _fchmod(fd)
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


def create_private(path: Path) -> bool:
    """Create ``path`` as an empty ``0600`` file if it does not exist; ``True`` if it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE)
    except FileExistsError:
        return False
    try:
        _fchmod(fd)
    finally:
        os.close(fd)
    return True


def _fchmod(fd: int) -> None:
    """Exactly 0600 whatever the umask (POSIX; Windows has no such modes). Only a regular
    file: a path the user named may be a device (``-o /dev/stdout``), whose mode is not ours."""
    fchmod = getattr(os, "fchmod", None)
    if fchmod is not None and stat.S_ISREG(os.fstat(fd).st_mode):
        fchmod(fd, FILE_MODE)


__all__ = ["DIR_MODE", "FILE_MODE", "create_private", "open_private", "private_dir"]
