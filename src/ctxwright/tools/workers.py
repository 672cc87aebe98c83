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

A finished call is signalled by :class:`Done`, one bare lock, rather than a
``threading.Event`` (a condition variable over a lock, and a new lock for each wait): the hand-off
to a worker and back happens on every tool call of a session, and its cost is the part of a
turn that no caching removes.
"""

from __future__ import annotations

import _thread
import queue
import sys
import threading
import time
from collections.abc import Callable

#: Idle workers kept for the next calls (a reply's parallel batch is rarely wider).
MAX_IDLE = 8
#: The longest a wait for a call sleeps before the loop looks at pending signals (Ctrl-C).
WAIT_SLICE = 0.25


class Done:
    """Set once when a call returns; waited on by the loop with a deadline (``threading.Event``'s
    ``wait``/``is_set``, on one lock held until the call returns)."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._set = False
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def set(self) -> None:
        """The call returned (called once, by the worker)."""
        self._set = True
        self._lock.release()

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the call returned, waiting at most ``timeout`` seconds (``None``: until it does).

        Why in slices of :data:`WAIT_SLICE`: Python runs signal handlers in the main thread
        only, and a lock wait is cut short only when the kernel hands the signal to the thread
        that waits. A Ctrl-C the kernel gives to the worker instead (more likely on a loaded
        machine) would reach the loop only when the whole deadline -- the tool's timeout -- had
        passed; waking every slice, the loop raises ``KeyboardInterrupt`` within one.
        """
        if self._set:
            return True
        if timeout is not None and timeout <= 0:
            got = self._lock.acquire(False)
        else:
            deadline = None if timeout is None else time.monotonic() + timeout
            got = False
            while not got:
                left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, deadline - time.monotonic())
                if left <= 0:
                    break
                got = self._lock.acquire(True, left)
        if not got:
            return False
        self._lock.release()  # let any other waiter through as well
        return True


_Job = tuple[Callable[[], None], Done, str]


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
            returned = False
            try:
                fn()
                returned = True
            except BaseException:  # as an own thread would: reported, and its caller waits out the deadline
                threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), me)))
            me.name = "tool-worker"
            del fn
            keep = self.pool._park(self)
            # the caller is told last, just before this thread waits again: a worker still
            # running when the loop goes on would take the GIL back from it at its next
            # release (every SQLite write), one more thread switch for each
            if returned:
                done.set()
            del done
            if not keep:
                return


class Workers:
    """Runs callables on daemon threads that are reused once they are done."""

    def __init__(self, max_idle: int = MAX_IDLE) -> None:
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def submit(self, fn: Callable[[], None], name: str = "tool") -> Done:
        """Start ``fn`` now, on an idle worker or a new one; the :class:`Done` is set when it
        returns (not when it raises: a caller waiting on it then waits until its own deadline,
        as it would for a thread that died)."""
        done = Done()
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

__all__ = ["MAX_IDLE", "WORKERS", "Done", "Workers"]
