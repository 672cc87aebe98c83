"""What the CLI's commands share: the consoles, the store a reading command opens, the one
line an error becomes (:func:`explain`), the ``--system``/``--tool``/``--approve`` values.

Why a module of its own: ``cli/main.py`` builds the parser from every command module, so a
command module that imported ``cli/main.py`` back for these closed a circle through the
whole CLI (``tests/test_layering.py`` forbids it). ``cli/main.py`` imports them from here too.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ctxwright.errors import CtxwrightError

__all__ = [
    "approver",
    "console",
    "err_console",
    "existing_store",
    "explain",
    "id_column",
    "looks_like_path",
    "system_and_tools",
    "system_text",
]

# Rich falls back to 80 columns when stdout is not a terminal (CI logs, `make demo | tee`),
# which folds the per-call table; give it room.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # one line per error, never folded


def existing_store(args: argparse.Namespace) -> Any:
    """The store a command that reads sessions opens (``--db``, else ``$CTXWRIGHT_DB`` or the
    user data dir's): an existing one, or one line saying there is none -- never a new file,
    folder or table made by a mistyped ``--db`` (``Store(must_exist=True)``). The commands that
    record (``run``, ``proxy``) create theirs."""
    from ctxwright.store.sessions import Store

    return Store.existing(getattr(args, "db", None) or None)


def looks_like_path(value: str) -> bool:
    """Whether a ``--system`` value is meant as a file name: one word (no whitespace) with a
    folder separator, a leading ``~`` or an extension (``prompts/system.md``, ``system.txt``).
    A prompt is a sentence; a file name has none of its spaces."""
    if not value or any(c.isspace() for c in value):
        return False
    return "/" in value or "\\" in value or value.startswith("~") or bool(Path(value).suffix)


def system_text(value: str) -> str:
    """``--system``: the text of an existing file; a value that looks like a path
    (:func:`looks_like_path`) and is no file is refused -- a mistyped file name used to become
    the system prompt, silently -- and any other value is the text itself (as it always was),
    with a warning on stderr when it is one word: ``--system myprompt`` is far likelier a file
    name without its extension than an 8-character prompt."""
    path = Path(value)
    try:  # a long prompt is no file name the OS takes (ENAMETOOLONG), nor one with a NUL or ~nobody
        path = path.expanduser()
        kind = "file" if path.is_file() else ("other" if path.exists() else None)
    except (OSError, ValueError, RuntimeError):
        kind = None
    if kind != "file":
        if kind is not None:
            raise CtxwrightError(f"--system {value}: not a file; give a text file, or the prompt with --system-text")
        if looks_like_path(value):
            raise CtxwrightError(
                f"--system {value}: no such file; check the name, or give the prompt itself with --system-text"
            )
        if value and not any(c.isspace() for c in value):
            err_console.print(
                Text.assemble(
                    ("ctxwright: warning:", "yellow"),
                    f" --system {value}: no file of that name, so these {len(value)} characters are the system "
                    "prompt; check the file name, or give the text with --system-text to say it is the prompt",
                ),
                soft_wrap=True,
            )
        return value
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxwrightError(
            f"--system {value}: cannot read the file ({exc}); give a readable UTF-8 text file"
        ) from None


def system_and_tools(args: argparse.Namespace) -> tuple[str | None, list[Any] | None]:
    """``--system``/``--system-text`` and ``--tool`` as the Harness takes them (``None``: the
    defaults). The prompt is not an option of the record: it is the stored prefix's, so a
    resume compares the text, however it was given."""
    from ctxwright.tools.imported import import_tool

    literal = getattr(args, "system_text", None)
    if literal is not None and args.system is not None:
        raise CtxwrightError("--system FILE and --system-text TEXT both give the system prompt: give one of them")
    tools = [import_tool(spec) for spec in args.tool] if args.tool else None
    system = system_text(args.system) if args.system is not None else literal
    return system, tools


def approver(mode: str | None, timeout: float | None) -> Any:
    """``--approve`` and ``--approve-timeout`` as the Harness's ``approve``: ``ask`` becomes a
    y/N prompt only on a terminal (``cli/approve.py``)."""
    from ctxwright.cli.approve import cli_approve

    return cli_approve(mode, err_console, timeout_s=timeout)


def id_column(table: Table, ids: list[str]) -> None:
    """Add a table's ID column, never cut: an ID people copy from a listing must be whole (a
    cut one, ``920262ef8…``, names no session). The other columns wrap or shorten first."""
    table.add_column("id", no_wrap=True, min_width=max((len(i) for i in ids), default=2))


def explain(exc: BaseException, *, debug: bool = False) -> str:
    """One line for ``exc``: our own errors already say what to do; for anything else, say
    what kind of failure it is and how to see more. URL credentials never reach the screen
    (``core/redact.py``)."""
    from ctxwright.core.redact import redact

    text = " ".join(redact(str(exc)).split())
    if isinstance(exc, CtxwrightError):
        return text
    if isinstance(exc, sqlite3.Error):  # Store's own messages name the file and the fix
        return f"database error: {text}"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {text}. Check the path and its permissions"
    more = "" if debug else "; rerun with --debug for the traceback"
    return f"unexpected {type(exc).__name__}: {text or '(no message)'}{more}, and report it if it looks like a bug"
