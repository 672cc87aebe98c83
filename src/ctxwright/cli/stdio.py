"""The command's standard streams: a prompt read from stdin, and a reader of stdout that went
away.

``ctxwright run -`` reads the prompt from stdin (``echo q | ctxwright run -``, ``run - < task.md``),
as UTF-8 and at most :data:`MAX_STDIN_PROMPT` bytes: ``cat /dev/zero | ctxwright run -`` must
end with a message, not with the memory.

A reader of stdout that went away (``ctxwright show ID --json | head``) ends the command
quietly. Why: a Unix tool writing into a pipe whose reader exited is killed by ``SIGPIPE`` and says
nothing; the shell reports status 141 (128 + 13). Python ignores ``SIGPIPE`` and raises
``BrokenPipeError`` at the next write instead, which would print an error line -- and then
Python's own flush of stdout at exit fails again with "Exception ignored ... BrokenPipeError".
So the entry point asks :func:`stdout_gone` and, if so, :func:`end_quietly` points stdout at
``/dev/null`` (the recipe of Python's ``signal`` documentation) and exits 141, as the tool
killed by the signal would have. A broken pipe that is not stdout's (a server's stdin, a
socket) is an error like any other.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys

from ctxwright.errors import CtxwrightError

__all__ = ["MAX_STDIN_PROMPT", "SIGPIPE_STATUS", "end_quietly", "prompt_from_stdin", "stdout_gone"]

#: the status a shell reports for a process killed by SIGPIPE
SIGPIPE_STATUS = 128 + int(getattr(signal, "SIGPIPE", 13))
#: the longest prompt read from stdin (far beyond any model's context window)
MAX_STDIN_PROMPT = 16 * 1024 * 1024


def prompt_from_stdin() -> str:
    """The prompt on stdin (``ctxwright run -``), its final newline dropped (``echo`` adds one).
    An empty stdin, more than :data:`MAX_STDIN_PROMPT` bytes or text that is not UTF-8 is a
    :class:`~ctxwright.errors.CtxwrightError` that says so."""
    if sys.stdin is None:
        raise CtxwrightError("run -: there is no stdin to read the prompt from; give it as an argument")
    if sys.stdin.isatty():
        print("reading the prompt from stdin; end it with Ctrl-D", file=sys.stderr)
    data = sys.stdin.buffer.read(MAX_STDIN_PROMPT + 1)
    if len(data) > MAX_STDIN_PROMPT:
        raise CtxwrightError(f"run -: the prompt on stdin is over {MAX_STDIN_PROMPT:,} bytes; give a shorter one")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CtxwrightError(
            f"run -: the prompt on stdin is not UTF-8 text (byte {exc.start}); convert it first"
        ) from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise CtxwrightError('run -: stdin was empty; pipe the prompt in: echo "the task" | ctxwright run -')
    return text


def stdout_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone: the write end then polls
    ``POLLERR`` (``POLLHUP`` for a socket). Where that cannot be asked (no ``poll``, a stdout
    that is not a file), a broken pipe is taken to be stdout's, as it almost always is."""
    try:
        fd = sys.stdout.fileno()
        mode = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):
        return True
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return False  # a file or a terminal: the broken pipe was something else's
    if not hasattr(select, "poll"):
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def end_quietly() -> int:
    """Point stdout at ``/dev/null`` (so nothing still buffered fails again at exit) and give
    the status to exit with."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return SIGPIPE_STATUS
