"""The status bar for a framework agent: state computed by code, at the end of every request.

Why (``status/bar.py`` says it at length): a model asked how often it called a tool must recount
its whole history, and weak models get it wrong. So before each call the code computes the
state -- calls per tool, the last tool error, the model calls so far and left, the time -- and
shows it as ``key: value`` lines inside ``<agent_status>``, in a user message after the history.

How it keeps the cache: a framework's history does not hold these messages (they are added to
what is sent, by the recorder's rewrite, ``integrations/recording.py``), so each status is put
back on later calls exactly where it was sent, and the new one goes at the end -- ctxwright's
``append`` mode. Every request then extends the one before; the stale statuses cost their
tokens at the cached price (the replace mode's saving would cost a re-prefill of everything
after the old status on every call). A history that is not the last one extended (a new
conversation, or a compaction that rewrote it) starts over with no earlier statuses. The
reading instructions for the model are ``status/bar.py``'s :data:`OPERATING_MANUAL`, for the
agent's fixed instructions.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwright.integrations.compaction import put_back
from ctxwright.status.bar import OPERATING_MANUAL, STATUS_OPEN, StatusBar

#: characters of the last tool error the status quotes
ERROR_CHARS = 160


def _error_of(content: Any) -> str | None:
    """A tool result's error: ctxwright's structured error, or a framework's ``Error: ...`` text."""
    if not isinstance(content, str):
        return None
    text = content.strip()
    if text.startswith("{"):
        try:
            body = json.loads(text)
        except (ValueError, RecursionError):
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            return str(body["error"].get("message") or "error")
    low = text[:40].lower()
    if low.startswith(("error", "traceback", "exception")):
        return text.splitlines()[0]
    return None


@dataclass
class WireStatus:
    """Call it with a request's messages (OpenAI chat form, as the framework built them); it
    returns them with every earlier status back in place and this call's at the end.

    ``max_calls``: the model calls the agent may make (shown as ``iterations_left``);
    ``limits``: calls allowed per tool (shown as ``calls.NAME: n of limit``)."""

    max_calls: int | None = None
    limits: dict[str, int] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    started: float | None = None
    calls: int = 0
    _seen: list[dict[str, Any]] = field(default_factory=list)
    _inserted: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def values(self, messages: Sequence[dict[str, Any]]) -> dict[str, str]:
        """The status of a request: calls per tool, the last tool error, the time, the budget."""
        names = {
            c.get("id"): str((c.get("function") or {}).get("name") or "tool")
            for m in messages
            if m.get("role") == "assistant"
            for c in (m.get("tool_calls") or [])
            if isinstance(c, dict)
        }
        counts = Counter(names.values())
        v: dict[str, str] = {}
        for name in sorted(counts):
            limit = self.limits.get(name)
            v[f"calls.{name}"] = f"{counts[name]}" + (f" of {limit}" if limit is not None else "")
            if limit is not None and counts[name] >= limit:
                v[f"calls.{name}"] += " (limit reached)"
        now = self.clock()
        started = self.started if self.started is not None else now
        v["time_now"] = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        v["elapsed"] = f"{now - started:.0f} s since the conversation started"
        errors = [e for m in messages if m.get("role") == "tool" for e in [_error_of(m.get("content"))] if e]
        v["last_error"] = errors[-1][:ERROR_CHARS] if errors else "none"
        if self.max_calls is not None:
            v["iterations_left"] = str(max(0, self.max_calls - self.calls))
        return v

    def __call__(self, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        wire = [m for m in messages if not _is_status(m)]
        if len(wire) < len(self._seen) or wire[: len(self._seen)] != self._seen:
            self._inserted, self.calls, self.started = [], 0, None  # another conversation
        if self.started is None:
            self.started = self.clock()
        self.calls += 1
        status = {"role": "user", "content": StatusBar.render(self.values(wire))}
        self._inserted.append((len(wire), status))
        self._seen = wire
        return put_back(wire, self._inserted)


def _is_status(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "user" and isinstance(content, str) and content.startswith(STATUS_OPEN)


__all__ = ["OPERATING_MANUAL", "WireStatus"]
