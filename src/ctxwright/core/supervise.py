"""The process between ctxwright and a program it starts (an MCP server, the agent under the
CI gate, a skill's script): it makes sure that nothing the program started outlives ctxwright,
whichever way ctxwright ends. (The docstring says "server" for the program.) It lives in
``core`` because the layers that start programs (``mcp``, ``skills``, ``ci``) may not import
one another; it imports nothing of ctxwright.

Run as ``python -I -S supervise.py PARENT_PID EXECUTABLE ARGV0 ARGS...`` (only the standard
library, no ``site``: it starts in a few milliseconds and cannot pick up a stray module), in
a session of its own (its caller spawns it with ``start_new_session``). Why a process,
not a flag on the server's: a server's own children are not ours to reach once it has
exited, and nothing runs in ctxwright after a SIGKILL. So this process

* forks the server into a process group of its own (``G``) and execs it there, with the
  signal dispositions a program expects (Python ignores SIGPIPE; ``exec`` would keep that);
* asks the kernel for SIGTERM when ctxwright dies (``PR_SET_PDEATHSIG``, Linux; on other
  systems it notices the new parent within a second), and becomes the reaper of the
  server's orphans (``PR_SET_CHILD_SUBREAPER``, Linux), so that none is left a zombie;
* on SIGTERM, SIGINT or SIGHUP (ctxwright's shutdown or death), sends SIGTERM to ``G``,
  and SIGKILL after :data:`GRACE_S`;
* when the server exits, ends what is left of ``G`` the same way (a server's children that
  keep running, or keep its stdout open, were the leak), then exits with the server's code;
* and ends, the same way, every process that is still its child by then: a descendant that
  left ``G`` (``setsid``, a daemon's double fork) is out of reach of any ``killpg``, but once
  the process that started it is gone the kernel re-parents it to the nearest subreaper --
  this process. It is read from ``/proc`` (Linux), signalled before it is reaped (a zombie
  keeps its pid, so the pid cannot name another process), and whatever such a child started
  is re-parented here in turn when it dies, until no child is left.

It keeps no copy of the server's stdin and stdout, so the server's EOF is ctxwright's.
Where there is no subreaper (not Linux), a child that left the process group escapes, as
from any ``killpg``.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence

#: Seconds the server's group has between SIGTERM and SIGKILL.
GRACE_S = 1.0
#: The most this process takes to end everything once it begins (the group's grace, then a
#: grace for a child that was re-parented here only when its parent died); a caller that
#: SIGKILLs this process waits at least that long first.
END_S = 2 * GRACE_S
#: Seconds between checks that ctxwright is still the parent (where no PDEATHSIG exists).
_POLL_S = 1.0
#: Seconds between steps while ending: a child re-parented here comes with no signal.
_STEP_S = 0.02
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def launch_argv(executable: str, argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` (found at ``executable``) under this supervisor, for
    the current process as its parent: spawn it with ``start_new_session=True``."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), executable, *argv]


def find_executable(command: str, env: Mapping[str, str], cwd: str | None) -> str:
    """The file ``command`` runs, as ``exec`` would find it (the program's ``PATH``);
    ``FileNotFoundError`` or ``PermissionError`` here, before anything is spawned, since the
    supervisor's own spawn would succeed either way."""
    if os.sep in command:
        path = os.path.abspath(os.path.join(cwd or os.getcwd(), command))
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", command)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", command)
        return path
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", command)
    return os.path.abspath(found)


def _prctl(option: int, value: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # a libc without prctl: the parent poll still works
        pass


def _run_server(executable: str, argv: list[str]) -> None:
    """In the forked child: a group of its own, default signals, then the server."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (*_STOP, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.setpgid(0, 0)
        os.execv(executable, argv)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc.strerror or exc}\n".encode(errors="replace"))
    os._exit(127)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap(server: int) -> int | None:
    """Reap every child that has exited (the server and, as the subreaper, its orphans);
    the server's exit status if it was among them."""
    status = None
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == server:
            status = raw


def _exit_code(raw: int) -> int:
    code = os.waitstatus_to_exitcode(raw)
    return 128 - code if code < 0 else code


def _children() -> list[int]:
    """This process's children, exited or not (Linux: ``/proc``; elsewhere none is known --
    and none is re-parented here, there being no subreaper)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:  # one thread: all of them
            return [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        pass  # a kernel without CONFIG_PROC_CHILDREN: every process's parent, read one by one
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    mine = str(me).encode()
    found = []
    for name in entries:
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and fields[1] == mine:
            found.append(int(name))
    return found


class _Ending:
    """Ending the server's group ``G`` and every child of this process: SIGTERM at once,
    SIGKILL :data:`GRACE_S` later. A child first seen later (re-parented here when its parent
    died) gets its SIGTERM then and its SIGKILL a grace after it, all within :data:`END_S`."""

    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        now = time.monotonic()
        self.kill_group_at = now + GRACE_S
        self.give_up = now + END_S
        self.kill_at: dict[int, float] = {}  # child -> when it gets SIGKILL
        #: once empty, ``G`` is never signalled again: its number may then name a new group
        self.group_gone = False
        _signal_group(pgid, signal.SIGTERM)
        self.step()

    def step(self) -> None:
        """Signal what is due. Called before reaping: an unreaped child keeps its pid (a zombie
        holds it), so every pid read here still names the child it named."""
        now = time.monotonic()
        self.group_gone = self.group_gone or not _group_alive(self.pgid)
        if now >= self.kill_group_at and not self.group_gone:
            _signal_group(self.pgid, signal.SIGKILL)
        due: dict[int, float] = {}
        for pid in _children():
            at = self.kill_at.get(pid)
            if at is None:
                at = min(max(self.kill_group_at, now + GRACE_S), self.give_up)
                _signal(pid, signal.SIGTERM)
            if now >= at:
                _signal(pid, signal.SIGKILL)
            due[pid] = at
        self.kill_at = due  # a pid no longer listed was reaped: forget it

    def finished(self) -> bool:
        return not self.kill_at and self.group_gone


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait(server: int, parent: int, wake: int) -> int:
    """Until the server exited and nothing it started is left: when it exits, when asked to
    stop or when ctxwright is gone, end its group and every child of this process
    (:class:`_Ending`). The server's wait status."""
    ending: _Ending | None = None
    raw: int | None = None
    while True:
        if ending is not None:
            ending.step()
        got = _reap(server)
        raw = got if raw is None else raw
        if ending is None and (raw is not None or os.getppid() != parent):
            ending = _Ending(server)
        done = ending is not None and (ending.finished() or time.monotonic() >= ending.give_up)
        if raw is not None and done:
            return raw  # past END_S: what the kernel does not let die is not waited for
        timeout = _POLL_S if ending is None else _STEP_S
        ready, _, _ = select.select([wake], [], [], timeout)
        woken = _drain(wake) if ready else b""  # always emptied, or select would spin
        if ending is None and any(b in _STOP for b in woken):
            ending = _Ending(server)


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 512)
    except (BlockingIOError, InterruptedError):
        return b""


def main(args: list[str]) -> int:
    parent, executable, argv = int(args[0]), args[1], args[2:]
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for sig in (*_STOP, signal.SIGCHLD):
        signal.signal(sig, lambda *_: None)
    if os.getppid() != parent:  # ctxwright died before PDEATHSIG was set
        return 1
    server = os.fork()
    if server == 0:
        _run_server(executable, argv)
    with contextlib.suppress(OSError):
        os.setpgid(server, server)  # also here: no signal to the group may miss the child
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return _exit_code(_wait(server, parent, wake_r))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
