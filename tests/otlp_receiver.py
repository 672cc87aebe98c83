"""A real OTLP/HTTP trace receiver for the telemetry tests: it decodes every
``ExportTraceServiceRequest`` (protobuf; gzip or deflate bodies too) into plain spans, and can
misbehave as collectors do.

Why our own: the test must see what reached the wire -- the SDK's in-memory exporter would
skip the encoding, the HTTP client, the retries and the timeouts that decide whether a dead or
stalled collector can hold an agent up. Behaviours (``mode``): ``ok`` (answers 200 with an empty
``ExportTraceServiceResponse``), ``fail`` (answers 500 to every request, counting them),
``stall`` (reads the request and never answers until the receiver stops). A collector that is
down is a port nothing listens on (:func:`dead_url`).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2


@dataclass
class Span:
    """One received span, decoded: ids as hex, attributes as Python values."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status: int
    events: list[tuple[str, dict[str, Any]]]
    resource: dict[str, Any]
    scope: str


def value(v: common_pb2.AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind is None:
        return None
    return getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[Span]:
    req = trace_service_pb2.ExportTraceServiceRequest()
    req.ParseFromString(body)
    out = []
    for rs in req.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    Span(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_id=s.parent_span_id.hex(),
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        attributes=_attrs(s.attributes),
                        status=s.status.code,
                        events=[(e.name, _attrs(e.attributes)) for e in s.events],
                        resource=resource,
                        scope=ss.scope.name,
                    )
                )
    return out


@dataclass
class Receiver:
    """``with Receiver().start() as r: ... r.url``; received spans in :attr:`spans`."""

    mode: str = "ok"
    spans: list[Span] = field(default_factory=list)
    requests: int = 0
    raw: list[bytes] = field(default_factory=list)
    encodings: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: threading.Event = field(default_factory=threading.Event)
    server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                encoding = (self.headers.get("content-encoding") or "").lower()
                with receiver.lock:
                    receiver.requests += 1
                    receiver.raw.append(body)
                    receiver.encodings.append(encoding)
                if receiver.mode == "stall":
                    receiver.stopped.wait(600)
                    return
                if receiver.mode == "fail":
                    self.send_response(500)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                spans = decode(body)
                with receiver.lock:
                    receiver.spans.extend(spans)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, n: int, timeout: float = 60.0) -> list[Span]:
        """The spans once at least ``n`` arrived (or all there are after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.spans) >= n:
                    break
            time.sleep(0.05)
        with self.lock:
            return list(self.spans)

    def stop(self) -> None:
        self.stopped.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def dead_url() -> str:
    """An endpoint on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
