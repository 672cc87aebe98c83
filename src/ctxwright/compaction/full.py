"""Layer 5, full compaction: an LLM summary of the older trajectory, in two stages.

The last resort before trimming (the book: 全量壓縮). Stage 1 summarizes the *older half* of
what may be removed; only if the request is still over the trigger does stage 2 summarize
everything up to the newest turn. The summary follows the retention priorities in
:data:`INSTRUCTION` (decisions and constraints verbatim first, tool outputs only as their
conclusion) and replaces the span with one note (a ``compaction`` event: the events stay in
the store). Identifiers are checked and re-attached by the summarizer. Cut points come from
``cutpoints.py``: never half a batch, never the first user message, never the newest turn.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ctxwright.compaction.batches import units
from ctxwright.compaction.cutpoints import removable_spans
from ctxwright.core.messages import Message

INSTRUCTION = """Compact this part of an agent's session into notes the agent will work from. Keep, in this order of priority:
1. decisions and constraints, verbatim;
2. files changed and key changes;
3. checks and their pass/fail state;
4. open TODOs and rollback notes;
5. approaches that failed, and why;
6. tool outputs only as their conclusion (pass/fail, the fact found).
Keep every identifier exactly (ids, hashes, URLs, paths, IPs, ports, ticket numbers). Short lines."""


def render(messages: list[Message]) -> str:
    lines = []
    for m in messages:
        if m.role == "assistant":
            if m.content:
                lines.append(f"assistant: {m.content}")
            for tc in m.tool_calls:
                lines.append(f"assistant called {tc.name}({tc.arguments}) [{tc.id}]")
        elif m.role == "tool":
            lines.append(f"result [{m.tool_call_id}]: {m.content or ''}")
        else:
            lines.append(f"{m.role}: {m.content or ''}")
    return "\n".join(lines)


def plan_span(
    entries: list[tuple[int | None, Message]],
    stage: int,
    tokens_of: Callable[[Message], int],
    catalogs: Collection[Message] = (),
    pins: Collection[Message] = (),
) -> list[int]:
    """Indices into ``entries`` to summarize: stage 1 the older half (by tokens) of the
    removable spans before the newest unit, stage 2 all of them. ``catalogs``: the skills
    catalog messages, never summarized away (``pinned.py``); ``pins``: the pinned messages,
    whose spans stay (``pins.py``)."""
    msgs = [m for _, m in entries]
    if not msgs:
        return []
    last_unit = units(msgs)[-1][0]
    spans = [(a, b) for a, b in removable_spans(msgs, catalogs, pins) if b <= last_unit]
    if not spans:
        return []
    if stage == 1:
        total = sum(tokens_of(msgs[i]) for a, b in spans for i in range(a, b))
        acc, keep = 0, []
        for a, b in spans:
            if acc >= total / 2:
                break
            keep.append((a, b))
            acc += sum(tokens_of(msgs[i]) for i in range(a, b))
        spans = keep
    return [i for a, b in spans for i in range(a, b)]


def note(summary: str, n: int, stage: int) -> str:
    return (
        f"[ctxwright: summary of {n} earlier message(s) (full compaction, stage {stage}); the originals are kept "
        f"in the session store]\n{summary}"
    )
