"""Running the proxy in the foreground (``ctxwright proxy``) or on a thread (tests, benchmarks)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from ctxwright.errors import CtxwrightError
from ctxwright.proxy.recorder import RecordedExchange, Recorder
from ctxwright.proxy.server import ProxyConfig, ProxyThread, build_app, listening_socket, uvicorn_config
from ctxwright.store.sessions import Store

#: the GIL switch interval of a serving proxy (CPython's default is 5 ms)
SWITCH_INTERVAL_S = 0.0005


@dataclass
class RecordingProxy:
    """A proxy on a background thread with its recorder: ``with RecordingProxy.start(...) as p``."""

    thread: ProxyThread
    recorder: Recorder

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
    ) -> RecordingProxy:
        recorder = Recorder(store, config.upstream, printer=printer, observer=observer)
        thread = ProxyThread(build_app(config, recorder.submit), host, port, config.clients).start()
        return cls(thread, recorder)

    @property
    def url(self) -> str:
        return self.thread.url

    def stop(self) -> None:
        self.thread.stop()
        self.recorder.close()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
    printer: Callable[[str], None] = print,
    observer: Callable[[RecordedExchange], None] | None = None,
) -> Recorder:
    """Serve until interrupted (Ctrl-C); the recorder is drained before this returns."""
    sock = bind(host, port)
    try:
        return serve_on(sock, config, store, printer=printer, observer=observer)
    finally:
        sock.close()


def serve_on(
    sock: socket.socket,
    config: ProxyConfig,
    store: Store,
    *,
    printer: Callable[[str], None] = print,
    observer: Callable[[RecordedExchange], None] | None = None,
) -> Recorder:
    """Serve on a bound socket until interrupted -- one proxy, or one of ``--workers``'
    processes sharing the socket (``proxy/workers.py``); the recorder is drained before this
    returns. The socket is left open (its owner closes it)."""
    # The recorder thread decodes, audits and writes while the event loop relays bytes; with
    # CPython's default 5 ms GIL switch interval the loop can wait that long for the GIL
    # after every socket call. A shorter interval bounds what recording adds to a request.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    recorder = Recorder(store, config.upstream, printer=printer, observer=observer)
    app = build_app(config, recorder.submit)
    host, port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn_config(app, host, port, config.clients))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # uvicorn shuts down cleanly on Ctrl-C, then raises it again for the caller: a normal stop here
    finally:
        recorder.close()
    return recorder
