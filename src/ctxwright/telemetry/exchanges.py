"""The proxy's spans: one ``chat`` span per relayed model call, each the root of its own trace.

Why a trace per exchange, and not one per proxy session: a span reaches the collector only when
it ends, and a proxy session has no end the proxy can see -- the agent just stops calling, the
session may go on after the proxy restarts, the proxy may be killed. A session-long root would
keep every call out of sight (or, sent without it, an orphan under a missing parent) until the
proxy stops, and lose the session's trace entirely when it is killed. So each call is complete
as soon as it is recorded, and a session's calls are found together by what they share:
``gen_ai.conversation.id`` (and ``session.id``, which Phoenix groups its Sessions view by) is the
proxy session's id, ``ctxwright.call.index`` orders them.

The span is made after the fact, on the recorder's thread (``proxy/recorder.py``: the observer
is called once the exchange's row is written), with the exchange's own start and end times; it
never touches the relay's event loop, and the audit it carries is the one stored
(``ctxwright audit --proxy-session`` reads the same). Content only with ``--otlp-content``;
headers -- the client's key among them -- never.
"""

from __future__ import annotations

import logging
import threading
from urllib.parse import urlsplit

from ctxwright.proxy.recorder import RecordedExchange
from ctxwright.telemetry import attributes as A
from ctxwright.telemetry import content as C
from ctxwright.telemetry.exporter import Exporter, quiet

__all__ = ["ExchangeTracer"]

log = logging.getLogger("ctxwright.telemetry")


class ExchangeTracer:
    """The recorder's observer (``Recorder(observer=...)``): a span per recorded model call on
    ``exporter``'s tracer. ``server.address`` is the host of the upstream the call went to (of
    ``upstream`` for a call that names none); ``content`` adds the
    messages (``content.py``)."""

    def __init__(self, exporter: Exporter, *, upstream: str, content: bool = False) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.exporter = exporter
        self.tracer = exporter.tracer
        self.content = content
        self.host = urlsplit(upstream).hostname
        self._failed = False
        self._lock = threading.Lock()

    def __call__(self, recorded: RecordedExchange) -> None:
        try:
            with quiet(self.exporter):
                self._span(recorded)
        except Exception as exc:  # a span that cannot be made must not stop the recording
            with self._lock:
                failed, self._failed = self._failed, True
            if not failed:
                log.warning("ctxwright: a span could not be made (%s: %s); recording goes on", type(exc).__name__, exc)

    def _span(self, r: RecordedExchange) -> None:
        ex = r.exchange
        attrs = A.exchange(
            api=r.api,
            body=r.request,
            response=r.response,
            audit=r.audit,
            session_id=r.session_id,
            call_index=r.call_index,
            status=ex.status,
            outcome=ex.outcome,
            streamed=r.streamed,
        )
        A.put(attrs, "server.address", urlsplit(ex.upstream).hostname if ex.upstream else self.host)
        A.put(attrs, "ctxwright.proxy.ttfb_ms", ex.ttfb_ms)
        if self.content:
            messages, system = C.body_messages(r.api, r.request)
            text, omitted = C.bounded_json(messages)
            attrs["gen_ai.input.messages"] = text
            if omitted:
                attrs["ctxwright.content.omitted_messages"] = omitted
            if system:
                attrs["gen_ai.system_instructions"] = C.bounded_json(system)[0]
            finish = attrs.get(A.FINISH_REASONS)
            reasons = [str(f) for f in finish] if isinstance(finish, list | tuple) else []
            output = C.body_output(r.api, r.response, reasons)
            if output:
                attrs["gen_ai.output.messages"] = C.bounded_json(output)[0]
        model = r.request.get("model")
        start = int(ex.started_at * 1e9)
        end = int(ex.ended_at * 1e9) if ex.ended_at is not None else start + int((ex.total_ms or 0.0) * 1e6)
        span = self.tracer.start_span(
            A.chat_span_name(model if isinstance(model, str) else None),
            context=self._trace.set_span_in_context(self._trace.INVALID_SPAN),  # a root: see the module docstring
            attributes=attrs,
            start_time=start,
        )
        if A.ERROR_TYPE in attrs:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end(end_time=max(start, end))

    def close(self) -> None:
        self.exporter.close()
