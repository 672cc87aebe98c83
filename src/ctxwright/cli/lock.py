"""``ctxwright lock (FILE | ID) [--file ctxwright.lock] [--check]``: write the lock of an agent's
frozen prefix, or check the prefix against it (``ci/lock.py``). ID is a stored session of any
kind (``--session`` and ``--proxy-session`` are its aliases); its store is ``--db``.

Exit codes, for CI: 0 the lock was written, or the prefix matches it; 1 the prefix changed
(each change printed, then what it costs per call); 2 it could not be judged (no lock, a lock
edited into something ``ctxwright lock`` never writes, a source that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = (
    "write ctxwright.lock (each system-prompt section and tool schema: tokens, sha256); "
    "--check fails when the prefix changed"
)


def add_lock_parser(sub: Any) -> None:
    """Register ``lock`` on the ``ctxwright`` subcommand parser."""
    from ctxwright.ci.lock import LOCK_FILE
    from ctxwright.cli.audit import add_price_options

    lk = sub.add_parser(
        "lock",
        help=HELP,
    )
    lk.add_argument(
        "source",
        nargs="?",
        metavar="FILE|ID",
        help="a request log or golden trace (JSONL, the `ctxwright audit` format; - for stdin): the prefix of its "
        "first request is locked; or a stored session's ID, of any kind (from --db)",
    )
    lk.add_argument("--session", metavar="ID", help="alias of ID for a run session")
    lk.add_argument("--proxy-session", metavar="ID", help="alias of ID for a proxy or framework session")
    # the store is --db, as for every command; --store is kept for the scripts that give it
    lk.add_argument("--store", dest="db", default=argparse.SUPPRESS, metavar="PATH", help=argparse.SUPPRESS)
    lk.add_argument("--file", default=LOCK_FILE, metavar="PATH", help=f"the lock file (default {LOCK_FILE})")
    lk.add_argument(
        "--check",
        action="store_true",
        help="do not write: exit 0 when the prefix matches the lock, 1 when it changed (printing which segments "
        "and the cost per call), 2 when it cannot be judged",
    )
    lk.add_argument("--json", action="store_true", help="print the result as JSON")
    add_price_options(lk)
    lk.set_defaults(func=cmd_lock)


def _command(args: argparse.Namespace) -> str:
    """The command that (re)writes this lock, for its header and messages."""
    from ctxwright.ci.lock import LOCK_FILE

    parts = ["ctxwright", "lock"]
    if args.source is not None:
        parts.append(args.source)
    if args.session is not None:
        parts += ["--session", args.session]
    if args.proxy_session is not None:
        parts += ["--proxy-session", args.proxy_session]
    if getattr(args, "db", None) is not None:
        parts += ["--db", args.db]
    if args.file != LOCK_FILE:
        parts += ["--file", args.file]
    return shlex.join(parts)


def _read_prefix(args: argparse.Namespace, store: str | None) -> Any:
    """The prefix of what the command names: a file, or a session of any kind (``cli/sessions.py``)."""
    from ctxwright.ci.lock import read_prefix
    from ctxwright.cli.sessions import SessionRef, named

    ref = named(
        args,
        args.source,
        session=args.session,
        proxy_session=args.proxy_session,
        files=True,
        usage="ctxwright lock FILE or ctxwright lock ID",
    )
    if not isinstance(ref, SessionRef):
        return read_prefix(ref, store=store)
    if ref.from_the_wire:
        return read_prefix(proxy_session=ref.id, store=store)
    return read_prefix(session=ref.id, store=store)


def cmd_lock(args: argparse.Namespace) -> int:
    from ctxwright.ci.lock import check_lock, lock_of, read_lock, render_lock, write_lock
    from ctxwright.cli.audit import pricing_from_args

    if args.source is None and args.session is None and args.proxy_session is None:
        raise CtxwrightError("give the prefix to lock: ctxwright lock TRACE.jsonl (or a session ID)")
    command = _command(args)
    pricing = pricing_from_args(args)  # a bad --prices file is refused before anything is read
    store = getattr(args, "db", None)
    if args.check:
        lock = read_lock(args.file, regenerate=command)  # no lock: nothing to judge, before reading a source
        prefix = _read_prefix(args, store)
        result = check_lock(lock, prefix, pricing=pricing)
        if args.json:
            print(json.dumps({"lock": args.file, "source": prefix.source, **result.to_json()}, ensure_ascii=False))
            return 0 if result.matches else 1
        out = sys.stdout
        if result.matches:
            out.write(
                f"ctxwright lock: the prefix of {prefix.source} matches {args.file} "
                f"({counted(len(lock.segments), 'segment')}, {counted(lock.tokens, 'token')})\n"
            )
        else:
            out.write(
                f"ctxwright lock: the prefix changed: {counted(len(result.changes), 'change')} against {args.file}\n"
            )
            for f in result.rug_pulls:  # instructions changed after approval: said first, with the fix
                out.write(f"  {f.line}\n    fix: {f.fix}\n")
            for c in result.changes:
                out.write(f"  {c.line}\n")
            out.write(result.cost_line() + "\n")
            out.write(f"if the change is intended, update the lock: {command}\n")
        for note in result.notes:
            out.write(f"note: {note}\n")
        return 0 if result.matches else 1
    prefix = _read_prefix(args, store)
    lock, _ = lock_of(prefix)
    written = write_lock(args.file, render_lock(lock, command=command))
    others = (
        f"; {prefix.other_prefixes:,} other prefix(es) in {prefix.source} were not locked (only the first request's is)"
        if prefix.other_prefixes
        else ""
    )
    if args.json:
        print(
            json.dumps(
                {
                    "lock": args.file,
                    "written": written,
                    "source": prefix.source,
                    "provider": lock.provider,
                    "model": lock.model,
                    "order": lock.order,
                    "tokens": lock.tokens,
                    "segments": [
                        {"kind": s.part, "name": s.name, "tokens": s.tokens, "sha256": s.sha256} for s in lock.segments
                    ],
                    "other_prefixes": prefix.other_prefixes,
                },
                ensure_ascii=False,
            )
        )
        return 0
    verb = "wrote" if written else "unchanged:"
    print(
        f"ctxwright lock: {verb} {args.file}: {counted(len(lock.segments), 'segment')}, "
        f"{counted(lock.tokens, 'token')}, from "
        f"{prefix.source}{others}"
    )
    return 0
