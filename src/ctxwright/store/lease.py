"""One writer per session: the lease a harness holds on the session it runs.

Why: a session's events are numbered ``0, 1, 2, ...`` by the process appending them, from
the events it loaded. Two processes resuming the same session both append event ``n``; the
second insert fails (``IntegrityError`` on the events' primary key) and the reply it was
storing is lost -- and even without the collision, two interleaved conversations in one
trajectory are not a request any provider cached. So a harness takes the session's lease
(a row of ``session_leases``, ``store/sessions.py``) before it writes anything, and a second
process is refused with :class:`~ctxwright.errors.SessionInUse` naming the holder: pid,
host, since when.

A lease outlives a process killed with ``kill -9`` (nothing runs to delete it). It is
*stale*, and taken over, when its process is gone: same host, and the pid no longer exists
or now belongs to a process started at another time (pids are reused; the start time is
read from ``/proc`` on Linux). A lease of another host cannot be checked from here: it is
refused, and ``take_over=True`` (CLI ``--take-over``) overrides that after the user checked.
Within one process, a newer harness on the same session takes the lease from an older one
(the older one is refused if it runs again), so ``h2 = Harness.resume(h.session_id)`` works
without closing ``h`` first.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from ctxwright.errors import SessionInUse
from ctxwright.store.sessions import LeaseRow, Store

_BOOT_TIME: float | None = None


def _boot_time() -> float | None:
    global _BOOT_TIME
    if _BOOT_TIME is None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                for line in f:
                    if line.startswith("btime "):
                        _BOOT_TIME = float(line.split()[1])
                        break
        except OSError:
            return None
    return _BOOT_TIME


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch, Linux ``/proc``); ``None`` when
    unknown (another OS, or no such process)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    boot = _boot_time()
    try:
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, after "pid (comm)"
        hz = os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None
    return None if boot is None else round(boot + ticks / hz, 2)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (signal 0 checks without signalling).
    On Windows ``os.kill`` would terminate it, so there every pid counts as alive."""
    if os.name == "nt":
        return True
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    except OSError:
        return False
    return True


def is_stale(lease: LeaseRow, *, host: str | None = None) -> bool:
    """Whether ``lease``'s process is known to be gone (only decidable on this host)."""
    if lease.host != (host or socket.gethostname()):
        return False
    if not pid_alive(lease.pid):
        return True
    if lease.process_started is not None:
        now = process_started(lease.pid)
        if now is not None and abs(now - lease.process_started) > 1.0:
            return True  # the pid was reused by another process
    return False


@dataclass
class Lease:
    """The lease one harness holds; :meth:`release` when done (the harness's ``close``)."""

    store: Store
    row: LeaseRow
    #: the store's lease mark when the lease was last read as held (``Store.lease_mark``)
    _held_at: tuple[object, int] | None = field(default=None, repr=False, compare=False)

    @property
    def session_id(self) -> str:
        return self.row.session_id

    def held(self) -> bool:
        """Still ours (a newer harness of this process may have taken it)."""
        current = self.store.lease(self.row.session_id)
        return current is not None and current.holder == self.row.holder

    def check(self) -> None:
        """Raise :class:`SessionInUse` unless this lease is still held. Runs before every step
        of a session, so the lease row is read again only when something was written since it
        was last read as held (:meth:`Store.lease_mark`)."""
        mark = self.store.lease_mark()
        if mark == self._held_at:
            return
        current = self.store.lease(self.row.session_id)
        if current is not None and current.holder == self.row.holder:
            self._held_at = mark
            return
        if current is None:  # released by someone else: take it back if nobody holds it
            acquire(self.store, self.row.session_id, holder=self.row.holder)
            return
        raise SessionInUse(_busy_message(self.row.session_id, current, taken=True))

    def release(self) -> None:
        # a short wait: a lease this ending process cannot delete is stale once it exits
        self.store.release_lease(self.row.session_id, self.row.holder, wait_s=2.0)


def acquire(store: Store, session_id: str, *, take_over: bool = False, holder: str | None = None) -> Lease:
    """Take the lease of ``session_id`` for this process, or raise :class:`SessionInUse`."""
    pid = os.getpid()
    host = socket.gethostname()
    row = LeaseRow(
        session_id=session_id,
        holder=holder or uuid.uuid4().hex,
        pid=pid,
        host=host,
        process_started=process_started(pid),
        since=time.time(),
    )

    def may_take(other: LeaseRow) -> bool:
        same_process = other.host == host and other.pid == pid
        return take_over or same_process or is_stale(other, host=host)

    standing = store.acquire_lease(row, may_take)
    if standing is not None:
        raise SessionInUse(_busy_message(session_id, standing))
    return Lease(store, row)


def _busy_message(session_id: str, other: LeaseRow, *, taken: bool = False) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(other.since))
    who = f"process {other.pid} on host {other.host}, since {since}"
    if taken:
        return (
            f"session {session_id} was taken over by another harness ({who}); continue it there, or resume it "
            "again once that one is closed"
        )
    here = other.host == socket.gethostname()
    check = (
        f"if that process is gone (check with `ps -p {other.pid}`), run again with --take-over"
        if here
        else f"ctxwright cannot check a process on {other.host} from here; if it is gone, run again with --take-over"
    )
    return (
        f"session {session_id} is being run by {who}: one session has one writer at a time, or the two "
        f"runs' events would collide. Wait for that run to finish, or start a new session; {check} "
        "(Harness(take_over=True))."
    )


__all__ = ["Lease", "acquire", "is_stale", "pid_alive", "process_started"]
