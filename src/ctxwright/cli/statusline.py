"""``ctxwright statusline``: one line for Claude Code's status bar, or any shell prompt -- this
session's cache hit ratio, $ so far, $ lost to cache misses, the time until the cache expires,
and the tokens left in the context window.

Where the line comes from, first found wins:

1. ``--session ID``: a proxied or framework session in the store;
2. Claude Code's ``statusLine`` command input: Claude Code runs the command after each message
   with a JSON object on stdin -- ``session_id``, ``transcript_path``, ``cwd``, ``model``
   (``id``, ``display_name``), ``workspace``, ``cost``, ``context_window``
   (``context_window_size``, ``current_usage`` with ``input_tokens``,
   ``cache_creation_input_tokens``, ``cache_read_input_tokens``) -- and shows the first line
   of its stdout (code.claude.com/docs/en/statusline, formerly
   docs.anthropic.com/en/docs/claude-code/statusline: "updates run at most every 300 ms"; an
   empty output or a failing command leaves the bar blank). The transcript at
   ``transcript_path`` is read by ``agent_logs.summarise`` (the one reader of Claude Code's
   logs), priced by the price table;
3. ``--transcript PATH``: the same, for a shell prompt;
4. a running ``ctxwright wrap`` (``CTXWRIGHT_WRAP_LOG`` in the environment names its log of
   per-call lines, ``cli/wrap.py``): the session of its latest line;
5. the store's proxy session with the latest call.

What it protects: **a status line never fails.** It runs after every message, so a traceback
or nothing at all would be in front of the user all day: any input -- no stdin, bad JSON, a
transcript that is missing or half-written, a store that is away -- gives one short line and
exit 0. And it is **fast**: only what the chosen source needs is imported, nothing of the
models, the compaction or ``rich`` (``cli/main.py`` sends ``ctxwright statusline`` here before
it builds its parser); ``benchmarks/statusline.py`` measures it.

The cache expires ``ttl`` after the last call that used it: 5 minutes, or 1 hour where the
requests asked for 1-hour writes (Anthropic's prompt caching; ``agent_logs`` reads the logged
1-hour writes). The context left is the model's window (Claude Code's ``context_window_size``)
less the last call's context (its input, cache-write and cache-read tokens). Claude Code
compacts automatically before the window is full, at a threshold it does not document, so the
figure is tokens to the window, not to the compaction; without a window size it is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from ctxwright.cache.prices import Pricing
    from ctxwright.store.sessions import Store

#: the most of stdin read (Claude Code's object is a few kB)
MAX_STDIN = 1024 * 1024
#: how long stdin may take to arrive and end (Claude Code writes it at once and closes it)
STDIN_WAIT_S = 1.0
#: the tail of a wrap log searched for its latest per-call line
WRAP_TAIL = 256 * 1024
#: a per-call line of the proxy (``proxy/recorder.py: format_line``): ``SESSION #N ...``
_CALL_LINE = re.compile(r"^(\S+) #\d+ ")


@dataclass(frozen=True)
class Status:
    """What the line says; ``None``: not known, left out."""

    calls: int
    hit_ratio: float | None = None
    spent_usd: float | None = None
    lost_usd: float | None = None
    expires_at: float | None = None
    context_left: int | None = None


def _usd(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:.4f}"


def _span(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _tokens(n: int) -> str:
    return f"{n / 1000:.0f}k" if n >= 10_000 else f"{n:,}"


def render(st: Status, now: float) -> str:
    """The one line: ``ctxwright hit 87% · $1.23 · lost $0.40 · cache 3m12s · 45k to window``."""
    parts = [f"hit {st.hit_ratio:.0%}" if st.hit_ratio is not None else f"{st.calls} call(s)"]
    if st.spent_usd is not None:
        parts.append(_usd(st.spent_usd))
    if st.lost_usd is not None and st.lost_usd >= 0.00005:
        parts.append(f"lost {_usd(st.lost_usd)}")
    if st.expires_at is not None:
        left = st.expires_at - now
        parts.append(f"cache {_span(left)}" if left > 0 else "cache expired")
    if st.context_left is not None:
        parts.append(f"{_tokens(max(0, st.context_left))} to window")
    return "ctxwright " + " · ".join(parts)


# -- the sources ---------------------------------------------------------------------------------
def read_stdin(stream: BinaryIO | None, wait_s: float = STDIN_WAIT_S) -> dict[str, Any] | None:
    """Claude Code's JSON object, or ``None``: no stdin, a terminal (a shell prompt), nothing
    within ``wait_s``, more than :data:`MAX_STDIN`, or not a JSON object. Never blocks longer
    than ``wait_s``, whatever holds the other end of the pipe."""
    if stream is None:
        return None
    try:
        if stream.isatty():
            return None
        fd = stream.fileno()
    except (OSError, ValueError):
        return None
    data = b""
    deadline = time.monotonic() + wait_s
    while len(data) <= MAX_STDIN:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
        except (OSError, ValueError):
            return None
        if not chunk:
            break
        data += chunk
    else:
        return None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def context_left(payload: dict[str, Any] | None, last_context: int | None) -> int | None:
    """The window less the last call's context: the window from Claude Code's
    ``context_window.context_window_size``, the context from its ``current_usage`` (else the
    transcript's last call); ``None`` without a window size."""
    cw = payload.get("context_window") if payload else None
    if not isinstance(cw, dict):
        return None
    size = _int(cw.get("context_window_size"))
    if not size:
        return None
    usage = cw.get("current_usage")
    if isinstance(usage, dict):
        keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        used = sum(_int(usage.get(k)) or 0 for k in keys)
        if used:
            last_context = used
    return None if last_context is None else size - last_context


def from_transcript(path: str, pricing: Pricing | None, payload: dict[str, Any] | None) -> Status | str:
    """The session of a Claude Code transcript (``agent_logs.summarise``), or what is wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        return "no transcript yet"
    from ctxwright.agent_logs import summarise

    try:
        s = summarise(p, pricing)
    except OSError as exc:
        return f"transcript unreadable ({exc.strerror or type(exc).__name__})"
    if s is None:
        return "no model call yet"
    return Status(
        calls=s.calls,
        hit_ratio=s.hit_ratio,
        spent_usd=s.spent_usd,
        lost_usd=s.lost_usd,
        expires_at=s.expires_at,
        context_left=context_left(payload, s.last_context_tokens),
    )


def from_proxy(store: Store, session_id: str, pricing: Pricing | None) -> Status:
    """A proxied (or framework) session from the store: each call's usage as the provider
    reported it, priced as the proxy's line prices it (``audit/compare.py: row_cost``); the
    hit ratio Σcached ÷ Σprompt over the agent's calls (keep-warm refreshes are paid for, so
    counted in $, not in the ratio); the cache's expiry from the last call's time and TTL."""
    from ctxwright.audit.compare import AuditRequest, AuditRow, cache_ratios, row_cost
    from ctxwright.audit.logs import read_records
    from ctxwright.cache.prices import Pricing
    from ctxwright.proxy.log import proxy_session_requests

    pr = pricing if pricing is not None else Pricing()
    records = proxy_session_requests(store, session_id)
    calls = cached = prompt = priced = previous = 0
    spent = lost = 0.0
    expires: float | None = None
    for rec, item in zip(records, read_records(records), strict=False):
        meta = rec.get("proxy") or {}
        audit = meta.get("audit") or {}
        if not isinstance(item, AuditRequest):
            continue
        refresh = audit.get("keep_warm") is True
        if not refresh:
            calls += 1
            if item.cached_tokens is not None and item.prompt_tokens:
                cached += item.cached_tokens
                prompt += item.prompt_tokens
        row = AuditRow(
            index=0,
            prompt_tokens=item.prompt_tokens or 0,
            reusable_prefix_tokens=int(audit.get("reusable_prefix_tokens") or 0),
            reusable_prefix_bytes=0,
            cached_tokens=item.cached_tokens,
            first_divergence=None,
            cause=str(audit.get("cause") or ""),
            completion_tokens=item.completion_tokens,
            usage_split=item.usage_split,
            provider=item.provider,
            model=item.model,
            previous_prompt_tokens=previous,
        )
        if not refresh:
            previous = item.prompt_tokens or 0
        cost = row_cost(row, pr) if (meta.get("status") or 0) < 400 else None
        if cost is not None:
            priced += 1
            spent += cost.cost
            lost += 0.0 if refresh else cost.lost
        cache = audit.get("cache")
        ttl = cache.get("ttl_s") if isinstance(cache, dict) else None
        at = meta.get("started_at")
        if isinstance(ttl, int | float) and isinstance(at, int | float):
            expires = float(at) + float(ttl)
    ratio = cache_ratios(cached, prompt, 0)[0]
    return Status(
        calls=calls,
        hit_ratio=ratio,
        spent_usd=spent if priced else None,
        lost_usd=lost if priced else None,
        expires_at=expires,
    )


def wrap_session(log: str) -> str | None:
    """The session of the latest per-call line in a ``ctxwright wrap`` log, or ``None``."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - WRAP_TAIL))
            tail = f.read(WRAP_TAIL).decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        m = _CALL_LINE.match(line)
        if m:
            return m.group(1)
    return None


def latest_proxy_session(store: Store) -> str | None:
    """The proxy or framework session whose latest call is the latest."""
    from ctxwright.proxy.log import proxy_sessions

    rows = [r for r in proxy_sessions(store) if r.get("calls")]
    if not rows:
        return None
    return str(max(rows, key=lambda r: r.get("last_at") or r.get("created_at") or 0)["id"])


def _open_store(db: str | None) -> Store | str:
    from ctxwright.errors import CtxwrightError
    from ctxwright.store.sessions import Store

    try:
        return Store.existing(db)
    except CtxwrightError:
        return "no store yet"


def _from_store(db: str | None, session: str | None, pricing: Pricing | None) -> Status | str:
    from ctxwright.errors import CtxwrightError

    store = _open_store(db)
    if isinstance(store, str):
        return store
    try:
        sid = session or latest_proxy_session(store)
        if sid is None:
            return "no proxied session yet"
        from ctxwright.proxy.store import ProxyLog

        try:
            sid = str(ProxyLog(store).session_row(sid)["id"])
        except CtxwrightError:
            return f"no session {sid[:40]}"
        return from_proxy(store, sid, pricing)
    finally:
        store.close()


def status_line(args: argparse.Namespace, stdin: BinaryIO | None, now: float | None = None) -> str:
    """The line for ``args`` and what stdin holds (see the module docstring for the order)."""
    pricing = None
    if args.prices:
        from ctxwright.cache.prices import pricing_of

        pricing = pricing_of(args.prices)
    payload = None if args.session else read_stdin(stdin)
    got: Status | str
    transcript = args.transcript or (payload or {}).get("transcript_path")
    if args.session:
        got = _from_store(args.db, args.session, pricing)
    elif isinstance(transcript, str) and transcript:
        got = from_transcript(transcript, pricing, payload)
    elif os.environ.get("CTXWRIGHT_WRAP_LOG"):  # inside `ctxwright wrap`: its session, never an older one
        sid = wrap_session(os.environ["CTXWRIGHT_WRAP_LOG"])
        got = "no model call yet" if sid is None else _from_store(args.db, sid, pricing)
    else:
        got = _from_store(args.db, None, pricing)
    if isinstance(got, str):
        return f"ctxwright: {got}"
    return render(got, time.time() if now is None else now)


#: the command's line in ``ctxwright --help``: cli/main.py lists it without building the parser
HELP = "one line for Claude Code's status bar or a shell prompt: hit ratio, $ spent and lost, cache expiry"


def add_statusline_parser(sub: Any) -> None:
    p = sub.add_parser(
        "statusline",
        help=HELP,
        description="Prints one line: this session's cache hit ratio, $ so far, $ lost to cache misses, the time "
        "until the cache expires and the tokens left in the context window. Set it as Claude Code's statusLine "
        'command ({"statusLine": {"type": "command", "command": "ctxwright statusline"}}): the session is read from '
        "the transcript Claude Code names on stdin. Without stdin: a running `ctxwright wrap`'s session, else the "
        "store's latest proxied session.",
    )
    add_statusline_arguments(p)
    p.set_defaults(func=cmd_statusline)


def add_statusline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--session", metavar="ID", help="a proxied or framework session in the store")
    p.add_argument("--transcript", metavar="PATH", help="a Claude Code transcript (.jsonl), for a shell prompt")
    p.add_argument("--prices", metavar="FILE", help="a TOML prices file laid over the built-in price table")


def cmd_statusline(args: argparse.Namespace) -> int:
    """Print the line; whatever goes wrong is said in it, never raised (exit 0)."""
    try:
        line = status_line(args, getattr(sys.stdin, "buffer", None))
    except Exception as exc:  # a status line must never show a traceback, nor nothing
        line = f"ctxwright: status unavailable ({type(exc).__name__})"
    print(line.replace("\n", " "), flush=True)
    return 0


def main(argv: list[str]) -> int:
    """``ctxwright statusline ...`` without the CLI's full parser (every command's flags and
    the modules they import): what ``cli/main.py`` calls first for this command."""
    parser = argparse.ArgumentParser(prog="ctxwright statusline", add_help=True)
    add_statusline_arguments(parser)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args, _unknown = parser.parse_known_args(argv)  # an unknown flag never blanks the status bar
    return cmd_statusline(args)


__all__ = [
    "Status",
    "add_statusline_parser",
    "cmd_statusline",
    "context_left",
    "from_proxy",
    "from_transcript",
    "main",
    "read_stdin",
    "render",
    "status_line",
    "wrap_session",
]
