"""Opening a path beneath a root folder, whatever another process does to the folder meanwhile.

Why not "resolve the path, check it is inside, then open it": between the check and the open
another process can replace a folder of the workspace by a symbolic link to ``/etc``, and
``open`` follows it (``O_NOFOLLOW`` guards the last component only). A probe that swapped a
folder and a link in a loop got the real ``/etc/passwd`` in 5 of 5,000 reads.

So a path is walked one component at a time, each opened relative to the descriptor of the
folder before it (``openat``) with ``O_NOFOLLOW | O_DIRECTORY``: no component is ever looked up
by a path string that something could change. A symbolic link met on the way is read
(``readlinkat``) and its target walked the same way, from the folder it sits in (or from the
root, for an absolute target inside the root), so links that stay inside the root keep
working; a ``..`` goes back to the descriptor already held for the parent, never past the
root. This is what ``openat2(RESOLVE_BENEATH)`` does in the kernel, portable to every POSIX
system. After the last open, the chain from the root to what was opened is checked again
(device and inode of each link): a folder moved out of the root meanwhile is refused too.

Out of reach of any path rule: a hard link inside the root to a file outside it is that
file (``fs.protected_hardlinks`` keeps users from linking files they do not own).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

__all__ = ["CHANGED", "MAX_SYMLINKS", "OUTSIDE", "SUPPORTED", "Entry", "relative_parts", "walk_beneath"]

#: links followed in one lookup, as Linux's ``MAXSYMLINKS`` (past it: ``ELOOP``)
MAX_SYMLINKS = 40
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: ``openat``, ``fstatat`` and ``readlinkat`` with the flags the walk relies on (not on Windows)
SUPPORTED = (
    hasattr(os, "O_DIRECTORY")
    and hasattr(os, "O_NOFOLLOW")
    and {os.open, os.stat, os.readlink} <= os.supports_dir_fd
    and os.stat in os.supports_follow_symlinks
)


#: the errors of the walk, as ``openat2(RESOLVE_BENEATH)`` has them: the path or a link on it
#: leads out of the root; what was found moved while it was being opened (try again)
OUTSIDE = errno.EXDEV
CHANGED = errno.EAGAIN


def _outside() -> OSError:
    return OSError(OUTSIDE, "the path leads outside the root")


def _changed(what: str) -> OSError:
    return OSError(CHANGED, what)


@dataclass
class Entry:
    """The last component of a walked path, not opened yet: ``name`` in the folder ``parent``
    (a descriptor this walk holds), as ``info`` (``lstat``) found it, or ``info is None`` if it
    does not exist. ``parts`` is its real path relative to the root (links resolved)."""

    parent: int
    name: str
    parts: tuple[str, ...]
    info: os.stat_result | None
    #: the descriptors from the root to ``parent`` with their names (the root's is ``""``)
    chain: list[tuple[int, str]] = field(repr=False)
    #: every descriptor the walk opened, closed by :meth:`close`
    held: list[tuple[int, str]] = field(repr=False)

    def __enter__(self) -> Entry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while self.held:
            os.close(self.held.pop()[0])

    @property
    def shown(self) -> str:
        """The real path relative to the root, as the tools show it (``.`` for the root)."""
        return "/".join(self.parts) or "."

    def open(self, flags: int) -> int:
        """``openat`` of the entry with ``O_NOFOLLOW``; raises ``OSError(CHANGED)`` unless the
        descriptor is the file ``lstat`` saw and the folders above it are still on the chain
        from the root (a swap or a move between the walk and the open)."""
        fd = os.open(self.name, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=self.parent)
        try:
            opened = os.fstat(fd)
            if self.info is None or not _same(opened, self.info):
                raise _changed("it changed while it was being opened")
            self._check_chain()
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_chain(self) -> None:
        for (above, _), (fd, name) in zip(self.chain, self.chain[1:], strict=False):
            try:
                now = os.stat(name, dir_fd=above, follow_symlinks=False)
            except OSError:
                raise _changed("a folder on its path moved while it was being opened") from None
            if not _same(now, os.fstat(fd)):
                raise _changed("a folder on its path moved while it was being opened")


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def relative_parts(root: Path, path: str) -> list[str]:
    """``path`` (relative to ``root``, or absolute) as components to walk from ``root``;
    raises ``OSError(OUTSIDE)`` for an absolute path elsewhere. ``..`` is kept: the walk decides.

    An absolute path is taken lexically when it starts with ``root``; else its real path is
    tried (the root is a real path; ``/var/x`` may be ``/private/var/x``). That string is only
    a guess of what to walk: the walk itself is what keeps the open inside the root.
    """
    p = PurePosixPath(path)
    if not p.is_absolute():
        return list(p.parts)
    for candidate in (p, PurePosixPath(os.path.realpath(p))):
        if candidate.is_relative_to(root):
            return list(candidate.relative_to(root).parts)
    raise _outside()


def walk_beneath(root: Path, path: str) -> Entry:
    """Walk ``path`` from the real folder ``root`` to its last component (see the module
    docstring). The entry holds the folders' descriptors: use it in a ``with`` block.

    Raises ``OSError(OUTSIDE)`` when the path or a link leads out of ``root``,
    ``FileNotFoundError`` when a folder on the way does not exist or is not a folder (its
    ``filename`` is the path as far as it was resolved), and ``OSError(ELOOP)`` past
    :data:`MAX_SYMLINKS` links.
    """
    chain: list[tuple[int, str]] = [(os.open(root, _DIR_FLAGS), "")]
    try:
        return _walk(root, chain, deque(relative_parts(root, path)))
    except BaseException:
        for fd, _ in chain:
            os.close(fd)
        raise


def _walk(root: Path, chain: list[tuple[int, str]], pending: deque[str]) -> Entry:
    links = 0

    def parts(*more: str) -> tuple[str, ...]:
        return (*(name for _, name in chain[1:]), *more)

    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            if len(chain) == 1:
                raise _outside()
            os.close(chain.pop()[0])
            continue
        here = chain[-1][0]
        try:
            info: os.stat_result | None = os.stat(name, dir_fd=here, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            info = None
        if info is not None and stat.S_ISLNK(info.st_mode):
            links += 1
            if links > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, f"more than {MAX_SYMLINKS} symbolic links on the path")
            target = os.readlink(name, dir_fd=here)
            if target.startswith("/"):  # from the root again, if the target is beneath it
                rest = relative_parts(root, target)
                while len(chain) > 1:
                    os.close(chain.pop()[0])
                pending.extendleft(reversed(rest))
            else:
                pending.extendleft(reversed(PurePosixPath(target).parts))
            continue
        if not pending:
            return Entry(here, name, parts(name), info, chain, chain)
        if info is None or not stat.S_ISDIR(info.st_mode):
            raise FileNotFoundError(errno.ENOENT, "no such folder", "/".join(parts(name, *pending)))
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=here)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise
            links += 1  # replaced since the lstat: look at it again (bounded like links)
            if links > MAX_SYMLINKS:
                raise
            pending.appendleft(name)
            continue
        if not _same(os.fstat(fd), info):  # another folder than the lstat saw: look again
            os.close(fd)
            links += 1
            if links > MAX_SYMLINKS:
                raise _changed("a folder on the path keeps changing")
            pending.appendleft(name)
            continue
        chain.append((fd, name))
    # the path ends on the folder reached (".", "sub/..", the root): its own entry
    if len(chain) == 1:
        return Entry(chain[0][0], ".", (), os.fstat(chain[0][0]), chain, chain)
    fd, name = chain[-1]
    return Entry(chain[-2][0], name, parts(), os.fstat(fd), chain[:-1], chain)
