"""Reading a small TOML file someone else may have written: bounded, and only a regular file.

Why: ``tomllib`` reads a whole file into memory and parses it recursively, so the file itself
is the risk. A FIFO blocks the read until a writer comes (forever, in CI), a device such as
``/dev/zero`` never ends, a 1 GB file (or one that grows while read) is held whole, and tables
nested a hundred thousand deep exhaust the parser's recursion. Every TOML file ctxwright reads
(a ``--prices`` table, a ``ctxwright.lock``) goes through :func:`read_bounded_toml`, which
refuses each of those before or while reading, and hands the caller the kind of refusal, so
that each file's messages name that file and its own fix.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, NoReturn

#: why a file was refused: it could not be opened or read (``unreadable``), is a FIFO, a
#: device or a folder (``not_regular``), is larger than the cap (``too_large``), is not UTF-8
#: (``not_utf8``), is not TOML (``not_toml``) or nests too deep for the parser (``too_deep``)
TomlRefusal = Literal["unreadable", "not_regular", "too_large", "not_utf8", "not_toml", "too_deep"]


def read_bounded_toml(
    path: str | Path, max_bytes: int, refuse: Callable[[TomlRefusal, str], NoReturn]
) -> dict[str, Any]:
    """The TOML document in the regular file ``path``, at most ``max_bytes`` long.

    Anything else calls ``refuse(kind, detail)``, which must raise (``detail``: the OS's or
    the parser's words, ``""`` when there are none). The type is checked before the open (a
    FIFO's open itself blocks) and the read is capped at ``max_bytes + 1`` bytes, so a file
    that grows after the check is still refused.
    """
    p = Path(path)
    try:
        st = p.stat()
    except (OSError, ValueError) as e:  # ValueError: a NUL in the name
        refuse("unreadable", getattr(e, "strerror", None) or str(e))
    if not stat.S_ISREG(st.st_mode):
        refuse("not_regular", "")
    if st.st_size > max_bytes:
        refuse("too_large", "")
    try:
        with p.open("rb") as f:
            raw = f.read(max_bytes + 1)  # bounded even if the file grows after the check
    except OSError as e:
        refuse("unreadable", e.strerror or str(e))
    if len(raw) > max_bytes:
        refuse("too_large", "")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        refuse("not_utf8", "")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        refuse("not_toml", str(e))
    except RecursionError:
        refuse("too_deep", "")


__all__ = ["TomlRefusal", "read_bounded_toml"]
