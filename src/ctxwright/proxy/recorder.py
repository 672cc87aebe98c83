"""Recording and auditing each relayed exchange, on a thread of its own.

Why a thread: the relay runs on one event loop, and anything slow there (an SQLite commit,
decoding a large body, hashing a long history) delays every other client's bytes. The loop
only queues the finished exchange (:meth:`Recorder.submit`, a lock-free append); this
thread decodes it, places it in a session (``proxy/sessions.py``), audits it as
``ctxwright audit --proxy-session`` audits the stored session (``proxy/session_audit.py``:
one computation, so the printed line and the offline audit agree), writes one row, and
prints one line. One writer keeps the session placement and the audit in arrival order.
Calls are written one by one as they arrive, each in one transaction with the chain ends that
place later calls in its session (WAL); a served proxy sends the end of
each answer only once its row is written (``proxy/serve.py``), so a crash loses only the
exchanges in flight, and closing the recorder drains the queue first.

What the store refuses is kept, not dropped (:class:`Recorder`): in this process's recovery
file (``store/recovery.py``), recorded in order once the store answers again, or by the next
recorder that opens the store. A call's number in its session is taken in the transaction that
writes its row (``ProxyLog.record_call``): a write that fails takes no number, and another proxy
process recording into the same store never takes the same number.

An ``observer`` (``telemetry/exchanges.py``: a span per relayed call) is handed each model call
once its row is written, on this thread: what it does can neither slow the relay nor lose a
row, and an observer that raises is reported once and skipped.
"""

from __future__ import annotations

import asyncio
import base64
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwright.audit.compare import TOKEN_MEMO, AuditRequest, AuditRow, cost_text, row_cost
from ctxwright.audit.live import audit_record
from ctxwright.audit.logs import ParseProblem, RecordReader
from ctxwright.audit.provider_log import QUIET, describe
from ctxwright.audit.rules import Finding, RuleRunner, Settings
from ctxwright.cache.expiry import KEEP_WARM
from ctxwright.cache.prices import Pricing
from ctxwright.core.redact import redact, redact_query
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import StoreUnusable
from ctxwright.proxy.compress import summary_text
from ctxwright.proxy.decode import decode_body
from ctxwright.proxy.log import api_of, is_event_stream, sse_events
from ctxwright.proxy.server import Capture, Exchange
from ctxwright.proxy.session_audit import LIVE_SESSIONS, LiveAudits
from ctxwright.proxy.sessions import SessionPlacer
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.recovery import Spool, claim_spools
from ctxwright.store.sessions import Store, recovery_dir_for, spool_store

MIB = 1024 * 1024
#: exchanges waiting for the recorder past which new requests wait before they are relayed
BACKLOG_LIMIT = 256
#: bytes of captured bodies waiting for the recorder past which new requests wait
BACKLOG_BYTES = 256 * MIB
#: the backlog from which the recorder counts as behind the relay (a warning on stderr)
BEHIND_AT = 32
#: seconds between two warnings of one kind
WARN_EVERY_S = 10.0
#: seconds before a store that failed is tried again, doubling up to RETRY_MAX_S
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0
#: how often a request held by a full backlog looks again
ADMIT_POLL_S = 0.01


def _json(data: bytes | bytearray | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


def _response_id(value: Any) -> str | None:
    """The id of a Responses API answer (a body, or a stream's ``response.*`` events)."""
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        return str(value["id"])
    if isinstance(value, list):
        for ev in value:
            inner = ev.get("response") if isinstance(ev, dict) else None
            if isinstance(inner, dict) and isinstance(inner.get("id"), str):
                return str(inner["id"])
    return None


def _plain(which: str, capture: Capture, encoding: str | None) -> tuple[bytes | None, str | None]:
    """A captured body without its ``Content-Encoding``, decoded within the same cap as the
    wire bytes (a small compressed body may expand without limit), and what kept it from the
    recording, if anything."""
    if capture.data is None:
        return None, f"{which} body over the recording cap"
    decoded = decode_body(capture.data, encoding, capture.cap)
    if decoded.over_cap:
        return None, f"{which} body's decoded size over the recording cap ({capture.cap:,} bytes)"
    return decoded.data, None


def format_line(
    session_id: str,
    call_index: int,
    ex: Exchange,
    row: AuditRow | None,
    problem: str | None,
    cache: Mapping[str, Any] | None = None,
    money: str | None = None,
    findings: Sequence[Finding] = (),
) -> str:
    """The one printed line of a model call: session, call, status, cause, cached ÷ reusable
    tokens, what it cost and what its miss lost (``money``: ``audit/compare.py``'s
    ``cost_text``), the first divergence, the provider's cache verdict when it is a miss, and
    each named rule that fired (``audit/rules/``: its name, where, and its fix).
    No header, no body text beyond the divergence snippet."""
    head = f"{session_id} #{call_index:<3} {ex.status or '---'} {ex.total_ms or 0:7.0f} ms"
    if ex.outcome != "complete":
        head += f" [{ex.outcome}]"
    if row is None:
        return f"{head}  not audited: {problem}"
    cached = "?" if row.cached_tokens is None else f"{row.cached_tokens:,}"
    line = f"{head}  {row.cause:<15} cached {cached} ÷ reusable {row.reusable_prefix_tokens:,} tok"
    if money:
        line += f"  {money}"
    d = row.first_divergence
    if d is not None:
        where = "tools" if d.message_index is None else f"msg#{d.message_index}"
        snippet = f"{d.before[-20:]}|{d.after[:20]}".replace("\n", "⏎")
        line += f"  at {where} {d.field} @{d.byte_offset}: …{snippet}…"
    if cache is not None and cache.get("cause") not in QUIET:
        line += f"  provider cache: {describe(cache)}"
    for f in findings:
        line += f"  [{f.rule}] {f.line} (fix: {f.fix})".replace("\n", "⏎")
    return line


@dataclass(frozen=True)
class RecordedExchange:
    """One relayed model call as recorded, for an observer: its ids, the exchange, the decoded
    request body and answer (a body, or a stream's events), and the audit stored with it."""

    row_id: int
    session_id: str
    call_index: int
    api: str | None
    exchange: Exchange
    request: dict[str, Any]
    response: Any
    audit: dict[str, Any]
    streamed: bool


class Warnings:
    """Lines for stderr, at most one of a kind every ``every`` seconds: a store that is down
    fails every exchange, and a line per exchange would bury the terminal (and, mixed into
    the per-call lines, the output). The lines held back are counted and said with the next
    line of their kind, or by :meth:`flush`."""

    def __init__(self, out: Callable[[str], None], every: float = WARN_EVERY_S) -> None:
        self.out = out
        self.every = every
        self._last: dict[str, float] = {}
        self._held: dict[str, tuple[int, str]] = {}
        self._lock = threading.Lock()

    def say(self, kind: str, line: str) -> None:
        with self._lock:
            now = time.monotonic()
            last = self._last.get(kind)
            if last is not None and now - last < self.every:
                n, _ = self._held.get(kind, (0, line))
                self._held[kind] = (n + 1, line)
                return
            self._last[kind] = now
            held = self._held.pop(kind, None)
        if held is not None:
            line += f" ({held[0]} more like it in the last {self.every:g} s)"
        self.out(line)

    def flush(self) -> None:
        with self._lock:
            held, self._held = self._held, {}
        for n, line in held.values():
            self.out(f"{line} ({n} more like it)")


def stderr_line(line: str) -> None:
    """One line on stderr in one write: ``--workers`` processes share the stream, and
    ``print`` writes the newline apart, so two workers' lines would run into each other."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _bytes(ex: Exchange) -> int:
    """What an exchange waiting for the recorder holds in memory: its captured bodies."""
    return len(ex.request.data or b"") + len(ex.response.data or b"")


def _body(c: Capture) -> dict[str, Any]:
    data = None if c.data is None else base64.b64encode(bytes(c.data)).decode("ascii")
    return {"cap": c.cap, "data": data, "size": c.size, "sha256": c.hexdigest()}


def _capture(d: Mapping[str, Any]) -> Capture:
    data = d.get("data")
    raw = None if data is None else base64.b64decode(str(data))
    return Capture.restored(int(d["cap"]), raw, int(d["size"]), str(d["sha256"]))


def exchange_record(ex: Exchange) -> dict[str, Any]:
    """An exchange as a spool line (``store/recovery.py``: :class:`Spool`): bodies as base64,
    the path's and the error's credentials masked as the store masks them (no header is
    captured at all)."""
    return {
        "type": "proxy_exchange",
        "method": ex.method,
        "path": redact_query(ex.path),
        "started_at": ex.started_at,
        "ended_at": ex.ended_at,
        "request": _body(ex.request),
        "request_content_type": ex.request_content_type,
        "request_encoding": ex.request_encoding,
        "session_header": ex.session_header,
        "response": _body(ex.response),
        "status": ex.status,
        "response_content_type": ex.response_content_type,
        "response_encoding": ex.response_encoding,
        "outcome": ex.outcome,
        "error": None if ex.error is None else redact(ex.error),
        "ttfb_ms": ex.ttfb_ms,
        "total_ms": ex.total_ms,
        "upstream": None if ex.upstream is None else redact(ex.upstream),
        "keep_warm": ex.keep_warm,
        "compression": ex.compression,
    }


def exchange_from_record(rec: Mapping[str, Any]) -> Exchange:
    """The exchange of a spool line (:func:`exchange_record`)."""
    return Exchange(
        method=str(rec["method"]),
        path=str(rec["path"]),
        started_at=float(rec["started_at"]),
        t0=0.0,
        request=_capture(rec["request"]),
        request_content_type=rec.get("request_content_type"),
        request_encoding=rec.get("request_encoding"),
        session_header=rec.get("session_header"),
        response=_capture(rec["response"]),
        status=rec.get("status"),
        response_content_type=rec.get("response_content_type"),
        response_encoding=rec.get("response_encoding"),
        outcome=str(rec.get("outcome") or "complete"),
        error=rec.get("error"),
        ttfb_ms=rec.get("ttfb_ms"),
        total_ms=rec.get("total_ms"),
        ended_at=rec.get("ended_at"),
        upstream=rec.get("upstream"),
        keep_warm=rec.get("keep_warm") is True,
        compression=rec.get("compression"),
    )


class Recorder:
    """Takes finished exchanges from the relay and records, audits and prints them.

    ``store``: the store, or its target (a path or a URL) for the recorder to open, on its own
    thread: a ``--workers`` process started while the store is away keeps relaying, and its
    exchanges are spooled until the store opens. ``printer`` receives each printed line (``None``: silent); ``warn`` each line about the recording
    itself -- a store that failed, a recorder behind the relay, exchanges not recorded --
    whatever ``printer`` is (stderr by default; ``--quiet`` silences ``printer`` only).
    ``observer`` receives each recorded model call (:class:`RecordedExchange`).

    What it guarantees (docs/proxy.md, "Nothing answered is lost"):

    * **a bounded backlog**: past ``backlog_limit`` exchanges or ``backlog_bytes`` of bodies
      waiting, :meth:`admit` holds new requests until the recorder catches up (the relay
      calls it before relaying a request), with a warning;
    * **nothing dropped when the store fails**: an exchange the store refuses (down, frozen
      past its stall limit, full, read-only) goes to this process's spool in the store's
      recovery folder (``store/recovery.py``), and so does every later one until the store
      answers again -- tried again after 1 s, the wait doubling up to 30 s -- when the spool
      is recorded first, in order. A spool left by a process that is gone (stopped with the
      store away, or killed) is imported when the next recorder opens the store;
    * **counted**: ``recorded``, ``spooled`` (kept, not yet recorded), ``lost`` (neither: a
      spool that could not be written either, or an exchange the recorder cannot read), said
      by :meth:`summary`. :meth:`close` drains the queue.
    """

    def __init__(
        self,
        store: Store | str,
        upstream: str,
        *,
        printer: Callable[[str], None] | None = print,
        counter: TokenCounter | None = None,
        observer: Callable[[RecordedExchange], None] | None = None,
        warn: Callable[[str], None] | None = stderr_line,
        name: str = "ctxwright proxy",
        spool_prefix: str = "proxy",
        backlog_limit: int = BACKLOG_LIMIT,
        backlog_bytes: int = BACKLOG_BYTES,
        behind_at: int = BEHIND_AT,
        pricing: Pricing | None = None,
        rules: Settings | None = None,
    ) -> None:
        self.upstream = upstream
        self.pricing = pricing or Pricing()
        #: the named rules over each session's calls (``audit/rules/``; ``rules``: their settings,
        #: ``--max-tool-tokens``), each call checked against the session's previous one
        self.rules = RuleRunner(rules, max_open=LIVE_SESSIONS)
        self.observer = observer
        self._observer_failed = False
        self.printer = printer
        self.name = name
        self.warnings = Warnings(warn or (lambda _line: None))
        self._counter = counter
        self.store: Store | None = None
        self._owns_store = False
        self._target = store.target if isinstance(store, Store) else store
        if isinstance(store, Store):
            self._ready(store)
        self._earlier_done = False
        self.reader = RecordReader()
        self.spool_prefix = spool_prefix
        self._spool: Spool | None = None
        self._retry_at = 0.0
        self._retry_s = RETRY_FIRST_S
        self.backlog_limit = max(1, backlog_limit)
        self.backlog_bytes = max(1, backlog_bytes)
        self.behind_at = behind_at
        self._queue: queue.SimpleQueue[Exchange | None] = queue.SimpleQueue()
        self.recorded = 0
        self.spooled = 0
        self.lost = 0
        self.imported = 0
        self.peak_backlog = 0
        self.peak_backlog_bytes = 0
        self.held = 0
        self._handled = 0
        self._idle = threading.Condition()
        self._pending = 0
        self._pending_bytes = 0
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="ctxwright-proxy-recorder", daemon=True)
        self._thread.start()

    def _ready(self, store: Store) -> None:
        """The parts that read and write the store, once it is open."""
        self.store = store
        self.log = ProxyLog(store)
        self.placer = SessionPlacer(store, self.upstream)
        self.audits = LiveAudits(store, self._counter or TokenCounter(cache_size=TOKEN_MEMO))

    # -- the relay's side ----------------------------------------------------------------------
    @property
    def backlog(self) -> int:
        """Exchanges submitted and not yet recorded, spooled or given up."""
        return self._pending

    def _over(self) -> bool:
        return self._pending >= self.backlog_limit or self._pending_bytes >= self.backlog_bytes

    def submit(self, ex: Exchange) -> None:
        """Queue one finished exchange (called on the event loop; returns at once)."""
        size = _bytes(ex)
        with self._idle:
            self._pending += 1
            self._pending_bytes += size
            backlog = self._pending
            self.peak_backlog = max(self.peak_backlog, backlog)
            self.peak_backlog_bytes = max(self.peak_backlog_bytes, self._pending_bytes)
        self._queue.put(ex)
        if backlog >= self.behind_at:
            self.warnings.say(
                "behind",
                f"{self.name}: the recorder is {backlog} exchange(s) behind (many answers ended at once, or the "
                "store is slow or away); "
                "answers end once they are recorded, and new requests wait past "
                f"{self.backlog_limit} exchange(s) or {self.backlog_bytes // MIB} MB waiting",
            )

    def _say_full(self) -> None:
        self.held += 1
        self.warnings.say(
            "full",
            f"{self.name}: {self._pending} exchange(s) ({self._pending_bytes / MIB:,.0f} MB) wait for the recorder, "
            f"the most it keeps ({self.backlog_limit} exchanges, {self.backlog_bytes // MIB} MB): new requests wait "
            "until it catches up",
        )

    async def admit(self) -> None:
        """Return once the backlog is under its bound (at once, normally): the relay awaits
        this before it relays a request, so a recorder slower than the relay slows the relay
        instead of growing the backlog without limit."""
        if not self._over():
            return
        self._say_full()
        while self._over() and not self._closing:
            await asyncio.sleep(ADMIT_POLL_S)

    def wait_room(self) -> None:
        """:meth:`admit` for a caller on a thread of its own (the framework recorder)."""
        if not self._over():
            return
        self._say_full()
        with self._idle:
            self._idle.wait_for(lambda: not self._over() or self._closing)

    @property
    def caught_up(self) -> bool:
        """Whether the store is open and nothing waits, in the queue or a spool: an exchange
        submitted now is written promptly, so waiting for it costs a caller milliseconds."""
        return self._pending == 0 and self.store is not None and (self._spool is None or self._spool.count == 0)

    def wait_idle(self, timeout: float = 10.0, *, at_least: int = 0) -> bool:
        """Block until every submitted exchange is handled and at least ``at_least`` in all
        were (tests, benchmarks: an exchange is submitted just after its last byte is sent, so
        a client may see its answer before the proxy has submitted it)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0 and self._handled >= at_least, timeout)

    def close(self) -> None:
        """Record (or spool) what is queued, then stop; a spool still holding exchanges stays
        for the next recorder on this store, and :meth:`summary` says where."""
        self._closing = True
        self._queue.put(None)
        self._thread.join()
        if self._spool is not None:
            self._spool.close()
        self.warnings.flush()
        if self._owns_store and self.store is not None:
            self.store.close()

    @property
    def unrecorded(self) -> int:
        """Exchanges of this process not in the store: spooled, or lost."""
        return (self._spool.count if self._spool is not None else 0) + self.lost

    def summary(self) -> str:
        """What was recorded, and what was not: ``N exchange(s) recorded[; M kept in PATH ...][; L lost]``."""
        text = f"{self.recorded} exchange(s) recorded"
        if self.imported:
            text += f" ({self.imported} of them from an earlier process's recovery file)"
        kept = self._spool.count if self._spool is not None else 0
        if kept and self._spool is not None:
            text += f"; {kept} NOT recorded yet, {self._spool.how_to_import('ctxwright proxy')}"
        if self.lost:
            text += f"; {self.lost} NOT recorded (lost: see the lines above)"
        return text

    # -- the recorder's thread -----------------------------------------------------------------
    def _away(self) -> bool:
        return self.store is None or not self._earlier_done or (self._spool is not None and self._spool.count > 0)

    def _run(self) -> None:
        self._attempt()
        while True:
            timeout = max(0.01, self._retry_at - time.monotonic()) if self._away() else None
            try:
                ex = self._queue.get(timeout=timeout)
            except queue.Empty:
                self._attempt()
                continue
            if ex is None:
                if self._away():
                    self._attempt()  # one last try: what the store takes now is not left for the next start
                return
            outcome = "lost"
            try:
                outcome = self._handle(ex)
            except Exception as exc:  # a bug must not stop the recorder: the exchange is said lost
                self.warnings.say("bug", f"{self.name}: could not record {ex.method} {redact_query(ex.path)}: {exc!r}")
            finally:
                if not ex.written.done():
                    ex.written.set_result(None)  # an answer held until it is recorded may end now
                size = _bytes(ex)
                with self._idle:
                    if outcome == "recorded":
                        self.recorded += 1
                    elif outcome == "spooled":
                        self.spooled += 1
                    else:
                        self.lost += 1
                    self._handled += 1
                    self._pending -= 1
                    self._pending_bytes -= size
                    self._idle.notify_all()

    def _attempt(self) -> None:
        """One try at the store (:meth:`_try_store`); the next one is not before ``_retry_s``."""
        self._retry_at = time.monotonic() + self._retry_s
        try:
            self._try_store()
        except Exception as exc:  # a spool that cannot be read or rewritten: said, tried again later
            self.warnings.say("bug", f"{self.name}: the recorder met {exc!r}")

    def _handle(self, ex: Exchange) -> str:
        """Record one exchange, or spool it; ``recorded``, ``spooled`` or ``lost``."""
        if self._away() and time.monotonic() >= self._retry_at:
            self._attempt()
        if not self._away():
            try:
                self.record(ex)
                return "recorded"
            except StoreUnusable as exc:
                self._went_away(exc)
            except Exception as exc:  # this exchange cannot be read: no spool would help
                self.warnings.say(
                    "unreadable", f"{self.name}: could not record {ex.method} {redact_query(ex.path)}: {exc}"
                )
                return "lost"
        return self._keep(ex)

    def _keep(self, ex: Exchange) -> str:
        if self._spool is None:
            self._spool = Spool(recovery_dir_for(self._target), self.spool_prefix, spool_store(self._target))
        try:
            self._spool.add(exchange_record(ex))
        except OSError as exc:
            self.warnings.say(
                "spool",
                f"{self.name}: could not record {ex.method} {redact_query(ex.path)}, nor keep it in a recovery file "
                f"({exc.strerror or exc}): it is lost",
            )
            return "lost"
        return "spooled"

    def _went_away(self, exc: StoreUnusable) -> None:
        self._retry_at = time.monotonic() + self._retry_s
        self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
        self.warnings.say(
            "store",
            f"{self.name}: could not record into the store ({exc.reason}); exchanges are relayed all the same and "
            "kept in a recovery file until it answers again",
        )

    def _try_store(self) -> None:
        """Open the store if it is not open yet, import the spools left by processes that are
        gone, then record this process's own spool, in order; when the store fails, the rest
        stays spooled and is tried again later (:meth:`_went_away`)."""
        if self.store is None:
            try:
                store = Store(self._target)
            except StoreUnusable as exc:
                self._went_away(exc)
                return
            self._owns_store = True
            self._ready(store)
        assert self.store is not None
        if not self._earlier_done:
            for spool in claim_spools(
                self.store.recovery_dir, self.spool_prefix, spool_store(self._target), self._spool_problem
            ):
                if not self._import(spool, earlier=True):
                    return
            self._earlier_done = True
        if self._spool is not None and self._spool.count:
            self._import(self._spool, earlier=False)

    def _import(self, spool: Spool, *, earlier: bool) -> bool:
        """Record a spool's exchanges in order; ``False`` (the rest kept) when the store fails."""
        done = 0
        where = spool.path
        try:
            for rec in spool.records():
                try:
                    ex = exchange_from_record(rec)
                    self.record(ex)
                except StoreUnusable as exc:
                    try:
                        spool.keep_rest()
                    except OSError as err:  # a full disk: the file's note of what is imported still holds
                        self.warnings.say(
                            "spool",
                            f"{self.name}: could not rewrite {where} without what is imported ({err.strerror or err}); "
                            "left as it is: the next import resumes after what it notes as recorded",
                        )
                    self._went_away(exc)
                    return False
                except Exception as exc:  # a line this version cannot read: never blocks the rest
                    self.lost += 1
                    self.warnings.say("unreadable", f"{self.name}: could not import a spooled exchange: {exc!r}")
                    continue
                done += 1
                self.recorded += 1
                self.imported += int(earlier)
                try:
                    spool.mark_done()
                except OSError as exc:
                    self.warnings.say(
                        "spool",
                        f"{self.name}: could not note in {where} what is imported ({exc.strerror or exc}); were this "
                        "process killed before the import ends, the next one would record those exchanges again",
                    )
            spool.keep([])
        finally:
            self._say_skipped(spool, where)
            if earlier:
                spool.close()
        self._retry_s = RETRY_FIRST_S
        if done or not earlier:
            whose = "an earlier process's" if earlier else "this process's"
            self.warnings.say("imported", f"{self.name}: recorded {done} exchange(s) from {whose} spool {where}")
        return True

    def _spool_problem(self, line: str) -> None:
        self.warnings.say("spool-file", f"{self.name}: {line}")

    def _say_skipped(self, spool: Spool, where: Path | None) -> None:
        """Lines of a spool that were not exchanges: counted lost, and said."""
        if spool.skipped:
            self.lost += spool.skipped
            self.warnings.say(
                "unreadable",
                f"{self.name}: {spool.skipped} line(s) of {where} could not be read (cut short by a crash, "
                "not JSON, or too long): counted lost, the rest imported",
            )
            spool.skipped = 0

    def record(self, ex: Exchange) -> int:
        """Decode, place, audit and write one exchange; its row id."""
        req_plain, req_problem = _plain("request", ex.request, ex.request_encoding)
        body = _json(req_plain)
        api = api_of(ex.method, ex.path)
        resp_plain, resp_problem = _plain("response", ex.response, ex.response_encoding)
        streamed = is_event_stream(ex.response_content_type)
        if resp_plain is None:
            response: Any = None
        elif streamed:
            response = sse_events(resp_plain)
        else:
            response = _json(resp_plain)
        row: dict[str, Any] = {
            "started_at": ex.started_at,
            "ended_at": ex.ended_at,
            "method": ex.method,
            "path": ex.path,
            "api": api,
            "streamed": int(streamed),
            "status": ex.status,
            "outcome": ex.outcome,
            "error": ex.error or req_problem or resp_problem,
            "request_bytes": ex.request.size,
            "request_sha256": ex.request.hexdigest(),
            "request_content_type": ex.request_content_type,
            "request_encoding": ex.request_encoding,
            "request_body": req_plain,
            "request_parsed": int(isinstance(body, dict)),
            "response_bytes": ex.response.size,
            "response_sha256": ex.response.hexdigest(),
            "response_content_type": ex.response_content_type,
            "response_encoding": ex.response_encoding,
            "response_body": resp_plain,
            "response_parsed": int(response is not None and response != []),
            "ttfb_ms": ex.ttfb_ms,
            "total_ms": ex.total_ms,
        }
        if api is None or not isinstance(body, dict):  # not a model call (or not one we can read)
            if api is not None:
                row["error"] = row["error"] or "request body is not a JSON object"
            rid = self.log.record_exchange(row)
            skipped = summary_text(ex.compression)
            if skipped and self.printer is not None:  # --compress let it pass as it came: said, not silent
                self.printer(f"{self.name}: {ex.method} {redact_query(ex.path)} {ex.status or '---'}  {skipped}")
            return rid
        req, problem = self._read(body, response, ex.started_at)
        # a new session is stored with the upstream its first call went to (one proxy serves
        # several providers: ``ProxyConfig.upstreams``)
        self.placer.upstream = ex.upstream or self.upstream
        placement = self.placer.place(ex.session_header, body, api, req)
        sid = placement.session_id
        self.placer.answered(sid, _response_id(response) if api == "openai_responses" else None)
        audit_row = None
        stored = -1
        try:
            if req is not None:
                stored = 0 if placement.new else self.log.call_count(sid)
                audit_row = self.audits.add(sid, req, new=placement.new, stored=stored, refresh=ex.keep_warm)
            audit: dict[str, Any] = audit_record(audit_row) if audit_row is not None else {"problem": problem}
            findings: list[Finding] = []
            if audit_row is not None and req is not None and not ex.keep_warm:  # a refresh is no call of the agent
                findings = self.rules.add(sid, req, audit_row.cause)
            if findings:
                audit["rules"] = [f.to_json() for f in findings]
            cache = self.audits.cache if audit_row is not None else None
            if cache is not None:
                audit["cache"] = cache
            audit["grouped_by"] = placement.grouped_by
            if ex.keep_warm:  # the proxy's own refresh (proxy/keep_warm.py): paid for, not the agent's call
                audit.update(cause=KEEP_WARM, keep_warm=True)
            if ex.compression is not None:  # --compress: the body recorded is the one that went upstream
                audit["compression"] = ex.compression
            row.update(session_id=sid, audit_json=json.dumps(audit, ensure_ascii=False))
            rid, k = self.log.record_call(row, placement.heads)
        except BaseException:
            # not stored: its number stays free for the next call, and the session's audit is
            # rebuilt from the calls that were stored
            self.audits.forget(sid)
            raise
        self.placer.remember(placement)
        if stored >= 0 and k != stored:  # another process recorded a call of this session meanwhile
            self.audits.forget(sid)
        if self.printer is not None and not ex.keep_warm:  # a refresh is announced by keep-warm itself
            money = self._money(ex, audit_row)
            line = format_line(
                sid, k, ex, audit_row, problem, cache if audit_row is not None else None, money, findings
            )
            saved = summary_text(ex.compression)
            self.printer(f"{line}  {saved}" if saved else line)
        if self.observer is not None:
            self._observe(RecordedExchange(rid, sid, k, api, ex, body, response, audit, streamed))
        return rid

    def _money(self, ex: Exchange, row: AuditRow | None) -> str | None:
        """What the call cost and its miss lost, by ``pricing`` (``audit/compare.py``:
        ``row_cost``, the one computation the audit, ``show`` and the report use); nothing for
        a call the upstream refused or never answered (providers do not bill those)."""
        if row is None or ex.status is None or ex.status >= 400:
            return None
        return cost_text(row_cost(row, self.pricing))

    def _observe(self, recorded: RecordedExchange) -> None:
        """Hand the observer the recorded call; its failure is said once and never unrecords it."""
        assert self.observer is not None
        try:
            self.observer(recorded)
        except Exception as exc:
            if not self._observer_failed and self.printer is not None:
                self.printer(f"ctxwright proxy: the observer of recorded calls failed ({type(exc).__name__}: {exc})")
            self._observer_failed = True

    def _read(
        self, body: dict[str, Any], response: Any, started_at: float | None = None
    ) -> tuple[AuditRequest | None, str | None]:
        """The call as ``ctxwright audit`` reads a logged ``{"request", "response", "proxy"}``
        record (``started_at``: when the provider's cache age is measured from)."""
        record = {"request": body, "response": response, "proxy": {"started_at": started_at}}
        items = list(self.reader.read_record(record, 1))
        req = next((i for i in items if isinstance(i, AuditRequest)), None)
        if req is None:
            return None, "; ".join(i.message for i in items if isinstance(i, ParseProblem)) or "unreadable request"
        return req, None
