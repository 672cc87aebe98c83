"""The caches that keep per-turn work flat (issue 19, item 8) give what the full computation gives.

Each cache here replaces a computation over the whole request or session with one over what
changed since the last call; these tests run both on the same inputs and compare.
"""

from __future__ import annotations

import itertools
import random

import pytest

from ctxwright.backends.scripted import PrefixCache, ScriptedBackend, common_prefix, wire_text
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.core.tokens import estimate_tokens


def full_usage(text: str, prev: str) -> tuple[int, int]:
    """The scripted backend's figures as first written: the whole texts, character by character."""
    common = sum(1 for _ in itertools.takewhile(lambda p: p[0] == p[1], zip(text, prev, strict=False)))
    return estimate_tokens(text), estimate_tokens(text[:common])


def test_common_prefix_matches_a_character_loop() -> None:
    rng = random.Random(7)
    for _ in range(500):
        a = "".join(rng.choice("ab文") for _ in range(rng.randrange(0, 40)))
        b = a[: rng.randrange(0, len(a) + 1)] + "".join(rng.choice("ab文") for _ in range(rng.randrange(0, 5)))
        want = sum(1 for _ in itertools.takewhile(lambda p: p[0] == p[1], zip(a, b, strict=False)))
        assert common_prefix(a, b) == common_prefix(b, a) == want


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
@pytest.mark.parametrize("system", [True, False])
def test_prefix_cache_equals_the_whole_text_comparison(api: str, system: bool) -> None:
    """Growth, a replaced status, compactions anywhere, CJK text, equal copies of messages,
    changed tools and tool_choice, requests that part inside a message or in the tools, in
    each API's wire order, with and without a system prompt."""
    rng = random.Random(11)
    tools_a = (ToolSpec.create("weather", "Weather in a city."),)
    tools_b = (*tools_a, ToolSpec.create("clock", "Local time 時間."))
    msgs: list[Message] = [Message(role="system" if system else "user", content="You help.")]
    cache, prev = PrefixCache(api), ""
    tools, choice = tools_a, "auto"
    for step in range(400):
        r = rng.random()
        if r < 0.45:
            msgs.append(Message(role="user", content=f"turn {step} " + rng.choice(["", "東京 ", "ab" * 30])))
        elif r < 0.6 and len(msgs) > 1:
            msgs[-1] = Message(role="user", content=f"status {step}")  # replaced, like the status bar
        elif r < 0.7 and len(msgs) > 2:
            i = rng.randrange(1, len(msgs))  # a compaction: an earlier message changes
            old = msgs[i].content or ""
            msgs[i] = Message(role="user", content=old[: rng.randrange(0, len(old) + 1)] + "[cleared]")
        elif r < 0.75 and len(msgs) > 2:
            del msgs[rng.randrange(1, len(msgs)) :]  # a trim
        elif r < 0.8:
            msgs = [Message(role=m.role, content=m.content) for m in msgs]  # equal copies, new objects
        elif r < 0.85:
            tools = tools_b if tools is tools_a else tools_a
        elif r < 0.9:
            choice = rng.choice(["auto", "none", "required", "weather"])
        elif r < 0.95:
            call = ToolCall(id=f"c{step}", name="weather", arguments='{"city":"Oslo"}')
            msgs.append(Message(role="assistant", content=None, tool_calls=(call,)))
        request = ChatRequest(messages=tuple(msgs), tools=tools if step % 13 else (), tool_choice=choice)
        text = wire_text(request, api)
        assert sorted(text) == sorted(request.canonical_bytes().decode("utf-8"))  # the same characters
        assert cache.usage(request) == full_usage(text, prev), step
        prev = text


def test_scripted_backend_reports_the_common_prefix() -> None:
    backend = ScriptedBackend(["a", "b", "c"])
    first = ChatRequest(messages=(Message(role="system", content="s"), Message(role="user", content="東京 hi")))
    second = ChatRequest(messages=(*first.messages, Message(role="assistant", content="a")))
    u1 = backend.complete(first).usage
    u2 = backend.complete(second).usage
    t1, t2 = (wire_text(r) for r in (first, second))
    assert (u1.prompt_tokens, u1.cached_tokens) == full_usage(t1, "")
    assert (u2.prompt_tokens, u2.cached_tokens) == full_usage(t2, t1)


def test_status_gap_median_equals_statistics_median() -> None:
    import bisect
    import statistics

    from ctxwright.status.bar import _median_with

    rng = random.Random(5)
    for _ in range(2000):
        closed = sorted(rng.randrange(0, 50) for _ in range(rng.randrange(0, 12)))
        extra = rng.choice([None, rng.randrange(0, 60)])
        gaps = list(closed)
        if extra is not None:
            bisect.insort(gaps, extra)
        want = statistics.median(gaps) if gaps else 17
        got = _median_with(closed, extra, empty=17)
        assert got == want and type(got) is type(want)


def test_stored_payload_text_equals_the_canonical_json_of_the_payload() -> None:
    """``store/sessions.py`` puts a message's own canonical JSON into its event's payload text."""
    from ctxwright.core.events import AssistantEvent, BudgetRecord, StatusEvent, ToolEvent, UserEvent
    from ctxwright.core.messages import Usage, canonical_json
    from ctxwright.store.sessions import payload_json

    call = ToolCall(id="c1", name="weather", arguments='{"city":"東京"}')
    budget = BudgetRecord(result_id="r1", chars=10, tokens=3, sha256="ab")
    events = [
        UserEvent(message=Message(role="user", content="hi \u2028 東京"), extra={"a": 1, "zz": [1, 2], "mess": None}),
        UserEvent(message=Message(role="user", content="")),
        AssistantEvent.build(Message(role="assistant", content=None, tool_calls=(call,)), Usage(prompt_tokens=3)),
        AssistantEvent.build(Message(role="assistant", content="x", reasoning_content="think"), None, call_index=2),
        ToolEvent.build(Message(role="tool", content="ok", tool_call_id="c1"), tool_name="weather", budget=budget),
        ToolEvent.build(Message(role="tool", content="e", tool_call_id="c1"), tool_name="w", ok=False, elapsed_ms=1.5),
        StatusEvent(message=Message(role="user", content="[status]"), mode="replace"),
    ]
    for ev in events:
        assert payload_json(ev) == canonical_json(ev.to_payload())
