"""``ctxwright proxy``: relay an agent's model calls, record them, audit each one live.

``ctxwright proxy --upstream https://api.openai.com`` listens on 127.0.0.1:8787; point the
agent's base URL at it (OpenAI clients ``http://127.0.0.1:8787/v1``, Anthropic clients
``http://127.0.0.1:8787``). ``ctxwright proxy --list`` lists the recorded sessions, and
``ctxwright audit --proxy-session ID`` audits one again, offline.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from typing import Any

from rich.table import Table
from rich.text import Text

from ctxwright.errors import CtxwrightError


def add_proxy_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help="relay an agent's model calls to its provider, record and audit each one",
        description="An HTTP proxy for OpenAI chat completions, the OpenAI Responses API and Anthropic Messages: "
        "every request and answer is passed on unchanged, recorded in the store, and audited as it completes.",
    )
    p.add_argument("--upstream", metavar="URL", help="the provider's origin, e.g. https://api.openai.com")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787)")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="longest silence from the upstream, before or during an answer (default 600 s)",
    )
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S", help="default 10 s")
    p.add_argument(
        "--record-cap",
        type=float,
        default=32.0,
        metavar="MB",
        help="bodies larger than this are relayed whole but recorded as size and hash only (default 32)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="a client's request head must be complete within this, or its connection is closed (default 20 s)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="longest silence in a client's request body before a 408 (default 60 s)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=256,
        metavar="N",
        help="open client connections served at once; past it new requests get a 503 (default 256)",
    )
    p.add_argument("--quiet", action="store_true", help="do not print a line per call")
    p.add_argument("--list", action="store_true", help="list the recorded proxy sessions and exit")
    p.add_argument("--json", action="store_true", help="with --list: print JSON")
    p.set_defaults(func=cmd_proxy)


def _store(args: argparse.Namespace) -> Any:
    from ctxwright.store.sessions import Store

    return Store(args.db) if getattr(args, "db", None) else Store()


def cmd_proxy(args: argparse.Namespace) -> int:
    from ctxwright.cli.main import console

    if args.list:
        return _list(_store(args), as_json=args.json)
    if not args.upstream:
        raise CtxwrightError("give the provider's origin: ctxwright proxy --upstream https://api.openai.com")
    from ctxwright.proxy.limits import ClientLimits
    from ctxwright.proxy.serve import serve
    from ctxwright.proxy.server import ProxyConfig

    try:
        clients = ClientLimits(args.header_timeout, args.body_timeout, args.max_connections)
        config = ProxyConfig(
            upstream=args.upstream,
            connect_timeout=args.connect_timeout,
            read_timeout=args.timeout,
            record_cap=int(args.record_cap * 1024 * 1024),
            clients=clients,
        )
    except ValueError as exc:
        raise CtxwrightError(str(exc)) from None
    store = _store(args)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{shown}:{args.port}"
    console.print(
        Text(
            f"ctxwright proxy on {base} -> {args.upstream}, recording to {store.path}\n"
            f"  OpenAI clients: base URL {base}/v1   Anthropic clients: {base}\n"
            "  one line per model call: session #call status time  cause  cached ÷ reusable  first divergence"
        )
    )

    def out(line: str) -> None:
        print(line, flush=True)

    recorder = serve(config, store, host=args.host, port=args.port, printer=(lambda _l: None) if args.quiet else out)
    console.print(Text(f"ctxwright proxy stopped; {recorder.recorded} exchange(s) recorded in {store.path}"))
    return 0


def _list(store: Any, *, as_json: bool) -> int:
    from ctxwright.cli.main import console
    from ctxwright.proxy.log import proxy_sessions

    rows = proxy_sessions(store)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    t = Table(title=Text(f"proxy sessions in {store.path}"))
    for c in ("id", "started", "last call", "calls", "grouped by", "api", "upstream"):
        t.add_column(c)
    for r in rows:
        last = time.strftime("%H:%M:%S", time.localtime(r["last_at"])) if r["last_at"] else ""
        how = r["grouped_by"] + (f" {r['group_key'][:24]}" if r["group_key"] else "")
        t.add_row(
            Text(r["id"]),
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["created_at"])),
            last,
            str(r["calls"]),
            Text(how),
            Text(r["api"] or ""),
            Text(r["upstream"]),
        )
    console.print(t)
    return 0


def audit_proxy_session(args: argparse.Namespace, run: Any) -> int:
    """``ctxwright audit --proxy-session ID``: the session's records as a request log, audited
    by the same code as a log file (``run`` is ``cli/audit.run_audit``)."""
    from ctxwright.proxy.log import proxy_session_requests

    records = proxy_session_requests(_store(args), args.proxy_session)
    if not records:
        print(f"ctxwright audit: proxy session {args.proxy_session} has no model calls", file=sys.stderr)
        return 2
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as f:
        for r in records:
            f.write(json.dumps({"request": r["request"], "response": r["response"]}, ensure_ascii=False).encode())
            f.write(b"\n")
        f.flush()
        return int(run(f.name))
