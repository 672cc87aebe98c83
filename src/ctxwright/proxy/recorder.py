"""Recording and auditing each relayed exchange, on a thread of its own.

Why a thread: the relay runs on one event loop, and anything slow there (an SQLite commit,
decoding a large body, hashing a long history) delays every other client's bytes. The loop
only queues the finished exchange (:meth:`Recorder.submit`, a lock-free append); this
thread decodes it, places it in a session (``proxy/sessions.py``), audits it as
``ctxwright audit --proxy-session`` audits the stored session (``proxy/session_audit.py``:
one computation, so the printed line and the offline audit agree), writes one row, and
prints one line. One writer keeps the session placement and the audit in arrival order.
Rows are written one by one as they arrive (autocommit, WAL), so a crash loses only
exchanges still in flight or in the queue; closing the recorder drains the queue first.

A call's number in its session is taken in the transaction that writes its row
(``ProxyLog.record_call``): a write that fails (a full disk) leaves no gap in the numbers of
the calls that follow, and another proxy process recording into the same store never takes
the same number.

An ``observer`` (``telemetry/exchanges.py``: a span per relayed call) is handed each model call
once its row is written, on this thread: what it does can neither slow the relay nor lose a
row, and an observer that raises is reported once and skipped.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxwright.audit.compare import TOKEN_MEMO, AuditRequest, AuditRow
from ctxwright.audit.live import audit_record
from ctxwright.audit.logs import ParseProblem, RecordReader
from ctxwright.audit.provider_log import QUIET, describe
from ctxwright.core.redact import redact_query
from ctxwright.core.tokens import TokenCounter
from ctxwright.proxy.decode import decode_body
from ctxwright.proxy.log import api_of, is_event_stream, sse_events
from ctxwright.proxy.server import Capture, Exchange
from ctxwright.proxy.session_audit import LiveAudits
from ctxwright.proxy.sessions import SessionPlacer
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store


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
) -> str:
    """The one printed line of a model call: session, call, status, cause, cached ÷ reusable
    tokens, the first divergence, and the provider's cache verdict when it is a miss. No
    header, no body text beyond the divergence snippet."""
    head = f"{session_id} #{call_index:<3} {ex.status or '---'} {ex.total_ms or 0:7.0f} ms"
    if ex.outcome != "complete":
        head += f" [{ex.outcome}]"
    if row is None:
        return f"{head}  not audited: {problem}"
    cached = "?" if row.cached_tokens is None else f"{row.cached_tokens:,}"
    line = f"{head}  {row.cause:<15} cached {cached} ÷ reusable {row.reusable_prefix_tokens:,} tok"
    d = row.first_divergence
    if d is not None:
        where = "tools" if d.message_index is None else f"msg#{d.message_index}"
        snippet = f"{d.before[-20:]}|{d.after[:20]}".replace("\n", "⏎")
        line += f"  at {where} {d.field} @{d.byte_offset}: …{snippet}…"
    if cache is not None and cache.get("cause") not in QUIET:
        line += f"  provider cache: {describe(cache)}"
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


class Recorder:
    """Takes finished exchanges from the relay and records, audits and prints them.

    ``printer`` receives each printed line (``None``: silent); ``observer`` each recorded model
    call (:class:`RecordedExchange`). :meth:`close` drains the queue.
    """

    def __init__(
        self,
        store: Store,
        upstream: str,
        *,
        printer: Callable[[str], None] | None = print,
        counter: TokenCounter | None = None,
        observer: Callable[[RecordedExchange], None] | None = None,
    ) -> None:
        self.store = store
        self.observer = observer
        self._observer_failed = False
        self.log = ProxyLog(store)
        self.printer = printer
        self.placer = SessionPlacer(store, upstream)
        self.reader = RecordReader()
        self.audits = LiveAudits(store, counter or TokenCounter(cache_size=TOKEN_MEMO))
        self._queue: queue.SimpleQueue[Exchange | None] = queue.SimpleQueue()
        self.recorded = 0
        self.failures = 0
        self._idle = threading.Condition()
        self._pending = 0
        self._thread = threading.Thread(target=self._run, name="ctxwright-proxy-recorder", daemon=True)
        self._thread.start()

    def submit(self, ex: Exchange) -> None:
        """Queue one finished exchange (called on the event loop; returns at once)."""
        with self._idle:
            self._pending += 1
        self._queue.put(ex)

    def wait_idle(self, timeout: float = 10.0, *, at_least: int = 0) -> bool:
        """Block until every submitted exchange is handled and at least ``at_least`` in all
        were (tests, benchmarks: an exchange is submitted just after its last byte is sent, so
        a client may see its answer before the proxy has submitted it)."""
        with self._idle:
            return self._idle.wait_for(
                lambda: self._pending == 0 and self.recorded + self.failures >= at_least, timeout
            )

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            ex = self._queue.get()
            if ex is None:
                return
            ok = False
            try:
                self.record(ex)
                ok = True
            except Exception as exc:  # one exchange that cannot be recorded must not stop the others
                if self.printer is not None:
                    self.printer(f"ctxwright proxy: could not record {ex.method} {redact_query(ex.path)}: {exc}")
            finally:
                if not ex.written.done():
                    ex.written.set_result(None)  # an answer held until it is recorded may end now
                with self._idle:
                    if ok:
                        self.recorded += 1
                    else:
                        self.failures += 1
                    self._pending -= 1
                    self._idle.notify_all()

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
            "request_sha256": ex.request.sha.hexdigest(),
            "request_content_type": ex.request_content_type,
            "request_encoding": ex.request_encoding,
            "request_body": req_plain,
            "request_parsed": int(isinstance(body, dict)),
            "response_bytes": ex.response.size,
            "response_sha256": ex.response.sha.hexdigest(),
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
            return self.log.record_exchange(row)
        req, problem = self._read(body, response, ex.started_at)
        placement = self.placer.place(ex.session_header, body, api, req)
        sid = placement.session_id
        self.placer.answered(sid, _response_id(response) if api == "openai_responses" else None)
        audit_row = None
        stored = -1
        try:
            if req is not None:
                stored = 0 if placement.new else self.log.call_count(sid)
                audit_row = self.audits.add(sid, req, new=placement.new, stored=stored)
            audit: dict[str, Any] = audit_record(audit_row) if audit_row is not None else {"problem": problem}
            cache = self.audits.cache if audit_row is not None else None
            if cache is not None:
                audit["cache"] = cache
            audit["grouped_by"] = placement.grouped_by
            row.update(session_id=sid, audit_json=json.dumps(audit, ensure_ascii=False))
            rid, k = self.log.record_call(row)
        except BaseException:
            # not stored: its number stays free for the next call, and the session's audit is
            # rebuilt from the calls that were stored
            self.audits.forget(sid)
            raise
        if stored >= 0 and k != stored:  # another process recorded a call of this session meanwhile
            self.audits.forget(sid)
        if self.printer is not None:
            self.printer(format_line(sid, k, ex, audit_row, problem, cache if audit_row is not None else None))
        if self.observer is not None:
            self._observe(RecordedExchange(rid, sid, k, api, ex, body, response, audit, streamed))
        return rid

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
