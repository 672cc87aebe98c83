"""Layer 4, archival summaries: one short structured summary per completed tool round.

Why a log of rounds and not one squashed summary (the book: like ``git log``, not ``git
squash``): each round keeps its own record, in order, so the logic of the session -- what
was tried, what it returned, what failed -- survives, and a later summary never rewrites an
earlier one. A round is one assistant message with tool calls and all its results (a
parallel batch, see ``batches.py``). The summary replaces the round's result contents
(the first carries it, the others point to it), so every call stays answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ctxwright.core.messages import Message

INSTRUCTION = (
    "Summarize this tool round for the agent's log in at most 6 short lines, in this format:\n"
    "calls: <tool(arguments)>, ...\nfacts: <names, numbers, ids, dates found>\nerrors: <errors or none>"
)


def round_text(call_msg: Message, results: list[Message]) -> str:
    calls = "; ".join(f"{tc.name}({tc.arguments})" for tc in call_msg.tool_calls)
    body = "\n\n".join(f"[{r.tool_call_id}] {r.content or ''}" for r in results)
    return f"calls: {calls}\n\n{body}"


def old_rounds(
    entries: list[tuple[int | None, Message]], keep_recent_results: int, done: set[int]
) -> list[tuple[int, Message, list[tuple[int, Message]]]]:
    """(round number, assistant message, [(seq, result)]) of the rounds older than the
    newest ``keep_recent_results`` results, not compacted yet, oldest first."""
    rounds = []
    k = 0
    i = 0
    while i < len(entries):
        _seq, m = entries[i]
        if m.role == "assistant" and m.tool_calls:
            k += 1
            j = i + 1
            res: list[tuple[int, Message]] = []
            while j < len(entries) and entries[j][1].role == "tool":
                seq, result = entries[j]
                if seq is not None:
                    res.append((seq, result))
                j += 1
            rounds.append((k, m, res))
            i = j
        else:
            i += 1
    total = sum(len(r[2]) for r in rounds)
    out = []
    seen = 0
    for k, m, res in rounds:
        seen += len(res)
        if total - seen < keep_recent_results:
            break
        if res and not any(seq in done for seq, _ in res):
            out.append((k, m, res))
    return out


def archive(
    entries: Iterable[tuple[int | None, Message]],
    keep_recent_results: int,
    done: set[int],
    summarize: Callable[[str], str | None],
    min_chars: int = 400,
) -> dict[int, str]:
    """Event seq -> new content for the rounds summarized. The first failed summary ends the
    pass (the breaker decides about the next one); clearing handles the rounds left."""
    replace: dict[int, str] = {}
    for k, m, res in old_rounds(list(entries), keep_recent_results, done):
        text = round_text(m, [r for _, r in res])
        if len(text) < min_chars:
            continue
        summary = summarize(text)
        if summary is None:
            return replace
        ids = ", ".join(r.tool_call_id or "" for _, r in res)
        first = res[0][0]
        replace[first] = f"[round {k} summary of results {ids}; read_result(result_id=...) restores each]\n{summary}"
        for seq, _r in res[1:]:
            replace[seq] = f"[in the round {k} summary above]"
    return replace
