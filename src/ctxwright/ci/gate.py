"""The CI gate: run an agent against the replay of its golden trace and judge what it sent.

Why a replay, not the provider: a cache regression is a property of the requests, not of the
model's answers. The replay server (``replay/server.py``) answers the agent with the replies
the golden recorded, so the agent walks the recorded conversation again -- same tool calls,
same ids -- and every byte that differs from the golden's requests is the change under test.
That costs no API call, runs offline in CI, and is deterministic.

The agent is any program: it is started with the environment the official SDKs read
(``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_API_KEY``)
pointing at the replay, under ``core/supervise.py`` in a session of its own, so neither it nor
anything it starts outlives the gate (a timeout, a Ctrl-C, the gate killed) -- not even a child
that started a session of its own: the supervisor is its subreaper and ends it too. Or it is a Python
callable given that environment (:func:`ctxwright.testing.gate`).

The result is the judge's (``ci/judge.py``), plus why the run could not be judged in full:
the agent failed or timed out, or it left the recording (a divergence).

With ``resume_after=N`` the run is stopped after N calls as a user would stop it and resumed
(``ci/resume.py``: resume parity); both halves are judged against the golden as one run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ctxwright.audit.logs import ParseProblem, read_records
from ctxwright.cache.prices import Pricing
from ctxwright.ci.judge import (
    ANSWERED,
    DIVERGED,
    UNPLACED,
    Call,
    Judgement,
    Regression,
    Tolerances,
    calls_of,
    counted_here,
    judge,
)
from ctxwright.ci.resume import INTERRUPT_GRACE_S, Parity, agent_group, parity
from ctxwright.core.supervise import find_executable, launch_argv
from ctxwright.core.words import counted
from ctxwright.errors import GateError
from ctxwright.replay.golden import Golden
from ctxwright.replay.server import Hold, ReplayServer, TraceRecord

#: Seconds the agent may run before the gate stops it and says so.
DEFAULT_TIMEOUT_S = 600.0
#: Seconds between SIGTERM to the agent's supervisor and SIGKILL.
STOP_GRACE_S = 5.0

Agent = Sequence[str] | Callable[[Mapping[str, str]], object]


@dataclass(frozen=True)
class GateResult:
    judgement: Judgement
    #: the agent's exit status (a callable: 0, or 1 when it raised); ``None``: it was stopped
    status: int | None
    divergences: tuple[str, ...]
    #: the trace the replay recorded (``None`` when none was kept)
    trace: Path | None
    seconds: float
    #: with ``resume_after``: how the first run stopped and the resume's verdict
    resume: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return self.judgement.exit_code

    def lines(self) -> list[str]:
        """What the gate prints: the verdict first, then each regression, then why the run
        could not be judged in full."""
        j = self.judgement
        out = [j.headline()]
        if self.resume is not None and self.resume.get("holds"):
            out.append(f"  resume: {self.resume['said']}")
        out += [f"  {r.line}" for r in j.regressions]
        shown = j.unjudged[1:] if not j.regressions else j.unjudged
        out += [f"  not judged: {u}" for u in shown]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            **self.judgement.to_json(),
            "agent_status": self.status,
            "divergences": list(self.divergences),
            "trace": str(self.trace) if self.trace is not None else None,
            "seconds": round(self.seconds, 3),
            **({"resume": self.resume} if self.resume is not None else {}),
        }


def golden_calls(golden: Golden) -> tuple[list[Call], list[str]]:
    """The golden's calls by conversation, read by the audit's reader."""
    return calls_of((conv.id, [{"request": call.request} for call in conv.calls]) for conv in golden.conversations)


def run_calls(server: ReplayServer) -> tuple[list[Call], list[str]]:
    """Every request the run sent, in arrival order, where the replay placed it: answered from
    the recording (``ANSWERED``), in its conversation where it left the recording
    (``DIVERGED``), or in none (``UNPLACED``: refused before it was placed, or a conversation
    the recording does not have). All are judged (``ci/judge.py``): a rewrite that makes a
    request leave the recording is named, not only the run's end."""
    return run_calls_of(server.calls)


def run_calls_of(records: Sequence[TraceRecord]) -> tuple[list[Call], list[str]]:
    """:func:`run_calls` on the records of a replay (or of a trace it wrote)."""
    calls: list[Call] = []
    problems: list[str] = []
    for i, (rec, item) in enumerate(zip(records, read_records({"request": r.request} for r in records), strict=True)):
        if isinstance(item, ParseProblem):
            problems.append(f"request {i + 1} of the run: {item.message}")
            continue
        if rec.conversation is None or rec.position is None:
            calls.append(Call("", i, counted_here(item, None), UNPLACED))
        else:
            placed = ANSWERED if rec.diverged is None else DIVERGED
            calls.append(Call(rec.conversation, rec.position, counted_here(item, rec.conversation), placed))
    return calls, problems


def run_gate(
    golden: Golden,
    agent: Agent,
    *,
    tolerances: Tolerances | None = None,
    pricing: Pricing | None = None,
    on_divergence: str = "stop",
    timeout: float = DEFAULT_TIMEOUT_S,
    trace: Path | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    stdout: IO[bytes] | int | None = None,
    resume_after: int | None = None,
    resume: Agent | None = None,
) -> GateResult:
    """Replay ``golden`` to ``agent`` (a command, or a callable given the environment) and
    judge the requests it sent. ``trace``: where the replay writes what it received.

    ``resume_after=N``: stop the agent once N calls were answered (SIGINT while its next
    request is held, ``ci/resume.py``), then run ``resume`` (``agent`` again when ``None``)
    against the same replay, and require its first request to extend the last one before the
    stop. ``timeout`` covers both runs."""
    if not callable(agent) and not agent:
        raise GateError("no command to run: ctxwright gate GOLDEN -- COMMAND [ARGS...]")
    expected, problems = golden_calls(golden)
    if not expected:
        raise GateError("the golden trace holds no model call to replay: record one through `ctxwright proxy`")
    if resume is not None and resume_after is None:
        raise GateError(
            "--then gives the command that resumes the agent: give --resume-after N too (N: calls before the stop)"
        )
    if resume is not None and not callable(resume) and not resume:
        raise GateError(
            "no command after --then: ctxwright gate GOLDEN --resume-after N -- COMMAND --then RESUME_COMMAND"
        )
    if resume_after is not None and len(expected) < 2:
        raise GateError(
            f"--resume-after: the golden holds {counted(len(expected), 'call')}; a resume needs at least 2 "
            "(one before the stop, one after it): record a longer run"
        )
    if resume_after is not None and not 1 <= resume_after < len(expected):
        raise GateError(
            f"--resume-after {resume_after}: give N from 1 to {len(expected) - 1} -- the golden holds "
            f"{len(expected)} calls and the resumed run must make at least one of them"
        )
    started = time.monotonic()
    deadline = started + timeout
    status: int | None
    failure: str | None
    resumed: dict[str, Any] | None = None
    found: tuple[Regression, ...] = ()
    full_env = {**os.environ, **(env or {})}
    with ReplayServer.start(golden, on_divergence=on_divergence, trace=trace) as server:
        run_env = {**full_env, **server.env()}
        if resume_after is None:
            status, failure = _run(agent, server.env(), run_env, cwd, deadline, stdout, None, timeout)
        else:
            status, failure, resumed, found = _run_resumed(
                server,
                agent,
                resume if resume is not None else agent,
                resume_after,
                run_env,
                cwd,
                deadline,
                stdout,
                timeout,
            )
        divergences = tuple(server.divergences)
        got, run_problems = run_calls(server)
    unjudged = list(problems) + list(run_problems)
    if failure:
        unjudged.append(failure)
    unjudged += [f"the run left the recording: {d}" for d in divergences]
    j = judge(expected, got, tolerances=tolerances, pricing=pricing)
    if found:
        j = replace(j, regressions=(*found, *j.regressions))
    if unjudged:
        j = replace(j, unjudged=(*unjudged, *j.unjudged))
    return GateResult(j, status, divergences, trace, time.monotonic() - started, resumed)


def _run(
    agent: Agent,
    sdk_env: Mapping[str, str],
    env: dict[str, str],
    cwd: str | Path | None,
    deadline: float,
    stdout: IO[bytes] | int | None,
    hold: Hold | None,
    timeout: float,
) -> tuple[int | None, str | None]:
    """Run ``agent`` until it ends or ``deadline``; with ``hold``, stop it as a user would
    once the replay holds a request."""
    if callable(agent):
        if hold is None:
            return _call(agent, sdk_env)
        return _call_held(agent, sdk_env, hold, deadline, timeout)
    return _spawn(list(agent), env, cwd, max(0.0, deadline - time.monotonic()), stdout, hold=hold, total=timeout)


def _run_resumed(
    server: ReplayServer,
    agent: Agent,
    then: Agent,
    after: int,
    env: dict[str, str],
    cwd: str | Path | None,
    deadline: float,
    stdout: IO[bytes] | int | None,
    timeout: float,
) -> tuple[int | None, str | None, dict[str, Any], tuple[Regression, ...]]:
    """The first run until the stop, then the resume; the resume's verdict (see
    :func:`run_gate`)."""
    hold = server.hold_after(after, timeout)
    status, failure = _run(agent, server.env(), env, cwd, deadline, stdout, hold, timeout)
    hold.release()  # the held request is answered (503), and so is a late retry of it
    stopped = "interrupted" if hold.request is not None else "exited"
    info: dict[str, Any] = {
        "after": after,
        "first_run": stopped,
        "first_status": status,
        "calls_before": len(server.calls),
    }
    if failure is not None and hold.request is not None and status is not None:
        failure = None  # stopped by the gate: its exit status is the stop's, not a failure
    if failure is not None:
        return status, f"before the stop, {failure}", info, ()
    answered = [{"request": r.request, "response": r.response} for r in server.calls[-2:]]
    if hold.request is not None:
        answered.append({"request": hold.request[1]})
    if not answered:
        return status, "the run made no model call before the stop", info, ()
    before, earlier = answered[-1], (answered[-2] if len(answered) > 1 else None)
    first_resumed = len(server.calls)
    hold.lift()
    status, failure = _run(then, server.env(), env, cwd, deadline, stdout, None, timeout)
    if len(server.calls) <= first_resumed:
        return status, failure or "the resumed run sent no model request", info, ()
    rec = server.calls[first_resumed]
    verdict = parity(before, {"request": rec.request, "response": rec.response}, earlier)
    if isinstance(verdict, str):
        return status, failure or verdict, info, ()
    info.update(verdict.to_json())
    info["said"] = _parity_said(verdict, after, hold.request is not None)
    return status, failure, info, verdict.regressions


def _parity_said(verdict: Parity, after: int, held: bool) -> str:
    where = f"call {after + 1}, held when the agent was stopped" if held else f"call {after}, the last before it exited"
    return f"the first request after the resume extends the last request before the stop ({where})"


def _call_held(
    agent: Callable[[Mapping[str, str]], object], env: Mapping[str, str], hold: Hold, deadline: float, timeout: float
) -> tuple[int | None, str | None]:
    """A callable run until the replay holds its request: that request is then refused (an
    in-process agent cannot be sent SIGINT; the failed call is its stop), and the callable's
    end awaited until ``deadline``."""
    box: list[tuple[int, str | None]] = []
    worker = threading.Thread(target=lambda: box.append(_call(agent, env)), daemon=True, name="ctxwright-gate-agent")
    worker.start()
    while worker.is_alive() and not hold.held.wait(0.05):
        if time.monotonic() >= deadline:
            return None, _too_long(timeout)
    hold.release()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive() or not box:
        return None, _too_long(timeout)
    status, failure = box[0]
    return (status, None) if hold.request is not None else (status, failure)


def _too_long(timeout: float) -> str:
    return f"the agent did not finish within {timeout:g} s (--timeout)"


def _call(agent: Callable[[Mapping[str, str]], object], env: Mapping[str, str]) -> tuple[int, str | None]:
    try:
        agent(dict(env))
    except Exception as exc:  # the agent under test failed: a fact of the run, not of the gate
        return 1, f"the agent raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return 0, None


def _spawn(
    argv: list[str],
    env: dict[str, str],
    cwd: str | Path | None,
    timeout: float,
    stdout: IO[bytes] | int | None,
    *,
    hold: Hold | None = None,
    total: float | None = None,
) -> tuple[int | None, str | None]:
    """Run ``argv`` under the supervisor; its exit status and, when it failed, one line why.
    With ``hold``: stopped by :func:`_interrupt` once the replay holds a request."""
    exe = _executable(argv[0], env, cwd)
    proc = subprocess.Popen(launch_argv(exe, argv), env=env, cwd=cwd, stdout=stdout, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        if hold is not None and _interrupt(proc, hold, deadline):
            return proc.returncode, None
        status = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None, f"{_too_long(total if total is not None else timeout)}; it was stopped"
    except BaseException:
        _stop(proc)  # Ctrl-C or the gate stopped: nothing of the agent's is left running
        raise
    if status != 0:
        return status, f"the agent exited with status {status}"
    return 0, None


def _interrupt(proc: subprocess.Popen[bytes], hold: Hold, deadline: float) -> bool:
    """Wait until the agent exits (``False``) or the replay holds its request (``True``): then
    stop it as Ctrl-C in a terminal does -- SIGINT to its process group (the supervisor's
    child; the supervisor itself would end the group with SIGTERM) -- give it
    :data:`~ctxwright.ci.resume.INTERRUPT_GRACE_S` to save its state and exit, then
    :func:`_stop`. ``subprocess.TimeoutExpired`` past ``deadline``."""
    while proc.poll() is None:
        if hold.held.wait(0.05):
            break
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, 0)
    else:
        return False
    group = agent_group(proc.pid)
    if group is None:  # no /proc to find the group by: the supervisor's stop at once
        _stop(proc)
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGINT)
    try:
        proc.wait(timeout=max(0.0, min(INTERRUPT_GRACE_S, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        _stop(proc)
    return True


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the supervisor (it ends the agent's whole group and every child re-parented to
    it, within its ``END_S``), SIGKILL if it lingers past :data:`STOP_GRACE_S`."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _executable(command: str, env: Mapping[str, str], cwd: str | Path | None) -> str:
    """The file ``command`` runs (``core/supervise.py``'s lookup, as for an MCP server), or a
    :class:`GateError` saying it is not there -- before anything starts."""
    try:
        return find_executable(command, env, str(cwd) if cwd is not None else None)
    except OSError:
        if os.sep in command:
            raise GateError(f"{command}: not an executable file; give the agent's command after --") from None
        raise GateError(f"{command}: command not found on PATH; give the agent's command after --") from None


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` that replaces it atomically when the block succeeds
    (``--update``: a golden is never left half written)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "GateError",
    "GateResult",
    "golden_calls",
    "replacing",
    "run_calls",
    "run_calls_of",
    "run_gate",
]
