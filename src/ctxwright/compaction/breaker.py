"""The circuit breaker of LLM compaction.

Why (the book, full compaction): in production many sessions get stuck in a loop of failing
compactions, each one a paid LLM call that frees nothing. After ``threshold`` (3)
consecutive failures the breaker *opens*: no LLM compaction is attempted, the layers
without an LLM (noise, clearing, trim) do the work, and the status bar says so.

Success window (when it closes again): ``cooldown_calls`` (10) model calls after it opened,
one trial is allowed (*half-open*). A trial that succeeds closes the breaker and resets the
count; a trial that fails opens it again for another ``cooldown_calls``. So a broken
summarizer costs at most one LLM call per ``cooldown_calls`` calls, and a recovered one is
back within that many calls.

Every state change is a ``breaker`` event of the session, so it survives resume and the
status bar can show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ctxwright.core.events import BreakerEvent

if TYPE_CHECKING:
    from ctxwright.core.session import Session

State = Literal["closed", "open", "half_open"]


@dataclass
class CircuitBreaker:
    threshold: int = 3
    cooldown_calls: int = 10
    failures: int = 0
    opened_at: int | None = None

    def state(self, call_index: int) -> State:
        if self.opened_at is None:
            return "closed"
        return "half_open" if call_index - self.opened_at >= self.cooldown_calls else "open"

    def allow(self, call_index: int) -> bool:
        return self.state(call_index) != "open"

    def success(self, session: Session | None = None, call_index: int = 0) -> None:
        was_open = self.opened_at is not None
        self.failures, self.opened_at = 0, None
        if was_open and session is not None:
            session.append(BreakerEvent(state="closed", call_index=call_index))

    def failure(self, reason: str, session: Session | None = None, call_index: int = 0) -> bool:
        """Count one failure; returns True when this one opened (or re-opened) the breaker."""
        self.failures += 1
        if self.failures >= self.threshold or self.opened_at is not None:
            self.opened_at = call_index
            if session is not None:
                session.append(
                    BreakerEvent(
                        state="open",
                        failures=self.failures,
                        reason=reason,
                        call_index=call_index,
                        retry_at_call=call_index + self.cooldown_calls,
                    )
                )
            return True
        return False

    def restore(self, session: Session) -> None:
        """Rebuild the state from a resumed session's ``breaker`` events."""
        for ev in session.events:
            if isinstance(ev, BreakerEvent):
                if ev.state == "open":
                    self.opened_at = ev.call_index
                    self.failures = ev.failures if ev.failures is not None else self.threshold
                else:
                    self.failures, self.opened_at = 0, None
