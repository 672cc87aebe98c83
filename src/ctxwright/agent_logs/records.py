"""What the reader of agents' own logs hands on: one :class:`LoggedCall` per model call the agent
logged, a :class:`Marker` for what happened between calls (a compaction, a new sub-agent, a
changed turn context), and a :class:`LogProblem` for anything it could not read.

Why a shape of its own rather than :class:`~ctxwright.audit.compare.AuditRequest`: an agent's
transcript is not a request log. It holds the answers and their usage, not the request bodies:
Claude Code logs neither the system prompt nor the tool list, and Codex logs the items of the
conversation but not the bytes it sent. What can be said from it is what the provider reported
(tokens read, written by TTL, output), when, with which model, and what the agent did between
calls -- so that is what a call carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwright.core.usage import CacheUsage

#: the agents whose logs are read, by the name the audit prints
CLAUDE_CODE = "claude-code"
CODEX = "codex"


@dataclass(frozen=True)
class LoggedCall:
    """One model call as the agent logged it.

    ``usage`` is the provider's usage split the way it is billed (``core/usage.py``);
    ``tokens`` keeps the counts exactly as logged, under the names the agent's log uses, so
    totals can be compared with other tools' field by field (``cache_creation_input_tokens`` is
    kept even when its TTL split disagrees with it).
    """

    agent: str
    #: the session's key: unique across the files read (``project/session-id``)
    session: str
    #: the id the agent gave the session (Claude Code's ``sessionId``; Codex's ``session_meta.id``)
    session_id: str
    project: str
    file: str
    line: int
    #: the line's ``timestamp`` as written, and as seconds since the epoch (``None``: absent or bad)
    stamp: str
    at: float | None
    model: str
    usage: CacheUsage
    tokens: dict[str, int]
    #: the line of calls that share one cache: ``main``, or a sub-agent's side chain
    chain: str = "main"
    sidechain: bool = False
    provider: str = "anthropic"


@dataclass(frozen=True)
class Marker:
    """Something the agent logged between calls that changes what the next call can reuse.

    ``what``: ``compaction`` (Claude Code's compact boundary or compact summary, Codex's
    ``compacted`` item), ``context`` (Codex's turn context changed: ``detail`` names the
    fields), ``chain_start`` (a sub-agent's side chain began: its first call writes a cache of
    its own).
    """

    what: str
    session: str
    chain: str
    file: str
    line: int
    detail: str = ""
    at: float | None = None


@dataclass(frozen=True)
class LogProblem:
    """A line that could not be read, or a kind of entry that was skipped; ``line`` is 1-based
    (0: the file as a whole)."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


LogItem = LoggedCall | Marker | LogProblem


@dataclass
class Skipped:
    """Entries of a type the reader does not use, counted per type so each type is said once."""

    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, tuple[str, int]] = field(default_factory=dict)

    def add(self, kind: str, file: str, line: int) -> None:
        if kind not in self.counts:
            self.first[kind] = (file, line)
        self.counts[kind] = self.counts.get(kind, 0) + 1
