"""Threads for tool calls, kept between calls instead of started for each one.

Why: the agent loop runs each tool call in a thread of its own, so one hung call cannot stall
the loop (``agent/loop.py`` waits for each call until its deadline, then abandons it and
answers with a timeout error). Starting a thread costs more than most tool calls do, on every
call of a long session. So a call runs on an idle worker when there is one and on a new one
otherwise, and a worker whose call has finished waits for the next one -- up to
:data:`MAX_IDLE` of them, shared by every agent of the process. A hung call keeps its worker
until it returns; it never holds up another call, since a call that finds no idle worker gets
a new one. Workers are daemon threads, like the threads they replace: an abandoned call never
keeps the process from exiting.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable

#: Idle workers kept for the next calls (a reply's parallel batch is rarely wider).
MAX_IDLE = 8

_Job = tuple[Callable[[], None], threading.Event, str]


class _Worker:
    def __init__(self, pool: Workers) -> None:
        self.pool = pool
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="tool-worker")
        self.thread.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            fn, done, name = self.jobs.get()
            me.name = name
            try:
                fn()
            except BaseException:  # as an own thread would: reported, and its caller waits out the deadline
                threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), me)))
            else:
                done.set()
            me.name = "tool-worker"
            del fn, done
            if not self.pool._park(self):
                return


class Workers:
    """Runs callables on daemon threads that are reused once they are done."""

    def __init__(self, max_idle: int = MAX_IDLE) -> None:
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None], name: str = "tool") -> threading.Event:
        """Start ``fn`` now, on an idle worker or a new one; the event is set when it returns
        (not when it raises: a caller waiting on it then waits until its own deadline, as it
        would for a thread that died)."""
        done = threading.Event()
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self)
        worker.jobs.put((fn, done, name))
        return done

    def _park(self, worker: _Worker) -> bool:
        """A worker's call is done: keep it for the next call, unless enough are idle."""
        with self._lock:
            if len(self._idle) >= self.max_idle:
                return False
            self._idle.append(worker)
            return True

    @property
    def idle(self) -> int:
        return len(self._idle)


#: The process's workers, shared by every agent (idle threads are bounded process-wide).
WORKERS = Workers()

__all__ = ["MAX_IDLE", "WORKERS", "Workers"]
