"""The confirmation gate on the command line: ``--approve ask|deny|allow-listed`` and a y/N
prompt on the terminal.

Why the terminal only: a prompt nobody can answer (a pipe, a CI job, a cron line) would hang
the agent or, worse, read its answer from data piped in. So ``ask`` prompts only when both
standard input and standard error are a terminal; otherwise nobody is asked and a flagged
call is denied (``defence/gate.py``: ``no_approver``). The answer must be typed: anything but
``y``/``yes`` -- Enter included -- is a deny, as is silence past the timeout.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from typing import IO, Any

from rich.console import Console
from rich.text import Text

from ctxwright.defence.gate import GateRequest

__all__ = ["can_prompt", "cli_approve", "terminal_approver"]


def can_prompt(stdin: IO[str] | None = None, err: Console | None = None) -> bool:
    """Whether a person can be asked: standard input and standard error are a terminal."""
    stream = stdin if stdin is not None else sys.stdin
    try:
        tty_in = stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        tty_in = False
    return bool(tty_in and (err.is_terminal if err is not None else sys.stderr.isatty()))


def terminal_approver(
    err: Console, stdin: IO[str] | None = None, timeout_s: float = 120.0
) -> Callable[[GateRequest], bool]:
    """A callback that shows the request on ``err`` and reads y/N from the terminal, giving up
    (a deny) after ``timeout_s`` seconds without a line."""

    def ask(request: GateRequest) -> bool:
        stream = stdin if stdin is not None else sys.stdin
        err.print(Text("confirm ", style="bold red") + Text(request.describe()), soft_wrap=True)
        err.print(Text(f"run it? [y/N] (no answer in {timeout_s:g} s = no) "), end="")
        err.file.flush()
        ready, _, _ = select.select([stream], [], [], timeout_s)
        if not ready:
            err.print(Text("no answer: denied", style="dim"))
            return False
        answer = stream.readline().strip().lower()
        return answer in ("y", "yes")

    return ask


def cli_approve(mode: str | None, err: Console, stdin: IO[str] | None = None, timeout_s: float | None = None) -> Any:
    """The ``approve`` option for the Harness from ``--approve``: ``ask`` (the default) becomes
    the terminal prompt when a person can answer, else stays the mode ``ask`` -- which, with
    nobody to ask, denies what it would have asked about."""
    chosen = mode or "ask"
    if chosen == "ask" and can_prompt(stdin, err):
        # a little under the gate's own deadline, so the prompt itself says it gave up
        wait = max(1.0, (timeout_s if timeout_s is not None else 120.0) - 1.0)
        return terminal_approver(err, stdin, wait)
    return chosen
