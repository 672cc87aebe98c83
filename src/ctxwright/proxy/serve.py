"""Running the proxy in the foreground (``ctxwright proxy``) or on a thread (tests, benchmarks).

A served proxy holds the last piece of each complete answer until its exchange is recorded
(``ProxyConfig.record_before_end``, at most :data:`HOLD_END_S`): a client that has its whole
answer finds it in the store, even if the process is killed the moment after, and a recorder
slower than the relay slows the answers' ends instead of queueing exchanges in memory (the
backlog's bound, ``Recorder.admit``, covers the answers whose hold ran out). SIGTERM stops it
as Ctrl-C does: the requests in flight finish and the recorder's queue is drained.
"""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import uvicorn

from ctxwright.errors import CtxwrightError
from ctxwright.proxy.compress import BodyCompressor
from ctxwright.proxy.recorder import BACKLOG_LIMIT, RecordedExchange, Recorder, stderr_line
from ctxwright.proxy.server import ProxyConfig, ProxyThread, build_app, listening_socket, uvicorn_config
from ctxwright.store.sessions import Store

#: the GIL switch interval of a serving proxy (CPython's default is 5 ms)
SWITCH_INTERVAL_S = 0.0005
#: the longest a served proxy holds the end of an answer for its record (a store that slow is
#: away: the exchange is then spooled, ``proxy/recorder.py``)
HOLD_END_S = 30.0


@dataclass
class RecordingProxy:
    """A proxy on a background thread with its recorder: ``with RecordingProxy.start(...) as p``."""

    thread: ProxyThread
    recorder: Recorder
    compressor: BodyCompressor | None = None

    @classmethod
    def start(
        cls,
        config: ProxyConfig,
        store: Store,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        printer: Callable[[str], None] | None = None,
        observer: Callable[[RecordedExchange], None] | None = None,
        warn: Callable[[str], None] | None = stderr_line,
        backlog_limit: int = BACKLOG_LIMIT,
    ) -> RecordingProxy:
        recorder = Recorder(
            store,
            config.label,
            printer=printer,
            observer=observer,
            warn=warn,
            backlog_limit=backlog_limit,
            pricing=config.pricing,
            rules=config.rules(),
        )
        compressor = compressor_for(config, store, warn)
        app = build_app(config, recorder.submit, recorder.admit, compressor)
        thread = ProxyThread(app, host, port, config.clients).start()
        return cls(thread, recorder, compressor)

    @property
    def url(self) -> str:
        return self.thread.url

    def stop(self) -> None:
        self.thread.stop()
        if self.compressor is not None:
            self.compressor.close()
        self.recorder.close()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def compressor_for(
    config: ProxyConfig, store: Store | str, warn: Callable[[str], None] | None
) -> BodyCompressor | None:
    """``--compress``'s rewriter over ``store`` (``None`` without it): it reads bodies whole up
    to the record cap, the bound the recording already keeps."""
    if not config.compress:
        return None
    return BodyCompressor(store, cap=config.record_cap, warn=warn)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, or one clear error (port taken, address not here)."""
    sock = listening_socket(host)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CtxwrightError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}. Pick another --port (or stop what uses it)."
        ) from None
    return sock


def serve(
    config: ProxyConfig,
    store: Store,
    *,
    host: str,
    port: int,
    printer: Callable[[str], None] | None = print,
    observer: Callable[[RecordedExchange], None] | None = None,
    warn: Callable[[str], None] = stderr_line,
    on_recorder: Callable[[Recorder], None] | None = None,
) -> Recorder:
    """Serve until interrupted (Ctrl-C, SIGTERM); the recorder is drained before this returns."""
    sock = bind(host, port)
    try:
        return serve_on(sock, config, store, printer=printer, observer=observer, warn=warn, on_recorder=on_recorder)
    finally:
        sock.close()


def serve_on(
    sock: socket.socket,
    config: ProxyConfig,
    store: Store | str,
    *,
    printer: Callable[[str], None] | None = print,
    observer: Callable[[RecordedExchange], None] | None = None,
    warn: Callable[[str], None] = stderr_line,
    on_recorder: Callable[[Recorder], None] | None = None,
) -> Recorder:
    """Serve on a bound socket until interrupted -- one proxy, or one of ``--workers``'
    processes sharing the socket (``proxy/workers.py``); the recorder is drained before this
    returns. The socket is left open (its owner closes it). ``store`` may be a target the
    recorder opens itself (a worker: relaying starts even while the store is away)."""
    # The recorder thread decodes, audits and writes while the event loop relays bytes; with
    # CPython's default 5 ms GIL switch interval the loop can wait that long for the GIL
    # after every socket call. A shorter interval bounds what recording adds to a request.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if config.record_before_end is None:
        config = replace(config, record_before_end=HOLD_END_S)
    recorder = Recorder(
        store,
        config.label,
        printer=printer,
        observer=observer,
        warn=warn,
        pricing=config.pricing,
        rules=config.rules(),
    )
    if on_recorder is not None:  # what records into it besides the relay (``--keep-warm``'s refreshes)
        on_recorder(recorder)
    compressor = compressor_for(config, store, warn)
    app = build_app(config, recorder.submit, recorder.admit, compressor)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn_config(app, host, port, config.clients))
    # uvicorn stops cleanly on SIGTERM too, then raises the signal again with the handler it
    # found: left at the default, that ends the process before the recorder's queue is drained
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if main else None
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shuts down cleanly on Ctrl-C, then raises it again for the caller: a normal stop here
    finally:
        try:
            if compressor is not None:
                compressor.close()
            recorder.close()
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
    return recorder
