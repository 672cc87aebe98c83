"""The process between ctxwright and a program it starts (an MCP server, the agent under the
CI gate): it makes sure that nothing the program started outlives ctxwright, whichever way
ctxwright ends. (The docstring says "server" for the program.)

Run as ``python -I -S supervise.py PARENT_PID EXECUTABLE ARGV0 ARGS...`` (only the standard
library, no ``site``: it starts in a few milliseconds and cannot pick up a stray module), in
a session of its own (the transport spawns it with ``start_new_session``). Why a process,
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
  keep running, or keep its stdout open, were the leak), then exits with the server's code.

It keeps no copy of the server's stdin and stdout, so the server's EOF is ctxwright's.
A child that leaves the process group (``setsid``, a daemon) escapes by design, as from
any ``killpg``.
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

#: Seconds the server's group has between SIGTERM and SIGKILL; well under the 2 s the
#: transport waits before it signals this process in turn.
GRACE_S = 1.0
#: Seconds between checks that ctxwright is still the parent (where no PDEATHSIG exists).
_POLL_S = 1.0
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


def _wait(server: int, parent: int, wake: int) -> int:
    """Until the server exits: end its group when asked to stop or when ctxwright is gone."""
    kill_at: float | None = None
    while True:
        raw = _reap(server)
        if raw is not None:
            return raw
        now = time.monotonic()
        if kill_at is None and os.getppid() != parent:
            kill_at = _begin_end(server)
        if kill_at is not None and now >= kill_at:
            _signal_group(server, signal.SIGKILL)
        timeout = _POLL_S if kill_at is None else max(0.0, min(0.05, kill_at - now))
        ready, _, _ = select.select([wake], [], [], timeout)
        woken = _drain(wake) if ready else b""  # always emptied, or select would spin
        if kill_at is None and any(b in _STOP for b in woken):
            kill_at = _begin_end(server)


def _begin_end(pgid: int) -> float:
    _signal_group(pgid, signal.SIGTERM)
    return time.monotonic() + GRACE_S


def _drain(fd: int) -> bytes:
    try:
        return os.read(fd, 512)
    except (BlockingIOError, InterruptedError):
        return b""


def _end_group(pgid: int) -> None:
    """What is left of the server's group after it exited: SIGTERM, then SIGKILL."""
    if not _group_alive(pgid):
        return
    kill_at = _begin_end(pgid)
    killed = False
    give_up = kill_at + GRACE_S
    while _group_alive(pgid) and time.monotonic() < give_up:
        if not killed and time.monotonic() >= kill_at:
            _signal_group(pgid, signal.SIGKILL)
            killed = True
        _reap(-1)
        time.sleep(0.01)
    _signal_group(pgid, signal.SIGKILL)
    _reap(-1)


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
    raw = _wait(server, parent, wake_r)
    _end_group(server)
    return _exit_code(raw)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
