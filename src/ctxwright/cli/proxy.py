"""``ctxwright proxy``: relay an agent's model calls, record them, audit each one live.

``ctxwright proxy`` listens on 127.0.0.1:8787 and relays Anthropic Messages to Anthropic's
API and OpenAI chat completions and Responses to OpenAI's (``--anthropic-upstream``,
``--openai-upstream``; ``--upstream URL`` sends every path to one). Point the agent's base URL
at it (OpenAI clients ``http://127.0.0.1:8787/v1``, Anthropic clients
``http://127.0.0.1:8787``). ``ctxwright proxy --list`` lists the recorded sessions, and
``ctxwright audit --proxy-session ID`` audits one again, offline.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from rich.table import Table
from rich.text import Text

from ctxwright.errors import CtxwrightError

if TYPE_CHECKING:
    from ctxwright.audit.logs import LogItem


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "relay an agent's model calls to its provider, record and audit each one"


def add_proxy_parser(sub: Any) -> None:
    p = sub.add_parser(
        "proxy",
        help=HELP,
        description="An HTTP proxy for OpenAI chat completions, the OpenAI Responses API and Anthropic Messages: "
        "every request and answer is passed on unchanged, recorded in the store, and audited as it completes.",
    )
    add_upstream_arguments(p)
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
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="serve with N processes on one port, all recording into the store (a postgresql:// --db lets "
        "proxies on several hosts share it too; default 1)",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="do not print a line per call (what could not be recorded is said on stderr all the same)",
    )
    add_keep_warm_arguments(p)
    add_compress_argument(p)
    from ctxwright.cli.audit import add_price_options

    add_price_options(p)  # --prices FILE, --price-*: what the line per call prices each call by
    from ctxwright.cli.audit import add_rule_options

    add_rule_options(p)  # --max-tool-tokens N, --keep ITEM: the named rules on the line per call
    from ctxwright.recipe import add_arguments

    add_arguments(p, sections=("telemetry",))  # --otlp, --otlp-content: declared once (recipe/options.py)
    p.add_argument("--list", action="store_true", help="list the recorded proxy sessions and exit")
    p.add_argument("--json", action="store_true", help="with --list: print JSON")
    p.set_defaults(func=cmd_proxy)


def _store(args: argparse.Namespace) -> Any:
    from ctxwright.store.sessions import Store

    return Store(args.db) if getattr(args, "db", None) else Store()


def cmd_proxy(args: argparse.Namespace) -> int:
    from ctxwright.cli.common import console

    if args.list:
        from ctxwright.cli.common import existing_store  # a reader: never creates the store

        return _list(existing_store(args), as_json=args.json)
    from ctxwright.cli.audit import pricing_from_args
    from ctxwright.proxy.limits import ClientLimits
    from ctxwright.proxy.serve import serve
    from ctxwright.proxy.server import ProxyConfig

    _check_numbers(args)
    pricing = pricing_from_args(args)  # a bad --prices file is one line, before anything listens
    upstream, upstreams, notes = proxy_upstreams(args)
    try:
        clients = ClientLimits(args.header_timeout, args.body_timeout, args.max_connections)
        config = ProxyConfig(
            upstream=upstream,
            upstreams=upstreams,
            connect_timeout=args.connect_timeout,
            read_timeout=args.timeout,
            record_cap=int(args.record_cap * 1024 * 1024),
            clients=clients,
            keep_headers=args.keep_warm,  # a refresh needs the client's key: held in memory only
            pricing=pricing,
            compress=args.compress,
            max_tool_tokens=args.max_tool_tokens,
            keep=tuple(args.keep),
        )
    except ValueError as exc:
        raise CtxwrightError(str(exc)) from None
    if args.keep_warm and args.workers != 1:
        raise CtxwrightError("--keep-warm works with one proxy process: leave out --workers (or give --workers 1)")
    warmer = keep_warmer(args, config.clock, printer=print_line)
    tracer = _tracer(args, config.label)  # before anything listens: a missing otel extra is one line
    store = _store(args)
    for note in notes:
        print(f"ctxwright proxy: {note}", file=sys.stderr, flush=True)
    if not is_loopback(args.host):
        print(
            f"ctxwright proxy: warning: --host {args.host} is not a loopback address: anyone who can reach port "
            f"{args.port} can send requests through this proxy to {config.label} and have them recorded (nothing "
            "authenticates the proxy's clients); listen on 127.0.0.1 unless that is intended",
            file=sys.stderr,
            flush=True,
        )
    shown = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{shown}:{args.port}"
    console.print(
        Text(
            f"ctxwright proxy on {base} -> {config.label}, recording to {store.location}\n"
            f"  OpenAI clients: base URL {base}/v1   Anthropic clients: {base}\n"
            "  one line per model call: session #call status time  cause  cached ÷ reusable  $ (lost to the miss)  first divergence"
        )
    )

    if args.workers != 1:
        from ctxwright.proxy.workers import serve_workers

        if tracer is not None:
            tracer.close()  # each worker exports its own spans (a fork does not carry the exporter's thread)
        target = store.target
        store.close()  # each worker opens its own connection, after the fork
        started = serve_workers(
            config,
            target,
            host=args.host,
            port=args.port,
            workers=args.workers,
            quiet=args.quiet,
            make_observer=(lambda: _tracer(args, config.label)) if tracer is not None else None,
        )
        console.print(
            Text(f"ctxwright proxy stopped ({started} worker process(es) in all); recorded in {store.location}")
        )
        return 0
    try:
        recorder = serve(
            config,
            store,
            host=args.host,
            port=args.port,
            printer=None if args.quiet else print_line,
            observer=observers(tracer, warmer.observe if warmer is not None else None),
            on_recorder=warmer.attach if warmer is not None else None,
        )
    finally:
        if warmer is not None:
            warmer.stop()  # the held requests and their headers forgotten
        if tracer is not None:
            tracer.close()  # the last spans sent, within the exporter's bounded close
    console.print(Text(f"ctxwright proxy stopped; {recorder.recorded} exchange(s) recorded in {store.location}"))
    if recorder.unrecorded:  # said whatever --quiet says: these are not in the store
        print(f"ctxwright proxy: {recorder.summary()}", file=sys.stderr, flush=True)
    return 1 if recorder.lost else 0


def print_line(line: str) -> None:
    print(line, flush=True)


def add_upstream_arguments(p: argparse.ArgumentParser, *, agent_env: bool = False) -> None:
    """``--upstream``, ``--anthropic-upstream`` and ``--openai-upstream`` (``proxy/server.py``
    routes by path), for ``proxy`` and ``wrap``. ``agent_env``: the default is first the base
    URL the agent's environment already sets (wrap keeps a gateway or local server where the
    agent's calls went), then the provider's own host."""
    # here, not at the top: the proxy package's reader and tables are no part of another command's start
    from ctxwright.proxy.providers import DEFAULT_UPSTREAMS

    def default(provider: str, variable: str) -> str:
        host = DEFAULT_UPSTREAMS[provider]
        return f"the agent's {variable} if set, else {host}" if agent_env else host

    p.add_argument(
        "--upstream",
        metavar="URL",
        help="one upstream for every path, e.g. a local server or a gateway (default: each provider's own, below)",
    )
    p.add_argument(
        "--anthropic-upstream",
        metavar="URL",
        help=f"where Anthropic Messages (/v1/messages...) go (default: {default('anthropic', 'ANTHROPIC_BASE_URL')})",
    )
    p.add_argument(
        "--openai-upstream",
        metavar="URL",
        help="where every other path -- OpenAI chat completions, Responses -- goes "
        f"(default: {default('openai', 'OPENAI_BASE_URL')})",
    )


def add_compress_argument(p: argparse.ArgumentParser) -> None:
    """``--compress`` (``proxy/compress.py``), for ``proxy`` and ``wrap``."""
    p.add_argument(
        "--compress",
        action="store_true",
        help="send each tool result compressed (a JSON listing as a table, a repeated output as a reference plus "
        "what differs, a log's repeated lines folded), nothing dropped; compressed once, the same bytes on every "
        "later request (kept in the store), the original kept on disk and named in the result",
    )


def add_keep_warm_arguments(p: argparse.ArgumentParser) -> None:
    """``--keep-warm`` and its bounds (``proxy/keep_warm.py``), for ``proxy`` and ``wrap``."""
    p.add_argument(
        "--keep-warm",
        action="store_true",
        help="while an Anthropic session is idle, refresh its cached prefix shortly before the cache expires "
        "(its last request re-sent with max_tokens 1), when the price table says that costs less than "
        "rewriting the prefix; each refresh priced, recorded and announced (the client's key is held in memory "
        "for it, never stored)",
    )
    p.add_argument(
        "--keep-warm-max",
        type=int,
        default=None,
        metavar="N",
        help="with --keep-warm: at most N refreshes per session (default 6)",
    )
    p.add_argument(
        "--keep-warm-idle",
        type=float,
        default=None,
        metavar="MIN",
        help="with --keep-warm: never keep a session warm past MIN minutes idle (default 30)",
    )


def keep_warmer(args: argparse.Namespace, clock: Callable[[], float], *, printer: Callable[[str], None]) -> Any:
    """The :class:`~ctxwright.proxy.keep_warm.KeepWarmer` ``--keep-warm`` asks for (started),
    else ``None``; bounds outside their range are refused in one line."""
    bounds = keep_warm_bounds(args)
    if bounds is None:
        return None
    from ctxwright.proxy.keep_warm import KeepWarmer

    most, idle_s = bounds
    pricing = None
    if hasattr(args, "price_input"):  # the command takes --prices / --price-* (wrap does)
        from ctxwright.cli.audit import pricing_from_args

        pricing = pricing_from_args(args)
    warmer = KeepWarmer(clock=clock, pricing=pricing, printer=printer, max_refreshes=most, max_idle_s=idle_s)
    return warmer.start()


def keep_warm_bounds(args: argparse.Namespace) -> tuple[int, float] | None:
    """``--keep-warm``'s refreshes per session and longest idle time in seconds (``None``: not
    asked for), each refused in one line outside its range."""
    if not getattr(args, "keep_warm", False):
        return None
    from ctxwright.proxy.keep_warm import MAX_IDLE_S, MAX_REFRESHES

    most = MAX_REFRESHES if args.keep_warm_max is None else args.keep_warm_max
    idle_min = MAX_IDLE_S / 60 if args.keep_warm_idle is None else args.keep_warm_idle
    if not 1 <= most <= 1000:
        raise CtxwrightError(f"--keep-warm-max {most}: give a number of refreshes from 1 to 1000, e.g. 6")
    if not (0 < idle_min <= 24 * 60 and math.isfinite(idle_min)):
        raise CtxwrightError(f"--keep-warm-idle {idle_min:g}: give minutes above 0, at most a day, e.g. 30")
    return most, idle_min * 60


def observers(*each: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One observer of recorded calls calling each given one in turn (``None``: none given)."""
    given = [o for o in each if o is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def both(recorded: Any) -> None:
        for o in given:
            o(recorded)

    return both


def _tracer(args: argparse.Namespace, upstream: str) -> Any:
    """``--otlp``: a span per recorded model call (``telemetry/exchanges.py``), else ``None``."""
    from ctxwright.recipe import Recipe, backend_defaults, given_from_args

    telemetry = Recipe.resolve(given_from_args(args), None, backend_defaults("openai")).telemetry
    if telemetry.otlp is None:
        return None
    from ctxwright.telemetry import open_exporter
    from ctxwright.telemetry.exchanges import ExchangeTracer

    exporter = open_exporter(telemetry)
    assert exporter is not None
    return ExchangeTracer(exporter, upstream=upstream, content=telemetry.content)


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse, in one line each, the values the relay cannot work with: a port outside TCP's
    range (the socket would raise ``OverflowError``), a timeout that is not a positive, finite
    number of seconds (calls to the upstream would fail at once, or never time out), a negative
    or infinite recording cap, a number of workers no machine runs."""
    from ctxwright.proxy.workers import MAX_WORKERS

    if not 1 <= args.workers <= MAX_WORKERS:
        raise CtxwrightError(f"--workers {args.workers}: give a number of processes from 1 to {MAX_WORKERS}")
    if not 1 <= args.port <= 65535:
        raise CtxwrightError(f"--port {args.port}: give a TCP port from 1 to 65535 (default 8787)")
    for flag, value in (("--timeout", args.timeout), ("--connect-timeout", args.connect_timeout)):
        if not (value > 0 and math.isfinite(value)):
            raise CtxwrightError(f"{flag} {value:g}: give a number of seconds above 0, e.g. {flag} 600")
    if not (args.record_cap >= 0 and math.isfinite(args.record_cap)):
        raise CtxwrightError(
            f"--record-cap {args.record_cap:g}: give a size in MB of 0 or more (0 records sizes and hashes only), "
            "e.g. --record-cap 32"
        )


def proxy_upstreams(args: argparse.Namespace) -> tuple[str | None, dict[str, str], list[str]]:
    """``ProxyConfig``'s ``upstream`` and ``upstreams`` from the flags, and the notes to say.

    ``--upstream`` alone sends every path to one place (a local server, a gateway); each
    ``--PROVIDER-upstream`` given routes that provider's paths to its own; with none given, each
    provider's official host (:data:`DEFAULT_UPSTREAMS`), so one proxy serves Claude Code and
    Codex at once. Each URL is taken as :func:`upstream_origin` takes it."""
    from ctxwright.proxy.providers import DEFAULT_UPSTREAMS, PROVIDERS

    notes: list[str] = []
    upstream: str | None = None
    if args.upstream:
        upstream, note = upstream_origin(args.upstream)
        notes += [note] if note else []
    upstreams: dict[str, str] = {}
    for provider in PROVIDERS:
        given = getattr(args, f"{provider}_upstream", None)
        if given:
            upstreams[provider], note = upstream_origin(given, f"--{provider}-upstream")
            notes += [note] if note else []
        elif upstream is None:
            upstreams[provider] = DEFAULT_UPSTREAMS[provider]
    return upstream, upstreams, notes


def upstream_origin(url: str, flag: str = "--upstream") -> tuple[str, str | None]:
    """The upstream to forward to, and a note when it is not ``url`` as given.

    The client's path is forwarded whole (``/v1/chat/completions``), after the upstream's own
    path. An upstream given as the base URL a client would use -- ``http://host:8080/v1``,
    ``https://openrouter.ai/api/v1`` -- would make every call ``/v1/v1/...``, a 404; its
    trailing ``/v1`` is dropped, with a note saying so. An upstream naming a model endpoint
    (``.../chat/completions``) is refused: no path can follow it.
    """
    from ctxwright.proxy.log import API_SUFFIXES

    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return url, None  # not a URL of ours: ProxyConfig refuses it in its own words
    path = parts.path.rstrip("/")
    if any(path.lower().endswith(suffix) for suffix, _api in API_SUFFIXES):
        origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        raise CtxwrightError(
            f"{flag} {url} names a model endpoint; give the provider's origin, e.g. {flag} {origin} "
            "(each client's path, such as /v1/chat/completions, is forwarded after it)"
        )
    if not path.lower().endswith("/v1"):
        return url, None
    base = urlunsplit((parts.scheme, parts.netloc, path[:-3], parts.query, parts.fragment))
    return base, (
        f"{flag} {url} ends in /v1, the path clients send themselves: forwarding to {base}, so "
        f"/v1/chat/completions goes to {base}/v1/chat/completions"
    )


def is_loopback(host: str) -> bool:
    """True when ``host`` is reachable from this machine only (127.0.0.0/8, ::1, a name that
    resolves only to those); a name that does not resolve counts as loopback (binding to it
    fails with its own message)."""
    bare = host.strip().strip("[]")
    if not bare:
        return False  # the empty host listens on every interface
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(bare, None)
    except (OSError, UnicodeError):
        return True
    return all(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback for info in infos)


def _list(store: Any, *, as_json: bool) -> int:
    from ctxwright.cli.common import console, id_column
    from ctxwright.proxy.log import proxy_sessions

    rows = proxy_sessions(store)
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    t = Table(title=Text(f"proxy sessions in {store.location}"))
    id_column(t, [r["id"] for r in rows])
    for c in ("started", "last call", "calls", "grouped by", "api", "upstream"):
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


def audit_proxy_session(args: argparse.Namespace, run: Callable[[Iterator[LogItem], str], int]) -> int:
    """``ctxwright audit --proxy-session ID``: the session's stored calls audited as the proxy
    audited them live (``proxy/session_audit.py``), printed by the code that prints the audit
    of a log file (``run(items, source)`` is ``cli/audit.audit_items``)."""
    from ctxwright.cli.common import existing_store  # a reader: never creates the store
    from ctxwright.proxy.log import proxy_session_requests
    from ctxwright.proxy.session_audit import session_items
    from ctxwright.proxy.store import ProxyLog

    store = existing_store(args)
    sid = str(ProxyLog(store).session_row(args.proxy_session)["id"])
    records = proxy_session_requests(store, sid)
    if not records:
        print(f"ctxwright audit: proxy session {args.proxy_session} has no model calls", file=sys.stderr)
        return 2
    return run(session_items(records, sid), f"proxy session {sid}")
