"""``ctxwright export ID``: a stored session as the file to keep, audit or replay -- a run
session as JSON; a proxy or framework session, and a run session with ``--requests``, as
one JSON line per model call. A run's call lines are
``{"request": body, "response": {"usage": ...}, "ctxwright": {...}}`` -- the OpenAI
chat-completions body that was sent, the usage the server reported, and what the live audit
knew of the call (its session, a compaction before it). ``ctxwright show ID --json`` is not
this file: it is what the view shows, as data.

Why: the store keeps events, not requests (a request repeats its whole history; storing
each would grow the database quadratically). The bodies are rebuilt by the renderer that
rendered them live, so the output is evidence of what was sent: ``ctxwright audit`` reads
it like any request log and gives the verdicts ``ctxwright show`` gives, and any other tool
can replay or diff ``.request``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ctxwright.core.messages import canonical_json
from ctxwright.errors import CtxwrightError

#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "print a stored session as JSON, or with --requests each model call's request body (JSONL)"


def add_export_parser(sub: Any) -> None:
    """Register ``export`` on the ``ctxwright`` subcommand parser."""
    ex = sub.add_parser(
        "export",
        help=HELP,
    )
    ex.add_argument(
        "id",
        nargs="?",
        help="a session ID of any kind (a unique start is enough); a proxy or framework session is exported as "
        "one {request, response} line per model call, as it went over the wire (a golden trace for "
        "`ctxwright gate`)",
    )
    ex.add_argument("--proxy-session", metavar="ID", help="alias of ID for a proxy or framework session")
    ex.add_argument(
        "--requests",
        action="store_true",
        help="one line per model call: {request, response, ctxwright} -- the chat-completions body that was "
        "sent (model, messages, tools, tool_choice, max_tokens, temperature, ...), rebuilt from the store, with "
        "the usage the server reported; `ctxwright audit` reads it (a proxy or framework session's export is "
        "already one line per call)",
    )
    ex.set_defaults(func=cmd_export)


def _ranges(indices: list[int]) -> str:
    out: list[str] = []
    for i in indices:
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def cmd_export(args: argparse.Namespace) -> int:
    from ctxwright.cli.common import existing_store as _store
    from ctxwright.cli.sessions import SessionRef, named
    from ctxwright.store.export import request_bodies, session_export

    ref = named(args, args.id, proxy_session=args.proxy_session, files=False, usage="ctxwright export ID")
    if not isinstance(ref, SessionRef):
        raise CtxwrightError("give a session ID: ctxwright export ID (`ctxwright sessions` lists them)")
    store = _store(args)
    if ref.from_the_wire:  # its calls are already request lines: --requests changes nothing
        try:
            return _export_proxy_session(store, ref.id)
        finally:
            store.close()
    try:
        if not args.requests:
            print(json.dumps(session_export(store, ref.id), ensure_ascii=False, indent=1))
            return 0
        sid, bodies, missing = request_bodies(store, ref.id)
    finally:
        store.close()
    if not bodies and not missing:
        raise CtxwrightError(f"session {sid} made no model calls: there is no request to export")
    out = sys.stdout
    for b in bodies:
        out.write(canonical_json(b.record()) + "\n")
    out.flush()
    notes: dict[tuple[str, ...], list[int]] = {}
    for b in bodies:
        if b.unknown:
            notes.setdefault(b.unknown, []).append(b.call_index)
    for unknown, idx in notes.items():
        print(
            f"ctxwright: call(s) {_ranges(idx)} of session {sid} were recorded before ctxwright stored request "
            f"options; not known, so left out: {', '.join(unknown)}",
            file=sys.stderr,
        )
    unverified = [b.call_index for b in bodies if not b.verified]
    if unverified:
        print(
            f"ctxwright: warning: the rebuilt request of call(s) {_ranges(unverified)} does not hash to the one "
            "recorded when it was sent; the store may have been edited",
            file=sys.stderr,
        )
    if missing:
        print(
            f"ctxwright: call(s) {_ranges(missing)} of session {sid} cannot be rebuilt (no record of the events "
            "they were rendered from); left out",
            file=sys.stderr,
        )
    return 0


def _export_proxy_session(store: Any, ref: str) -> int:
    """A proxy or framework session's model calls (``ref``: its full id) as the records
    ``ctxwright audit`` and ``ctxwright gate`` read (``proxy/log.py``, the one reader of a
    session recorded from the wire)."""
    from ctxwright.proxy.log import proxy_session_requests

    records = proxy_session_requests(store, ref)
    if not records:
        raise CtxwrightError(f"session {ref} has no model calls: there is nothing to export")
    out = sys.stdout
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    out.flush()
    return 0
