"""The compactor the framework adapters share (``integrations/compaction.py``), on OpenAI chat
messages: nothing changes below the trigger; past it every result but the newest K becomes a
placeholder at once, and stays one, so every request between two compactions extends the one
before; a view that would break an invariant is never sent; the ledger names what was lost."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright.compaction.check import violations
from ctxwright.core.messages import Message
from ctxwright.integrations.compaction import WireCompactor, tail_reminder


def _turn(i: int, size: int, parallel: int = 1) -> list[dict[str, Any]]:
    calls = [
        {"id": f"c{i}_{k}", "type": "function", "function": {"name": "read_file", "arguments": f'{{"n": {i}}}'}}
        for k in range(parallel)
    ]
    results = [
        {
            "role": "tool",
            "tool_call_id": f"c{i}_{k}",
            "content": f"/src/mod{i}_{k}.py has {1000 + i} lines " + "x" * size,
        }
        for k in range(parallel)
    ]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def test_rarely_and_deeply_then_append_only() -> None:
    c = WireCompactor(trigger_tokens=600, keep_results=1, min_tokens=10)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    views = []
    for i in range(12):
        msgs += _turn(i, 400)
        views.append(c(msgs))
    breaks = [i for i, (a, b) in enumerate(itertools.pairwise(views), 1) if json.dumps(b[: len(a)]) != json.dumps(a)]
    assert c.compactions == len(breaks) >= 2  # the request changes only at a compaction
    assert all(c.tokens(v) <= 600 for v in views)
    assert views[-1][:2] == msgs[:2] and views[-1][-1] == msgs[-1]  # instructions, task, newest result kept
    assert views[-1][3]["content"].startswith("[cleared read_file result of call c0_0")
    lost = {v for entry in c.ledger for v in entry.lost}
    assert "/src/mod0_0.py" in lost and "1000" in lost
    assert c.refused == []


def test_below_the_trigger_nothing_changes() -> None:
    c = WireCompactor(trigger_tokens=10_000)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "t"}, *_turn(0, 100)]
    assert c(msgs) == msgs and c.compactions == 0


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 600), min_size=1, max_size=10),
    parallel=st.integers(1, 3),
    keep=st.integers(0, 3),
    trigger=st.integers(50, 2_000),
)
def test_no_view_breaks_an_invariant(sizes: list[int], parallel: int, keep: int, trigger: int) -> None:
    c = WireCompactor(trigger_tokens=trigger, keep_results=keep, min_tokens=5)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]
    for i, size in enumerate(sizes):
        msgs += _turn(i, size, parallel)
        view = c(msgs)
        assert len(view) == len(msgs)  # results are replaced, never dropped: no orphan, no split batch
        recorded = [Message.from_wire(m) for m in msgs[1:]]
        assert violations(recorded, [Message.from_wire(m) for m in view[1:]]) == []


def test_the_tail_reminder_is_a_user_message_after_the_history() -> None:
    assert tail_reminder("time: 12:01") == {
        "role": "user",
        "content": "<context_update>\ntime: 12:01\n</context_update>",
    }
