"""Resume parity: the first request after a resume must extend the last request before the stop.

Why: the cache bug most reported against real agents is the resumed session that re-writes its
whole cache. A provider caches the longest byte-identical prefix, and the session's last request
before the stop is what it holds; the first request of the resumed session is served from that
cache only if it starts with those bytes. A reminder that moves into the system prompt on
reload, a message's content string re-read as a list of text blocks, a system prompt
re-synthesised with today's date -- each makes the first call after every resume a full cache
write, and none shows in a run that is never interrupted.

``ctxwright gate --resume-after N GOLDEN -- COMMAND [--then RESUME_COMMAND]`` (``ci/gate.py``)
runs COMMAND against the replay; once N calls were answered the replay *holds* the next request
(``replay/server.py``: the user pressed Ctrl-C while the model was working on it) and the gate
stops the agent as a terminal's Ctrl-C would: SIGINT to the agent's process group
(:func:`agent_group`), a grace to save its state, then the supervisor's stop. Then RESUME_COMMAND
(COMMAND again without ``--then``) runs against the same replay, and :func:`parity_regressions`
holds its first request to the last request the replay received before the stop -- the run
against itself, whatever the golden says: the audit's own comparison (``audit/compare.py``) must
call it ``append`` (or identical). Anything else is a regression of rule ``resume``, named by
segment (a system-prompt section or a tool, ``ci/segments.py``; a message by its index and
role), field, byte offset and the text on both sides. The rest of the run, both halves, is
judged against the golden as every run is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ctxwright.audit.compare import AuditRequest, classify, field_text, first_divergence, utf8
from ctxwright.ci.judge import CONTINUES, Regression, calls_of, prefix_changes

#: The word in the agent's command that starts the resume command.
THEN = "--then"
#: Seconds the agent has, after SIGINT, to save its state and exit before it is stopped.
INTERRUPT_GRACE_S = 10.0
#: Characters of text shown on each side of a difference (as ``ci/segments.py`` shows).
_WINDOW = 40


def split_then(words: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """The agent's command and the resume command: the words before and after ``--then``
    (``None``: no ``--then``, the command resumes itself)."""
    words = list(words)
    if THEN not in words:
        return words, None
    cut = words.index(THEN)
    return words[:cut], words[cut + 1 :]


def agent_group(supervisor: int) -> int | None:
    """The process group of the agent the supervisor (``core/supervise.py``, pid ``supervisor``)
    started: its child that leads a group of its own. Read from ``/proc`` (Linux); ``None``
    where it cannot be read, and the agent is then stopped by the supervisor alone."""
    try:
        with open(f"/proc/{supervisor}/task/{supervisor}/children", "rb") as f:
            children = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return None
    for pid in children:
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:
                return pid
    return None


@dataclass(frozen=True)
class Parity:
    """The verdict on one resume: the audit's ``cause`` of the first resumed request against
    the last request before the stop, and the regressions it makes (none for an append).
    ``replaced``: the last request's last message was left out of the comparison, as every
    call of the run leaves it out of the next (a status block replaced in place)."""

    cause: str
    regressions: tuple[Regression, ...]
    replaced: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "holds": not self.regressions, "last_message_replaced": self.replaced}


def parity(
    before: Mapping[str, Any], after: Mapping[str, Any], earlier: Mapping[str, Any] | None = None
) -> Parity | str:
    """``before``: the last record before the stop (``{"request": ...}``, with its
    ``"response"`` when it was answered); ``after``: the first record of the resumed run;
    ``earlier``: the record before ``before`` in the same run, when there is one. The verdict,
    or one line saying why the two cannot be compared.

    An agent whose every call drops the previous call's last message and appends a new one (a
    status block replaced in place: ``ctxwright run``'s status bar, which the audit names
    ``status_replaced`` from its marker) is held to the same rule across the resume: when the
    last request before the stop continues ``earlier`` that way, the resumed request must extend
    it without its last message."""
    records = [dict(before), dict(after)] if earlier is None else [dict(earlier), dict(before), dict(after)]
    calls, problems = calls_of([("resume", records)])
    if problems or len(calls) != len(records):
        return f"the resume cannot be compared: {problems[0] if problems else 'a request was not read'}"
    prev, cur = calls[-2].request, calls[-1].request
    verdict = _compare(prev, cur)
    if verdict.regressions and earlier is not None and prev.messages:
        first = calls[0].request
        if _compare(first, prev).regressions and first.messages and not _compare(_trimmed(first), prev).regressions:
            return replace(_compare(_trimmed(prev), cur), replaced=True)
    return verdict


def _trimmed(req: AuditRequest) -> AuditRequest:
    """``req`` without its last message."""
    n = len(req.messages) - 1
    return replace(
        req,
        messages=req.messages[:n],
        message_bytes=req.message_bytes[:n] if req.message_bytes is not None else None,
        message_hashes=req.message_hashes[:n] if req.message_hashes is not None else None,
    )


def _compare(prev: AuditRequest, cur: AuditRequest) -> Parity:
    cause = classify(prev, cur, first_divergence(prev, cur))
    if cause in CONTINUES:
        return Parity(cause, ())
    out = prefix_changes(prev, cur, rule="resume", head=_head(cause), extra={"cause": cause})
    messages = _message(prev, replace(cur, system=prev.system, tools=prev.tools), cause)
    if messages is not None:
        out.append(messages)
    return Parity(cause, tuple(out))


def _head(cause: str) -> str:
    return f"resume: the first request after the resume does not extend the last request before the stop ({cause})"


def _message(prev: AuditRequest, cur: AuditRequest, cause: str) -> Regression | None:
    """The first message of ``cur`` (its prefix made the same as ``prev``'s) that does not
    extend ``prev``'s: its index (the system prompt is message 0, as the audit counts), role,
    field, byte offset and the text on both sides."""
    d = first_divergence(prev, cur)
    if d is None or d.message_index is None or d.message_index == 0:
        return None
    i = d.message_index - 1
    if i >= len(cur.messages):
        old = prev.messages[i] if i < len(prev.messages) else {}
        segment = f"message {d.message_index} ({old.get('role', '?')})"
        line = f"{segment} is gone: the resumed request has {len(cur.messages)} messages after the system prompt, the last before the stop {len(prev.messages)}"
        return Regression("resume", f"{_head(cause)}: {line}", {"cause": cause, "segment": segment, "kind": "removed"})
    new = cur.messages[i]
    old = prev.messages[i] if i < len(prev.messages) else {}
    segment = f"message {d.message_index} ({new.get('role', '?')})"
    off, left, right = d.byte_offset, d.before, d.after  # the audit's own comparison of the field
    was = utf8(field_text(old.get(d.field)))[off:].decode("utf-8", "ignore")[:_WINDOW]
    where = f"{segment} {d.field} changed at byte {off:,}"
    line = f"{where}: {_w(left, tail=True)!r} | {_w(right)!r} (was {_w(was)!r})"
    details = {
        "cause": cause,
        "segment": segment,
        "kind": "changed",
        "field": d.field,
        "offset": off,
        "before": left,
        "after": right,
        "was": was,
    }
    return Regression("resume", f"{_head(cause)}: {line}", details)


def _w(text: str, *, tail: bool = False) -> str:
    return text[-_WINDOW:] if tail else text[:_WINDOW]


__all__ = ["INTERRUPT_GRACE_S", "THEN", "Parity", "agent_group", "parity", "split_then"]
