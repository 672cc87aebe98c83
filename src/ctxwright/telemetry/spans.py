"""The harness's spans: the progress events of a run turned into one trace per run.

Why on ``on_event`` (``core/progress.py``, ``agent/progress.py``): every model call, tool run and
compaction is already reported there as a typed event, by the same code for a ``Harness``, a
``Context`` driven by the caller's own loop and a sub-agent. The tracer is one more sink,
wrapped around the caller's -- which still gets every event first, unchanged -- so nothing in
the loop knows about OpenTelemetry.

The trace of one ``Harness.run`` (what Jaeger's timeline and Phoenix's trace view show)::

    invoke_agent ctxwright             the run: its session, backend, model, how it stopped
    ├── compaction clearing            a compaction tier, before the call it made room for
    ├── chat SmolLM2-135M-Instruct     a model call: GenAI request/usage, ctxwright.cache.*, ledger
    ├── execute_tool get_weather       a tool call (the calls of one reply overlap)
    │   └── chat ...                   a sub-agent's calls, under the ``delegate`` call that ran it
    └── chat SmolLM2-135M-Instruct

A ``Context`` has no ``run``: its root opens with the first event after a user message and
ends at the next user message or at ``close``. Every span carries ``gen_ai.conversation.id``
(the session id; a sub-agent's own) so the runs of one session are found together.

Time: a model call spans its backend call (from ``RequestSent``, for the backend's wall
time), a tool from ``ToolStart`` to ``ToolDone``, a compaction from its tier's own start and
end (``CompactionReport.started_at``/``ended_at``: its report reaches the sink only after every
tier ran).

Never in the way: an error in here is logged once and swallowed (the run goes on, the caller's
sink has the event already); spans end into the exporter's bounded queue (``exporter.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ctxwright.compaction.pipeline import CompactionReport
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.progress import (
    BackendFailed,
    EventSink,
    LedgerWarning,
    ProgressEvent,
    RepeatedCall,
    RequestSent,
    Retry,
    Stopped,
    ToolDone,
    ToolStart,
    UserInput,
)
from ctxwright.core.records import CallAudit, CallRecord
from ctxwright.core.request import ChatRequest
from ctxwright.core.usage import as_object, raw_cache_usage
from ctxwright.progress import AssistantReply, CallReport, Compacted, GateDecided
from ctxwright.telemetry import attributes as A
from ctxwright.telemetry import content as C
from ctxwright.telemetry.exporter import Exporter, quiet

__all__ = ["RunSpan", "RunTracer"]

log = logging.getLogger("ctxwright.telemetry")

#: ``None``: the run's own agent; a session id: that sub-agent (``ProgressEvent.child``)
Key = str | None


def _ns(seconds: float | None = None) -> int:
    return time.time_ns() if seconds is None else int(seconds * 1e9)


@dataclass
class _Call:
    """A model call's span, open from ``RequestSent`` to its reply (or failure)."""

    span: Any
    start_ns: int
    index: int
    request: ChatRequest | None


@dataclass
class RunSpan:
    """The open root of one run (:meth:`RunTracer.run`); :meth:`done` records how it ended."""

    span: Any
    implicit: bool = False
    stop_reason: str | None = None
    iterations: int | None = None
    error: str | None = None
    calls: int = 0
    ended: bool = field(default=False, repr=False)

    def done(self, result: Any) -> None:
        """How the run ended: a ``RunResult`` (``stop_reason``, ``iterations``, ``error``)."""
        self.stop_reason = getattr(result, "stop_reason", None)
        self.iterations = getattr(result, "iterations", None)
        self.error = getattr(result, "error", None)


class RunTracer:
    """An :data:`~ctxwright.core.progress.EventSink` that passes every event on to ``inner`` and
    makes the run's spans from them (the module docstring), on ``exporter``'s tracer."""

    def __init__(
        self,
        exporter: Exporter,
        inner: EventSink,
        *,
        backend: str,
        model: str | None,
        content: bool = False,
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self.exporter = exporter
        self.tracer = exporter.tracer
        self.inner = inner
        self.backend = backend
        self.model = model
        self.content = content
        self.provider = A.provider_name(backend)
        self.session_id: str | None = None
        self._lock = threading.RLock()
        self._root: RunSpan | None = None
        self._calls: dict[Key, _Call] = {}
        self._tools: dict[tuple[Key, str], Any] = {}
        self._pending: dict[Key, list[CompactionReport]] = {}
        self._gated: dict[tuple[Key, str], bool] = {}
        self._repeats: dict[tuple[Key, str], int] = {}
        self._mismatch: dict[Key, str] = {}
        self._failed = False
        self._closed = False

    def bind(self, session_id: str) -> None:
        """The session the spans belong to (known once the wiring has opened or resumed it)."""
        self.session_id = session_id

    # -- the sink ------------------------------------------------------------------------------------
    def __call__(self, event: ProgressEvent) -> None:
        self.inner(event)
        if self._closed:
            return
        try:
            with self._lock, quiet(self.exporter):
                self._on(event)
        except Exception as exc:  # telemetry must never fail the run
            self._broken(exc)

    def _broken(self, exc: BaseException) -> None:
        if not self._failed:
            self._failed = True
            log.warning("ctxwright: a span could not be made (%s: %s); the run goes on", type(exc).__name__, exc)

    def _on(self, event: ProgressEvent) -> None:
        key: Key = event.child
        if isinstance(event, UserInput) and key is None:
            root = self._root
            if root is not None and root.implicit:  # a Context's next turn: a new trace
                self._end_root(root)
        elif isinstance(event, Compacted):
            self._pending.setdefault(key, []).append(event.report)
        elif isinstance(event, RequestSent):
            self._request(key, event)
        elif isinstance(event, AssistantReply):
            self._reply(key, event.message, event.report)
        elif isinstance(event, BackendFailed):
            self._failure(key, event.error)
        elif isinstance(event, LedgerWarning):
            self._mismatch[key] = event.mismatch.kind
        elif isinstance(event, Retry):
            call = self._calls.get(key)
            if call is not None:
                call.span.add_event(
                    "ctxwright.retry",
                    {"ctxwright.retry.attempt": event.attempt, "ctxwright.retry.wait_s": event.wait_s},
                )
        elif isinstance(event, GateDecided):
            self._gated[(key, event.call.id)] = bool(event.decision.approved)
        elif isinstance(event, RepeatedCall):
            self._repeats[(key, event.call.id)] = event.count
        elif isinstance(event, ToolStart):
            self._tools[(key, event.call.id)] = self._tool_span(key, event.call, time.time_ns())
        elif isinstance(event, ToolDone):
            self._tool_done(key, event)
        elif isinstance(event, Stopped) and key is None and self._root is not None:
            self._root.stop_reason = event.reason

    # -- the run's root --------------------------------------------------------------------------------
    @contextmanager
    def run(self) -> Iterator[RunSpan]:
        """One ``Harness.run``: the root span around it (``done(result)`` says how it ended; an
        exception ends it as an error and goes on)."""
        with self._lock:
            root = self._start_root(implicit=False)
        try:
            yield root
        except BaseException as exc:
            root.error = root.error or f"{type(exc).__name__}: {exc}"
            raise
        finally:
            with self._lock:
                try:
                    with quiet(self.exporter):
                        self._end_root(root)
                except Exception as exc:
                    self._broken(exc)

    def _start_root(self, *, implicit: bool) -> RunSpan:
        if self._root is not None:
            self._end_root(self._root)
        attrs = A.session_run(
            provider=self.provider, model=self.model, conversation_id=self.session_id, backend=self.backend
        )
        span = self.tracer.start_span(f"invoke_agent {A.AGENT_NAME}", attributes=attrs)
        self._root = RunSpan(span, implicit=implicit)
        return self._root

    def _parent(self, key: Key) -> Any:
        """The span a new span of ``key`` goes under: the root (opened for a ``Context`` that has
        none), or for a sub-agent the parent's one open ``delegate`` call."""
        if self._root is None:
            self._start_root(implicit=True)
        assert self._root is not None
        if key is not None:
            open_delegates = [s for (k, _), s in self._tools.items() if k is None and s.name == "execute_tool delegate"]
            if len(open_delegates) == 1:
                return self._trace.set_span_in_context(open_delegates[0])
        return self._trace.set_span_in_context(self._root.span)

    def _conversation(self, key: Key) -> str | None:
        return key if key is not None else self.session_id

    def _end_root(self, root: RunSpan) -> None:
        if root.ended:
            return
        for key in list(self._pending):
            self._flush_compactions(key, None)
        for key in list(self._calls):  # a call the run left without a reply
            self._failure(key, "interrupted")
        for k, span in list(self._tools.items()):
            span.set_attribute(A.ERROR_TYPE, "interrupted")
            span.end()
            del self._tools[k]
        root.ended = True
        attrs = A.session_run(
            provider=self.provider,
            model=self.model,
            conversation_id=self.session_id,
            backend=self.backend,
            stop_reason=root.stop_reason,
            iterations=root.iterations,
            calls=root.calls,
            error=root.error,
        )
        root.span.set_attributes(attrs)
        if root.error is not None or root.stop_reason == "backend_error":
            root.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        root.span.end()
        if self._root is root:
            self._root = None

    # -- model calls ----------------------------------------------------------------------------------
    def _request(self, key: Key, event: RequestSent) -> None:
        self._flush_compactions(key, event.index)
        parent = self._parent(key)
        attrs: A.Attributes = {A.OPERATION: "chat", A.PROVIDER: self.provider, "ctxwright.call.index": event.index}
        A.put(attrs, A.REQUEST_MODEL, self.model)
        A.put(attrs, A.CONVERSATION, self._conversation(key))
        A.put(attrs, A.SESSION_ID, self._conversation(key))
        req = event.request
        if req is not None:
            A.put(attrs, A.MAX_TOKENS, req.max_tokens)
            A.put(attrs, A.TEMPERATURE, req.temperature)
        attrs["ctxwright.call.messages"] = event.messages
        if self.content and req is not None:
            text, omitted = C.bounded_json(C.messages_of(req.messages))
            attrs["gen_ai.input.messages"] = text
            if omitted:
                attrs["ctxwright.content.omitted_messages"] = omitted
        start = time.time_ns()
        span = self.tracer.start_span(A.chat_span_name(self.model), context=parent, attributes=attrs, start_time=start)
        self._calls[key] = _Call(span, start, event.index, req)
        if key is None and self._root is not None:
            self._root.calls += 1

    def _reply(self, key: Key, message: Message, report: CallReport) -> None:
        call = self._calls.pop(key, None)
        if call is None:  # a reply recorded without a RequestSent (a Context fed by hand)
            start = time.time_ns()
            span = self.tracer.start_span(A.chat_span_name(self.model), context=self._parent(key), start_time=start)
            call = _Call(span, start, report.index, None)
        record = self._record(key, report, call.request)
        shape = split[0] if (split := raw_cache_usage(as_object(record.usage.get("raw")))) is not None else None
        provider = A.provider_name(self.backend, shape)
        if key is None:  # what the replies showed (a Context's own loop: the reply's usage says whose)
            self.provider = provider
        attrs = A.model_call(
            record,
            provider=provider,
            finish_reason=report.finish_reason,
            response_model=report.response_model,
        )
        attrs["ctxwright.backend"] = self.backend
        attrs["ctxwright.call.tool_calls"] = report.tool_calls
        A.put(attrs, "ctxwright.call.overhead_ms", report.overhead_ms)
        if self.content:
            text, _ = C.bounded_json(C.output_of(message, report.finish_reason))
            attrs["gen_ai.output.messages"] = text
        call.span.set_attributes(attrs)
        end = time.time_ns()
        if report.wall_ms is not None:
            end = min(end, call.start_ns + int(report.wall_ms * 1e6))
        call.span.end(end_time=max(end, call.start_ns))

    def _record(self, key: Key, report: CallReport, request: ChatRequest | None) -> CallRecord:
        """The call as the store keeps it (``core/records.py``), from the live report."""
        ledger: dict[str, Any] = dict(report.ledger.to_dict())
        mismatch = self._mismatch.pop(key, None)
        if mismatch is not None:
            ledger["mismatch"] = {"kind": mismatch}
        choice = request.tool_choice if request is not None else None
        return CallRecord(
            session_id=self._conversation(key) or "",
            call_index=report.index,
            request_sha256="",
            request_bytes=0,
            prefix_sha256="",
            prompt_tokens=report.prompt_tokens,
            cached_tokens=report.cached_tokens,
            completion_tokens=report.completion_tokens,
            prefill_ms=report.prefill_ms,
            decode_ms=report.decode_ms,
            model=self.model,
            tool_choice=choice if isinstance(choice, str) else None,
            max_tokens=request.max_tokens if request is not None else None,
            temperature=request.temperature if request is not None else None,
            wall_ms=report.wall_ms,
            usage=report.usage.to_dict() if report.usage is not None else {},
            ledger=ledger,
            audit=CallAudit.from_dict(report.audit),
        )

    def _failure(self, key: Key, error: str) -> None:
        call = self._calls.pop(key, None)
        if call is None:
            return
        call.span.set_attribute(A.ERROR_TYPE, A.error_type(error) or "error")
        call.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        call.span.end()

    # -- compactions ----------------------------------------------------------------------------------
    def _flush_compactions(self, key: Key, call_index: int | None) -> None:
        reports = self._pending.pop(key, None)
        if not reports:
            return
        parent = self._parent(key)
        now = time.time_ns()
        for r in reports:
            attrs = A.compaction(r, conversation_id=self._conversation(key), call_index=call_index)
            start = _ns(r.started_at) if r.started_at is not None else now
            end = _ns(r.ended_at) if r.ended_at is not None else now
            span = self.tracer.start_span(f"compaction {r.layer}", context=parent, attributes=attrs, start_time=start)
            span.end(end_time=max(start, end))

    # -- tools ---------------------------------------------------------------------------------------
    def _tool_span(self, key: Key, call: ToolCall, start: int) -> Any:
        attrs: A.Attributes = {
            A.OPERATION: "execute_tool",
            A.TOOL_NAME: call.name,
            A.TOOL_CALL_ID: call.id,
            A.TOOL_TYPE: "function",
        }
        A.put(attrs, A.CONVERSATION, self._conversation(key))
        gated = self._gated.pop((key, call.id), None)
        if gated is not None:
            attrs["ctxwright.gate.approved"] = gated
        if self.content:
            attrs["gen_ai.tool.call.arguments"] = C.bounded_text(call.arguments)
        return self.tracer.start_span(
            f"execute_tool {call.name}", context=self._parent(key), attributes=attrs, start_time=start
        )

    def _tool_done(self, key: Key, event: ToolDone) -> None:
        span = self._tools.pop((key, event.call.id), None)
        if span is None:  # not run (blocked, denied) or answered as interrupted on resume
            span = self._tool_span(key, event.call, time.time_ns() - int(event.elapsed_ms * 1e6))
            span.set_attribute("ctxwright.tool.ran", False)
        attrs = A.tool_run(
            event.call,
            ok=event.ok,
            elapsed_ms=event.elapsed_ms,
            conversation_id=self._conversation(key),
            error=None if event.ok else A.tool_error_type(event.content),
        )
        A.put(attrs, "ctxwright.tool.repeat_count", self._repeats.pop((key, event.call.id), None))
        attrs["ctxwright.tool.result_chars"] = len(event.content)
        if self.content:
            attrs["gen_ai.tool.call.result"] = C.bounded_text(event.content)
        span.set_attributes(attrs)
        if not event.ok:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
        span.end()

    # -- the end -------------------------------------------------------------------------------------
    def close(self) -> None:
        """End what is still open (a ``Context``'s last turn) and close the exporter (bounded)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                with quiet(self.exporter):
                    if self._root is not None:
                        self._end_root(self._root)
            except Exception as exc:
                self._broken(exc)
        self.exporter.close()
