"""Named rules for the cache bugs agents are known to make, each a small module.

Why named rules: the audit says *that* a request broke its prefix and where (``system_changed
@1234``); a user fixing it needs to know *which* known mistake that is and what to do. Each
rule recognises one bug reported against real agents, names the segment, tool and byte, and
says the fix in one line. The same rules run in ``ctxwright audit`` (a finding under its call
and a count per rule), in the proxy's line per call, and in the CI gate (a rule that fires on
the run where it does not on the golden is a regression).

Each module has ``name``, ``fix`` and ``check(previous, current, settings)`` over two
consecutive requests of one conversation (``previous`` is ``None`` for its first request),
returning a :class:`~ctxwright.audit.rules.base.Finding` or ``None``; its docstring says the
provider behaviour it protects and the public report it comes from. ``docs/rules.md`` lists them.

**Cost.** A rule reads text, so the rules run only where they can fire: after a request whose
prefix or history changed (the audit's cause is not ``append`` nor ``options_changed``), and on
the first request of a conversation. The cheap rules -- the TTL comparison and the tool budget
(counted once per tool list) -- run on every request, because a changed TTL leaves the bytes the
audit compares alone (``cache_control`` markers are stripped from the messages it hashes).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import ModuleType

from ctxwright.audit.compare import MAX_OPEN_CONVERSATIONS, AuditRequest
from ctxwright.audit.rules import (
    compaction_lost_item,
    content_shape,
    date_in_prefix,
    mcp_rug_pull,
    reminder_moved,
    session_id_in_tool,
    tool_budget,
    tools_reordered,
    ttl_changed,
)
from ctxwright.audit.rules.base import Finding, Settings

Check = Callable[[AuditRequest | None, AuditRequest, Settings], Finding | None]

#: the audit causes after which the prefix and the history are what they were: only the cheap
#: rules can fire there
UNCHANGED = frozenset({"append", "options_changed"})


@dataclass(frozen=True)
class Rule:
    """One named rule: its ``name``, its one-line ``fix``, its ``check``, whether it is
    ``cheap`` enough to run on every request, and its module's docstring (``doc``)."""

    name: str
    fix: str
    check: Check
    cheap: bool
    doc: str

    @classmethod
    def of(cls, module: ModuleType, *, cheap: bool = False) -> Rule:
        return cls(module.name, module.fix, module.check, cheap, (module.__doc__ or "").strip())

    @property
    def summary(self) -> str:
        """The first line of its docstring."""
        return self.doc.splitlines()[0] if self.doc else self.name


#: every rule, in the order its findings are listed
RULES: tuple[Rule, ...] = (
    Rule.of(date_in_prefix),
    Rule.of(session_id_in_tool),
    Rule.of(content_shape),
    Rule.of(ttl_changed, cheap=True),
    Rule.of(reminder_moved),
    Rule.of(tools_reordered),
    Rule.of(tool_budget, cheap=True),
    Rule.of(mcp_rug_pull),
    Rule.of(compaction_lost_item),
)
BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}


def run_rules(
    previous: AuditRequest | None,
    current: AuditRequest,
    settings: Settings | None = None,
    *,
    cause: str | None = None,
) -> list[Finding]:
    """The findings of every rule on ``current`` after ``previous`` (of the same conversation;
    ``None`` for its first request). ``cause``: the audit's cause for ``current``, when known --
    after ``append`` or ``options_changed`` only the cheap rules run (see the module docstring);
    ``None`` runs them all."""
    settings = settings or Settings()
    changed = cause is None or cause not in UNCHANGED
    out = []
    for rule in RULES:
        if rule.cheap or changed:
            found = rule.check(previous, current, settings)
            if found is not None:
                out.append(found)
    return out


class RuleRunner:
    """The rules over a stream of audited requests: keeps the latest request of each
    conversation (at most ``max_open``, the least recently used dropped -- a caller that
    closes conversations says so with :meth:`forget`) and counts the findings by rule."""

    def __init__(self, settings: Settings | None = None, *, max_open: int = MAX_OPEN_CONVERSATIONS) -> None:
        self.settings = settings or Settings()
        self.max_open = max(1, max_open)
        self._last: OrderedDict[Hashable, AuditRequest] = OrderedDict()
        #: findings so far, by rule name
        self.counts: dict[str, int] = {}

    def add(self, conversation: Hashable, request: AuditRequest, cause: str) -> list[Finding]:
        """The findings on ``request``, the next request of ``conversation``, whose audit cause
        is ``cause`` (``first``: no previous request, whatever was kept under that key)."""
        previous = self._last.pop(conversation, None)
        found = run_rules(None if cause == "first" else previous, request, self.settings, cause=cause)
        self._last[conversation] = request
        while len(self._last) > self.max_open:
            self._last.popitem(last=False)
        for f in found:
            self.counts[f.rule] = self.counts.get(f.rule, 0) + 1
        return found

    def forget(self, conversation: Hashable) -> None:
        """Drop what is kept of a conversation the caller closed."""
        self._last.pop(conversation, None)


__all__ = ["BY_NAME", "RULES", "UNCHANGED", "Finding", "Rule", "RuleRunner", "Settings", "run_rules"]
