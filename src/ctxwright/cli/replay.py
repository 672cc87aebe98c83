"""``ctxwright replay serve GOLDEN``: answer an agent from a recording, on loopback.

``ctxwright replay serve golden.jsonl`` prints its URL on the first line of stdout
(``ctxwright replay on http://127.0.0.1:PORT``), then one line per call it answers; a call
that leaves the recording is one line on stderr naming it. Point the agent at it with
``OPENAI_BASE_URL=URL/v1`` or ``ANTHROPIC_BASE_URL=URL`` (any API key). It stops on Ctrl-C,
on SIGTERM and when the process that started it dies (so a CI step that is killed leaves no
server behind); the trace is flushed line by line either way.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError

#: how often the server checks that the process that started it is still there
PARENT_POLL_S = 0.2


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "answer an agent's model calls from a recorded trace (a loopback fake of the providers)"


def add_replay_parser(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help=HELP,
        description="Replay a recording to an agent: the agent's model calls are answered with the recorded replies.",
    )
    rsub = p.add_subparsers(dest="replay_command", required=True)
    s = rsub.add_parser(
        "serve",
        help="serve a golden recording to an agent on loopback",
        description="A loopback server for OpenAI chat completions, the Responses API and Anthropic Messages "
        "(streaming or not) that answers each call with the reply recorded in GOLDEN, in order, per conversation.",
    )
    s.add_argument(
        "golden",
        nargs="?",
        metavar="GOLDEN",
        help="a request log (JSONL of {request, response}, as `ctxwright audit` reads; a replay trace is one)",
    )
    s.add_argument("--proxy-session", metavar="ID", help="replay a session recorded by `ctxwright proxy` instead")
    s.add_argument(
        "--session", metavar="ID", help="replay a stored ctxwright session (as `ctxwright export ID --requests`)"
    )
    # the store is --db, as for every command (a path or a postgresql:// URL); --store is its alias here
    s.add_argument(
        "--store",
        dest="db",
        default=argparse.SUPPRESS,
        metavar="PATH|URL",
        help="the database holding --proxy-session/--session: an alias of --db (default: ctxwright's)",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free one, printed)")
    s.add_argument(
        "--on-divergence",
        choices=("stop", "repeat-last"),
        default="stop",
        help="when the agent leaves the recording: answer a 400 naming the call (stop, default) or the "
        "conversation's last recorded reply (repeat-last)",
    )
    s.add_argument("--trace", metavar="PATH", help="write every call answered here (JSONL; `ctxwright audit` reads it)")
    s.add_argument(
        "--max-body", type=float, default=32.0, metavar="MB", help="largest request body accepted, decoded (default 32)"
    )
    s.add_argument("--header-timeout", type=float, default=20.0, metavar="S", help="default 20 s")
    s.add_argument("--body-timeout", type=float, default=60.0, metavar="S", help="default 60 s")
    s.add_argument("--max-connections", type=int, default=256, metavar="N", help="default 256")
    s.add_argument("--quiet", action="store_true", help="do not print a line per call")
    add_golden_limits(s)
    s.set_defaults(func=cmd_replay_serve)


def add_golden_limits(p: argparse.ArgumentParser) -> None:
    """The bounds on a golden (``replay/golden.py``), for ``replay serve`` and ``gate``."""
    from ctxwright.replay.golden import MAX_GOLDEN_BYTES, MAX_GOLDEN_CALLS, MAX_GOLDEN_MESSAGES

    mb = MAX_GOLDEN_BYTES // (1024 * 1024)
    p.add_argument("--max-golden-mb", type=_count, default=mb, metavar="MB", help=f"largest golden file (default {mb})")
    p.add_argument(
        "--max-golden-calls", type=_count, default=MAX_GOLDEN_CALLS, metavar="N", help=f"default {MAX_GOLDEN_CALLS:,}"
    )
    p.add_argument(
        "--max-golden-messages",
        type=_count,
        default=MAX_GOLDEN_MESSAGES,
        metavar="N",
        help=f"messages in all the golden's requests together (default {MAX_GOLDEN_MESSAGES:,})",
    )


def golden_limits(args: argparse.Namespace) -> dict[str, int]:
    """The keywords of ``load_golden`` the bounds' flags give."""
    return {
        "max_bytes": args.max_golden_mb * 1024 * 1024,
        "max_calls": args.max_golden_calls,
        "max_messages": args.max_golden_messages,
    }


def _count(text: str) -> int:
    shown = text if len(text) <= 40 else f"{text[:40]}..."  # a pasted megabyte stays one short line
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{shown} is not a number above 0")
    return v


def cmd_replay_serve(args: argparse.Namespace) -> int:
    from ctxwright.cli.proxy import is_loopback
    from ctxwright.proxy.limits import ClientLimits
    from ctxwright.replay.golden import load_golden
    from ctxwright.replay.server import ReplayServer, TraceRecord

    if not 0 <= args.port <= 65535:
        raise CtxwrightError(f"--port {args.port}: give a TCP port from 0 to 65535 (0: a free one)")
    if not (args.max_body > 0 and math.isfinite(args.max_body)):
        raise CtxwrightError(f"--max-body {args.max_body:g}: give a size in MB above 0, e.g. --max-body 32")
    try:
        limits = ClientLimits(args.header_timeout, args.body_timeout, args.max_connections)
    except ValueError as exc:
        raise CtxwrightError(str(exc)) from None
    golden = load_golden(
        args.golden,
        proxy_session=args.proxy_session,
        session=args.session,
        store=getattr(args, "db", None) or None,  # as given: Path() would turn postgresql:// into postgresql:/
        **golden_limits(args),
    )
    for note in golden.notes:
        print(f"ctxwright replay: note: {note}", file=sys.stderr, flush=True)
    if not is_loopback(args.host):
        print(
            f"ctxwright replay: warning: --host {args.host} is not a loopback address: anyone who can reach it can "
            "read the recording through it; listen on 127.0.0.1 unless that is intended",
            file=sys.stderr,
            flush=True,
        )

    def on_call(r: TraceRecord) -> None:
        if r.diverged is not None:
            print(f"ctxwright replay: {r.diverged}", file=sys.stderr, flush=True)
        if not args.quiet:
            where = f"{r.conversation}#{r.position}" if r.conversation is not None else "-"
            print(f"{where} {r.api}{' stream' if r.stream else ''} {r.status}", flush=True)

    stop = threading.Event()
    parent = os.getppid()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        srv = ReplayServer.start(
            golden,
            host=args.host,
            port=args.port,
            on_divergence=args.on_divergence,
            trace=Path(args.trace) if args.trace else None,
            limits=limits,
            max_body=int(args.max_body * 1024 * 1024),
            on_call=on_call,
        )
        with srv:
            calls = sum(len(c.calls) for c in golden.conversations)
            print(f"ctxwright replay on {srv.url}", flush=True)
            print(
                f"  {counted(calls, 'call')} in {counted(len(golden.conversations), 'conversation')} from {golden.source}; "
                f"OpenAI clients: base URL {srv.url}/v1   Anthropic clients: {srv.url}",
                flush=True,
            )
            while not stop.wait(PARENT_POLL_S):
                if os.getppid() != parent:  # the process that started us is gone: so are we
                    break
        print(
            f"ctxwright replay stopped: {counted(len(srv.calls), 'call')} answered, "
            f"{counted(len(srv.divergences), 'divergence')}",
            flush=True,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
