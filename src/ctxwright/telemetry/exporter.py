"""The OpenTelemetry SDK set up for ctxwright: a tracer whose spans go, in batches, to one
OTLP/HTTP endpoint -- and a collector that can never hold the agent up.

Why these rules, each from what a collector does when it misbehaves:

* **Lazy**: the SDK and the exporter are imported only here, only when ``--otlp`` is given;
  without the ``otel`` extra that is one :class:`~ctxwright.errors.TelemetryUnavailable` line
  (``pip install 'ctxwright[otel]'``), raised before a model loads.
* **Never on the agent's thread**: spans end into a bounded queue (:data:`MAX_QUEUE`; past it a
  span is dropped and counted, never waited for) and a background thread exports them in
  batches. A collector that is down or stalls (accepts the connection and never answers) costs
  that thread one export timeout per batch (:data:`EXPORT_TIMEOUT_S`, the exporter's retries
  included), never the agent.
* **Bounded close**: :meth:`Exporter.close` drains the queue so no span is lost at exit when
  the collector is up, but waits at most :data:`CLOSE_TIMEOUT_S`; what is still undelivered then
  is given up (and said so). The SDK's own exit hook is off (``shutdown_on_exit=False``): it
  would wait for the collector again, for up to 30 s, at interpreter exit; ctxwright's closes an
  exporter its owner left open (a ``Harness`` never closed) within the same bound.
* **Errors logged once**: the exporter logs every failed batch; while ctxwright's exporter runs,
  those records are kept out of the log (:class:`_Quiet`, by thread, so another exporter in the
  same process still logs) and ctxwright says once, on the ``ctxwright.telemetry`` logger, that
  the collector did not take the spans and why -- the run goes on, the store is complete.
* **Bounded attributes**: the SDK's span limits cut any attribute value at
  :data:`MAX_ATTRIBUTE_CHARS` and keep at most :data:`MAX_ATTRIBUTES` per span, whatever a
  model or a tool produced (``content.py`` bounds the message attributes first, so they stay JSON).

The tracer provider is ctxwright's own, never the process's global one: an application with its
own OpenTelemetry setup keeps it, and a run's root span still nests under whatever span that
application has open when it calls ``run``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

from ctxwright.core.redact import redact
from ctxwright.errors import ConfigError, TelemetryUnavailable

__all__ = [
    "CLOSE_TIMEOUT_S",
    "DEFAULT_ENDPOINT",
    "EXPORT_TIMEOUT_S",
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_CHARS",
    "MAX_QUEUE",
    "Exporter",
    "endpoint_of",
    "quiet",
]

log = logging.getLogger("ctxwright.telemetry")

#: One export of one batch, the exporter's own retries included, gives up after this.
EXPORT_TIMEOUT_S = 3.0
#: :meth:`Exporter.close` waits at most this for the queue to reach the collector.
CLOSE_TIMEOUT_S = 5.0
#: Spans waiting for export; a span that ends while the queue is full is dropped (and counted).
MAX_QUEUE = 2048
#: Spans per export request, and how often the background thread sends what has ended.
BATCH_SIZE = 256
SCHEDULE_DELAY_MS = 1000
#: The SDK's span limits: characters of one attribute value, attributes (and events) per span.
MAX_ATTRIBUTE_CHARS = 65_536
MAX_ATTRIBUTES = 128
MAX_EVENTS = 64
#: Where a collector listens for OTLP/HTTP by default.
DEFAULT_ENDPOINT = "http://localhost:4318"
TRACES_PATH = "/v1/traces"
#: The loggers of the SDK and exporter code that runs while ctxwright exports.
_SDK_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common",
    "opentelemetry.exporter.http.transport._requests",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace",
    "opentelemetry.attributes",
)
_INSTALL = "pip install 'ctxwright[otel]'"


def endpoint_of(otlp: str, environ: Mapping[str, str] | None = None) -> str:
    """The traces endpoint ``--otlp`` names: a URL as given when it has a path (Phoenix's
    ``/v1/traces``, a collector behind a prefix), else with ``/v1/traces`` added (a collector's
    or Jaeger's ``http://host:4318``). ``env``: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is,
    else ``OTEL_EXPORTER_OTLP_ENDPOINT`` with ``/v1/traces``, else :data:`DEFAULT_ENDPOINT`'s --
    the OpenTelemetry specification's reading of the two variables."""
    env = os.environ if environ is None else environ
    if otlp == "env":
        traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if traces:
            _parsed(traces, f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={traces} (--otlp env)")
            return traces
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if base:
            _parsed(base, f"OTEL_EXPORTER_OTLP_ENDPOINT={base} (--otlp env)")
        return (base or DEFAULT_ENDPOINT).rstrip("/") + TRACES_PATH
    parts = _parsed(otlp.strip(), f"--otlp {otlp}")
    if parts.path.strip("/"):
        return otlp.strip()
    return urlunsplit((parts.scheme, parts.netloc, TRACES_PATH, parts.query, ""))


def _parsed(url: str, given: str) -> SplitResult:
    """``url`` split, when it is an http(s) URL with a host and a port that can be (``given``:
    where it came from, for the message). Checked here, before a run starts: a URL that does
    not parse (``http://[::1``, a port over 65535) would otherwise fail in the exporter's
    thread, span after span, or as an unexplained ``ValueError``."""
    advice = f"give the OTLP/HTTP endpoint's URL, e.g. {DEFAULT_ENDPOINT}"
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number, or out of range, raises here
    except ValueError as exc:
        raise ConfigError(f"{redact(given)} is not a URL ({exc}); {advice}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{redact(given)}: {advice}")
    return parts


# -- errors logged once -------------------------------------------------------------------------------
_local = threading.local()


@contextmanager
def quiet(owner: Exporter) -> Iterator[None]:
    """While inside, the SDK's log records on this thread go to ``owner`` instead of the log
    (ending a span into a full queue logs; so does every failed export)."""
    before = getattr(_local, "owner", None)
    _local.owner = owner
    try:
        yield
    finally:
        _local.owner = before


class _Quiet(logging.Filter):
    """Keeps the SDK's records out of the log while a ctxwright exporter works on this thread
    (:func:`quiet`), and hands each to that exporter, which says once what went wrong. Records
    of any other thread (another exporter of the same process) pass untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        owner: Exporter | None = getattr(_local, "owner", None)
        if owner is None:
            return True
        if record.levelno >= logging.WARNING:
            owner._noted(record.getMessage())
        return False


_FILTER = _Quiet("ctxwright.telemetry")
_installed = False
_install_lock = threading.Lock()


def _install_filter() -> None:
    """Put the one :class:`_Quiet` filter on the SDK's loggers, once per process (it lets
    everything through outside :func:`quiet`, so it can stay), and the exit hook that closes
    an exporter its owner left open (a ``Harness`` never closed), within the same bound."""
    global _installed
    with _install_lock:
        if _installed:
            return
        for name in _SDK_LOGGERS:
            logging.getLogger(name).addFilter(_FILTER)
        atexit.register(_close_open)
        _installed = True


#: exporters not closed yet, for the exit hook (weakly: a forgotten one is not kept alive by it)
_OPEN: weakref.WeakSet[Exporter] = weakref.WeakSet()


def _close_open() -> None:
    for exporter in list(_OPEN):
        exporter.close()


class _Guarded:
    """The OTLP exporter, wrapped: it never raises into the batch thread, counts what it could
    not deliver, and once :meth:`abandon` is called (close ran out of time) it gives up on the
    rest at once instead of trying each batch for another export timeout.

    Duck-typed as a ``SpanExporter`` (``export``, ``shutdown``, ``force_flush``): the SDK's
    classes are imported only when an exporter is opened, never at module import."""

    def __init__(self, inner: Any, owner: Exporter) -> None:
        self.inner = inner
        self.owner = owner
        self._abandoned = False
        self._shut = False
        #: set by :meth:`Exporter.close`: a batch that starts after it is given up at once
        self.deadline: float | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if self._abandoned or (self.deadline is not None and time.monotonic() > self.deadline):
            self.owner._lost(len(spans), "the exporter was closed before the collector took them")
            return SpanExportResult.FAILURE
        with quiet(self.owner):
            try:
                result = self.inner.export(spans)
            except Exception as exc:  # an exporter bug must not end the batch thread
                result = SpanExportResult.FAILURE
                self.owner._noted(f"{type(exc).__name__}: {exc}")
        if result == SpanExportResult.SUCCESS:
            self.owner._delivered(len(spans))
        else:
            self.owner._lost(len(spans), None)
        return result

    def abandon(self) -> None:
        self._abandoned = True
        self.shutdown()  # interrupts a retry's back-off wait

    def shutdown(self, timeout_millis: float = 0.0) -> None:
        if self._shut:
            return
        self._shut = True
        with quiet(self.owner):
            try:
                self.inner.shutdown()
            except Exception as exc:
                self.owner._noted(f"{type(exc).__name__}: {exc}")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class Exporter:
    """A tracer provider with one batch processor and one OTLP/HTTP span exporter, bounded as
    the module docstring says. ``tracer`` makes the spans; :meth:`close` drains and stops."""

    def __init__(
        self,
        endpoint: str,
        *,
        export_timeout: float = EXPORT_TIMEOUT_S,
        close_timeout: float = CLOSE_TIMEOUT_S,
        max_queue: int = MAX_QUEUE,
        schedule_delay_ms: float = SCHEDULE_DELAY_MS,
    ) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import SpanLimits, TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as exc:
            raise TelemetryUnavailable(
                f"--otlp needs the OpenTelemetry SDK and its OTLP/HTTP exporter ({exc.name or exc} is missing): "
                f"{_INSTALL}"
            ) from None
        self.endpoint = endpoint
        #: the endpoint as printed: credentials in the URL masked
        self.shown = redact(endpoint)
        self.close_timeout = close_timeout
        self.delivered = 0
        self.lost = 0
        self._reason: str | None = None
        self._warned = False
        self._closed = False
        self._lock = threading.Lock()
        _install_filter()
        _OPEN.add(self)
        attrs: dict[str, Any] = {"service.version": _version()}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = "ctxwright"
        self.provider = TracerProvider(
            resource=Resource.create(attrs),
            span_limits=SpanLimits(
                max_attributes=MAX_ATTRIBUTES,
                max_span_attribute_length=MAX_ATTRIBUTE_CHARS,
                max_attribute_length=MAX_ATTRIBUTE_CHARS,
                max_events=MAX_EVENTS,
                max_event_attributes=MAX_ATTRIBUTES,
                max_links=MAX_EVENTS,
            ),
            shutdown_on_exit=False,
        )
        self._guard = _Guarded(OTLPSpanExporter(endpoint=endpoint, timeout=export_timeout), self)
        processor = BatchSpanProcessor(
            self._guard,  # type: ignore[arg-type]  # duck-typed SpanExporter (_Guarded's docstring)
            max_queue_size=max_queue,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(BATCH_SIZE, max_queue),
        )
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("ctxwright", _version())

    # -- what the batch thread reports -------------------------------------------------------------
    def _noted(self, message: str) -> None:
        """A log record of the SDK, kept out of the log: the first one is the reason told."""
        if message.startswith("Queue full"):
            self._lost(1, f"the export queue is full ({MAX_QUEUE} spans): the collector is slower than the agent")
            return
        with self._lock:
            if self._reason is None:
                self._reason = redact(message)[:300]

    def _delivered(self, n: int) -> None:
        with self._lock:
            self.delivered += n

    def _lost(self, n: int, why: str | None) -> None:
        with self._lock:
            self.lost += n
            if why is not None and self._reason is None:
                self._reason = why
            if self._warned:
                return
            self._warned = True
            reason = self._reason or "no answer"
        log.warning(
            "ctxwright: the OTLP collector at %s did not take %d span(s) (%s); the agent goes on and its "
            "store is complete, later failures are counted, not logged",
            self.shown,
            n,
            reason,
        )

    # -- the end -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Send what is queued and stop, within :attr:`close_timeout` seconds: when the collector
        has not taken everything by then, the rest is given up and counted (:attr:`lost`)."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        self._guard.deadline = time.monotonic() + self.close_timeout
        done = threading.Event()

        def shut() -> None:
            with quiet(self):
                try:
                    self.provider.shutdown()
                except Exception as exc:
                    self._noted(f"{type(exc).__name__}: {exc}")
            done.set()

        try:
            threading.Thread(target=shut, name="ctxwright-otlp-close", daemon=True).start()
        except RuntimeError:  # at interpreter exit no thread starts: the deadline bounds it instead
            shut()
        if not done.wait(self.close_timeout):
            self._guard.abandon()
            with self._lock:
                warned = self._warned
                self._warned = True
            if not warned:
                log.warning(
                    "ctxwright: the OTLP collector at %s did not take the last spans within %g s; they are not "
                    "delivered (the run's store is complete)",
                    self.shown,
                    self.close_timeout,
                )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxwright")
    except PackageNotFoundError:
        return "0"
