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
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ctxwright.cache.prices import Pricing
from ctxwright.ci.judge import Call, Judgement, Tolerances, calls_of, judge
from ctxwright.core.supervise import find_executable, launch_argv
from ctxwright.errors import GateError
from ctxwright.replay.golden import Golden
from ctxwright.replay.server import ReplayServer

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

    @property
    def exit_code(self) -> int:
        return self.judgement.exit_code

    def lines(self) -> list[str]:
        """What the gate prints: the verdict first, then each regression, then why the run
        could not be judged in full."""
        j = self.judgement
        out = [j.headline()]
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
        }


def golden_calls(golden: Golden) -> tuple[list[Call], list[str]]:
    """The golden's calls by conversation, read by the audit's reader."""
    return calls_of((conv.id, [{"request": call.request} for call in conv.calls]) for conv in golden.conversations)


def run_calls(server: ReplayServer) -> tuple[list[Call], list[str]]:
    """The calls the replay answered from the recording, by conversation, in arrival order;
    a call that left the recording is not judged (it has no golden counterpart)."""
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for rec in server.calls:
        if rec.diverged is None and rec.conversation is not None:
            by_conv.setdefault(rec.conversation, []).append({"request": rec.request})
    return calls_of(by_conv.items())


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
) -> GateResult:
    """Replay ``golden`` to ``agent`` (a command, or a callable given the environment) and
    judge the requests it sent. ``trace``: where the replay writes what it received."""
    if not callable(agent) and not agent:
        raise GateError("no command to run: ctxwright gate GOLDEN -- COMMAND [ARGS...]")
    expected, problems = golden_calls(golden)
    if not expected:
        raise GateError("the golden trace holds no model call to replay: record one through `ctxwright proxy`")
    started = time.monotonic()
    status: int | None
    failure: str | None
    with ReplayServer.start(golden, on_divergence=on_divergence, trace=trace) as server:
        if callable(agent):
            status, failure = _call(agent, server.env())
        else:
            status, failure = _spawn(list(agent), {**os.environ, **(env or {}), **server.env()}, cwd, timeout, stdout)
        divergences = tuple(server.divergences)
        got, run_problems = run_calls(server)
    unjudged = list(problems) + list(run_problems)
    if failure:
        unjudged.append(failure)
    unjudged += [f"the run left the recording: {d}" for d in divergences]
    j = judge(expected, got, tolerances=tolerances, pricing=pricing)
    if unjudged:
        j = replace(j, unjudged=(*unjudged, *j.unjudged))
    return GateResult(j, status, divergences, trace, time.monotonic() - started)


def _call(agent: Callable[[Mapping[str, str]], object], env: Mapping[str, str]) -> tuple[int, str | None]:
    try:
        agent(dict(env))
    except Exception as exc:  # the agent under test failed: a fact of the run, not of the gate
        return 1, f"the agent raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    return 0, None


def _spawn(
    argv: list[str], env: dict[str, str], cwd: str | Path | None, timeout: float, stdout: IO[bytes] | int | None
) -> tuple[int | None, str | None]:
    """Run ``argv`` under the supervisor; its exit status and, when it failed, one line why."""
    exe = _executable(argv[0], env, cwd)
    proc = subprocess.Popen(launch_argv(exe, argv), env=env, cwd=cwd, stdout=stdout, start_new_session=True)
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None, f"the agent did not finish within {timeout:g} s (--timeout); it was stopped"
    except BaseException:
        _stop(proc)  # Ctrl-C or the gate stopped: nothing of the agent's is left running
        raise
    if status != 0:
        return status, f"the agent exited with status {status}"
    return 0, None


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


__all__ = ["DEFAULT_TIMEOUT_S", "GateError", "GateResult", "golden_calls", "replacing", "run_calls", "run_gate"]
