"""For a team's own tests: the CI gate as a pytest assertion.

    from ctxwright.testing import gate

    def test_prompt_cache_holds():
        gate("tests/golden.jsonl", ["python", "agent.py", "summarise the repo"])

The agent is a command (run as ``ctxwright gate`` runs it) or a callable that takes the
environment the official SDKs read (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL`` and their
keys), for an agent that runs in the test's own process::

    def agent(env):
        client = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"])
        run_my_agent(client)

    gate("tests/golden.jsonl", agent)

It fails the test (``AssertionError``) with the gate's own lines when the run has a
regression or could not be judged, and returns the :class:`~ctxwright.ci.gate.GateResult`
when it passes.

Resume parity (``ctxwright gate --resume-after N ... --then ...``): ``resume_after=N`` stops
the agent once N calls were answered (SIGINT, as Ctrl-C would), runs ``then`` (the agent
again when not given), and fails unless its first request extends the last one before the stop::

    gate("tests/golden.jsonl", ["python", "agent.py", "task"], resume_after=2,
         then=["python", "agent.py", "--resume"])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ctxwright.cache.prices import pricing_of
from ctxwright.ci.gate import DEFAULT_TIMEOUT_S, GateResult, run_gate
from ctxwright.ci.judge import Tolerances
from ctxwright.replay.golden import load_golden


def gate(
    golden: str | Path | None,
    agent: Sequence[str] | Callable[[Mapping[str, str]], object],
    *,
    proxy_session: str | None = None,
    session: str | None = None,
    store: str | Path | None = None,
    max_reuse_drop: float = 0.02,
    max_token_increase: float = 0.10,
    max_cost_increase: float = 0.10,
    prices: str | Path | None = None,
    on_divergence: str = "stop",
    timeout: float = DEFAULT_TIMEOUT_S,
    trace: str | Path | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    resume_after: int | None = None,
    then: Sequence[str] | Callable[[Mapping[str, str]], object] | None = None,
    keep: Sequence[str] = (),
) -> GateResult:
    """Replay ``golden`` to ``agent`` and assert the gate passes (see the module docstring).

    ``golden`` is a trace file; or ``None`` with ``proxy_session=`` / ``session=`` (and the
    ``store=`` database they are in). The tolerances, ``prices`` (a TOML prices file) and
    ``keep`` (the survival contract, ``--keep``) are ``ctxwright gate``'s flags."""
    g = load_golden(
        golden,
        proxy_session=proxy_session,
        session=session,
        store=Path(store) if store is not None else None,
    )
    result = run_gate(
        g,
        agent,
        tolerances=Tolerances(max_reuse_drop, max_token_increase, max_cost_increase, keep=tuple(keep)),
        pricing=pricing_of(str(prices) if prices is not None else None),
        on_divergence=on_divergence,
        timeout=timeout,
        trace=Path(trace) if trace is not None else None,
        cwd=cwd,
        env=env,
        resume_after=resume_after,
        resume=then,
    )
    if result.exit_code != 0:
        raise AssertionError("ctxwright gate: " + "\n".join(result.lines()))
    return result


__all__ = ["GateResult", "gate"]
