"""``ctxwright proxy --workers N``: N processes serving one listening socket, each relaying and
recording into the same store.

Why processes: one proxy process relays on one event loop and records on one thread, so a
team's agents behind one proxy share one core. Several processes on one socket (the kernel
hands each new connection to one of them) spread that over the machine's cores; with a
PostgreSQL store (``--db postgresql://...``) proxies on several hosts can record into one
database too. Nothing that places a request lives in one process's memory
(``proxy/sessions.py``, ``proxy/store.py``), so N processes place each request as one would.

How: the parent binds the socket, then forks the workers (the store is opened in each worker,
after the fork: a database connection must not be shared by two processes). A worker that
dies (a crash, ``kill -9``) loses only the exchanges it had in flight -- their clients see
the connection drop; every exchange it recorded is in the store -- and the parent starts
another in its place. A worker ends when its parent does (``PR_SET_PDEATHSIG``), so killing
the parent leaves no worker serving. And a worker holds the last piece of each complete
answer until its exchange is written (``ProxyConfig.record_before_end``): a client that got its
whole answer finds it recorded, even when the worker is killed right after. Ctrl-C (or SIGTERM to the parent) stops every worker the
way one proxy stops: requests in flight finish, the recorder's queue is drained.

A worker does not need its store to start: it opens it on its recorder's thread
(``proxy/recorder.py``), and while the store is away -- a PostgreSQL server restarting -- it
relays all the same and keeps its exchanges in a recovery file, recorded once the store
answers. So a worker replaced while the store is down serves at once instead of exiting, and
the parent never takes a store outage for workers that cannot start.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any

from ctxwright.errors import CtxwrightError
from ctxwright.proxy.recorder import stderr_line
from ctxwright.proxy.serve import HOLD_END_S, bind, serve_on

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from ctxwright.proxy.recorder import RecordedExchange, Recorder
    from ctxwright.proxy.server import ProxyConfig

#: the most workers one machine is given (a typo such as ``--workers 4000`` is refused)
MAX_WORKERS = 64
#: a worker that exits this soon after it started counts as failing to start
QUICK_EXIT_S = 5.0
#: quick exits in a row after which the parent stops instead of starting another
QUICK_EXITS = 5
_PR_SET_PDEATHSIG = 1

Observer = Callable[["RecordedExchange"], None]


def _end_with_parent(parent: int) -> None:
    """Have the kernel send SIGTERM to this process when its parent dies (Linux); a parent
    already gone by now ends it at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def _worker(
    index: int,
    parent: int,
    sock: socket.socket,
    config: ProxyConfig,
    target: str,
    quiet: bool,
    make_observer: Callable[[], Observer | None] | None,
) -> None:
    """One worker: its own store connection (opened by its recorder), recorder and event loop
    on the shared socket."""
    _end_with_parent(parent)
    # Its own process group: a Ctrl-C at the terminal reaches the parent only, which passes it
    # on once -- a second SIGINT makes uvicorn drop the requests in flight.
    os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C

    def out(line: str) -> None:
        sys.stdout.write(line + "\n")  # one write: the workers share stdout (see stderr_line)
        sys.stdout.flush()

    observer = make_observer() if make_observer is not None else None

    def warn(line: str) -> None:
        stderr_line(line.replace("ctxwright proxy:", f"ctxwright proxy: worker {index}:", 1))

    try:
        recorder = serve_on(sock, config, target, printer=None if quiet else out, observer=observer, warn=warn)
        stderr_line(
            f"ctxwright proxy: worker {index} (pid {os.getpid()}) stopped; {recorder.summary()}{_audits(recorder)}"
        )
    finally:
        close = getattr(observer, "close", None)
        if callable(close):
            close()


def _audits(recorder: Recorder) -> str:
    """What the worker's live audit read back from the store (``proxy/session_audit.py``): at
    most each call its siblings recorded once, and each session it met already started once.
    Figures far above those would mean whole sessions re-read as their calls move between
    workers."""
    audits = getattr(recorder, "audits", None)  # there once the store was opened
    if audits is None:
        return ""
    return f"; its live audit read {audits.read_back} call(s) back from the store, rebuilt {audits.rebuilt} session(s)"


def serve_workers(
    config: ProxyConfig,
    target: str,
    *,
    host: str,
    port: int,
    workers: int,
    quiet: bool = False,
    make_observer: Callable[[], Observer | None] | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """Serve with ``workers`` processes until interrupted; how many workers were started in all
    (restarts included). ``target`` is the store (a path or a URL) each worker opens."""
    if not 1 <= workers <= MAX_WORKERS:
        raise CtxwrightError(f"--workers {workers}: give a number of processes from 1 to {MAX_WORKERS}")
    tell = say or stderr_line
    if config.record_before_end is None:
        config = replace(config, record_before_end=HOLD_END_S)
    sock = bind(host, port)
    sock.listen(1024)
    ctx = multiprocessing.get_context("fork")  # the socket and the loaded modules are inherited
    parent = os.getpid()
    started = 0

    def start(index: int) -> BaseProcess:
        nonlocal started
        proc = ctx.Process(
            target=_worker,
            args=(index, parent, sock, config, target, quiet, make_observer),
            name=f"ctxwright-proxy-worker-{index}",
        )
        proc.start()
        started += 1
        tell(f"ctxwright proxy: worker {index} started (pid {proc.pid})")
        return proc

    def stop_all(procs: dict[int, Any]) -> None:
        for proc in procs.values():
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        for proc in procs.values():
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)

    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    procs: dict[int, Any] = {}
    born: dict[int, float] = {}
    quick = 0
    try:
        for i in range(workers):
            procs[i] = start(i)
            born[i] = time.monotonic()
        while True:
            wait([p.sentinel for p in procs.values()])
            for i, proc in list(procs.items()):
                if proc.is_alive():
                    continue
                code = proc.exitcode
                why = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
                quick = quick + 1 if time.monotonic() - born[i] < QUICK_EXIT_S else 0
                if quick >= QUICK_EXITS:
                    raise CtxwrightError(
                        f"proxy workers keep exiting at start ({why}, {quick} in a row): see the lines above; "
                        "nothing more is started"
                    )
                tell(f"ctxwright proxy: worker {i} (pid {proc.pid}) ended ({why}); starting another")
                procs[i] = start(i)
                born[i] = time.monotonic()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop_all(procs)
        sock.close()
    return started


__all__ = ["HOLD_END_S", "MAX_WORKERS", "serve_workers"]
