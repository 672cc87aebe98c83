"""The logs agents already keep: Claude Code's and Codex's session logs, read for what each
call cost, what it read from the prompt cache, and why its reads fell.

* ``claude_code.py`` / ``codex.py`` -- one reader per agent, each citing its format;
* ``find.py`` -- where each agent keeps its logs, which agent wrote a file, the reading order;
* ``reader.py`` -- many files as one stream; ``lines.py`` -- lines read with a cap, the
  over-long one skipped;
* ``causes.py`` -- the cause of each call's reads; ``analysis.py`` -- prices and tallies;
* ``synth.py`` -- logs in both formats with planted causes, for the tests and the benchmark.

:func:`summarise` is the small public entry point: one transcript (what Claude Code hands its
``statusLine`` command as ``transcript_path``) in, one :class:`SessionSummary` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ctxwright.agent_logs.analysis import LogAudit, Tally
from ctxwright.agent_logs.find import detect
from ctxwright.agent_logs.reader import LogFile, find_logs, read_logs
from ctxwright.agent_logs.records import CLAUDE_CODE
from ctxwright.cache.prices import Pricing


@dataclass(frozen=True)
class SessionSummary:
    """One session of one transcript, as a status line shows it.

    ``spent_usd`` / ``lost_usd`` are ``None`` when no call's model has a price; ``lost_usd`` is
    what the calls whose reads fell cost beyond reading what the call before left (by cause in
    ``lost_by_cause``). ``expires_at`` is when the cache the latest call left runs out (its time
    plus the TTL); ``last_context_tokens`` the latest main-chain call's prompt.
    """

    session_id: str
    agent: str
    model: str
    calls: int
    hit_ratio: float | None
    spent_usd: float | None
    lost_usd: float | None
    lost_by_cause: dict[str, float]
    causes: dict[str, int]
    last_call_at: float | None
    expires_at: float | None
    ttl_s: float | None
    last_context_tokens: int | None
    compactions: int
    problems: int

    @classmethod
    def of(cls, t: Tally, problems: int = 0) -> SessionSummary:
        priced = t.priced > 0
        expires = t.last_at + t.ttl_s if t.last_at is not None and t.ttl_s is not None else None
        return cls(
            session_id=t.session_id,
            agent=t.agent,
            model=t.model,
            calls=t.calls,
            hit_ratio=t.hit_ratio,
            spent_usd=t.spent if priced else None,
            lost_usd=t.lost if priced else None,
            lost_by_cause=dict(t.lost_by_cause),
            causes=dict(t.causes),
            last_call_at=t.last_at,
            expires_at=expires,
            ttl_s=t.ttl_s,
            last_context_tokens=t.last_context_tokens,
            compactions=t.compactions,
            problems=problems,
        )


def summarise(path: str | Path, pricing: Pricing | None = None) -> SessionSummary | None:
    """The session in one agent log file (a Claude Code transcript, or a Codex rollout), read
    whole as a stream; ``None`` when the file holds no call. A file with several sessions (a
    resumed one) gives the one whose latest call is the latest. Raises ``OSError`` when the file
    cannot be opened (``FileNotFoundError``, ``PermissionError``: the OS's own error) and
    :class:`~ctxwright.errors.LogUnreadable` for a folder or a device; bad lines are counted in
    ``problems``, never raised."""
    p = Path(path)
    agent = detect(p) or CLAUDE_CODE  # the file's own error (OSError, LogUnreadable) as raised
    audit = LogAudit(pricing)
    audit.feed(read_logs([LogFile(p, agent)]))
    sessions = [t for t in audit.sessions.values() if t.calls]
    if not sessions:
        return None
    latest = max(sessions, key=lambda t: (t.last_at is not None, t.last_at or 0.0, t.calls))
    return SessionSummary.of(latest, audit.problems)


__all__ = ["LogAudit", "LogFile", "SessionSummary", "Tally", "find_logs", "read_logs", "summarise"]
