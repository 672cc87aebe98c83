"""The scripted backend counts reuse in the order the server renders a request (``core/wire_order.py``).

A server's prefix cache sees the prompt its template rendered -- the tool definitions with the
system prompt, ahead of the conversation (Anthropic: tools, then system) -- not the request's
JSON with sorted keys, where ``messages`` comes before ``tools``. Counted on the JSON, the tools
block was never cached and a changed tool list cost nothing of the history; these tests fail on
that order.
"""

from __future__ import annotations

import itertools

import pytest

from ctxwright.audit.compare import Auditor, AuditRequest
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.core.wire_order import ANTHROPIC, CHAT, RESPONSES, arrange, wire_order

SYSTEM = Message(role="system", content="You are a careful assistant. " * 20)
TOOLS = tuple(
    ToolSpec.create(f"tool_{i}", f"Does thing {i} to a file, carefully and well. " * 6, {"type": "object"})
    for i in range(8)
)
HISTORY = tuple(
    Message(role="user" if i % 2 == 0 else "assistant", content=f"turn {i}: " + "words of the conversation " * 30)
    for i in range(6)
)


def prompt_tokens(request: ChatRequest) -> int:
    return ScriptedBackend(["x"]).complete(request).usage.prompt_tokens


def usages(requests: list[ChatRequest], api: str = "chat") -> list[tuple[int, int]]:
    backend = ScriptedBackend(["ok"], api=api)
    return [(u.prompt_tokens, u.cached_tokens) for u in (backend.complete(r).usage for r in requests)]


def test_the_orders_per_api() -> None:
    assert wire_order("openai") == wire_order("chat") == wire_order(None) == wire_order("llama.cpp") == CHAT
    assert wire_order("anthropic") == ANTHROPIC == ("tools", "system", "messages")
    assert wire_order("openai-responses") == RESPONSES == ("system", "tools", "messages")
    assert arrange("anthropic", system=["s"], tools=["t"], messages=["m1", "m2"]) == ["t", "s", "m1", "m2"]
    assert arrange("chat", system=["s"], tools=["t"], messages=["m1"]) == ["s", "t", "m1"]


@pytest.mark.parametrize("api", ["chat", "anthropic", "responses"])
def test_the_tools_block_is_cached_after_the_first_call(api: str) -> None:
    """An append keeps everything before it: system, tools and history (all but ``]}``)."""
    msgs = (SYSTEM, *HISTORY[:1])
    requests = []
    for m in HISTORY[1:]:
        requests.append(ChatRequest(messages=msgs, tools=TOOLS))
        msgs = (*msgs, m)
    got = usages(requests, api)
    assert got[0][1] == 0
    for (prev_prompt, _), (_, cached) in itertools.pairwise(got):
        assert prev_prompt - 1 <= cached <= prev_prompt  # the old order lost the ~tools tokens here
    tools_only = prompt_tokens(ChatRequest(messages=(SYSTEM,), tools=TOOLS)) - prompt_tokens(
        ChatRequest(messages=(SYSTEM,))
    )
    assert tools_only > 400  # the block the sorted-key count never reused


def test_a_tools_change_breaks_the_reuse_of_everything_after_it() -> None:
    changed = (*TOOLS[:-1], ToolSpec.create("tool_7", "A new description.", {"type": "object"}))
    first = ChatRequest(messages=(SYSTEM, *HISTORY), tools=TOOLS)
    second = ChatRequest(messages=(SYSTEM, *HISTORY, Message(role="user", content="next")), tools=changed)
    (_, _), (_, cached) = usages([first, second])
    upto_tools = prompt_tokens(ChatRequest(messages=(SYSTEM,), tools=TOOLS))
    history = prompt_tokens(ChatRequest(messages=(SYSTEM, *HISTORY))) - prompt_tokens(ChatRequest(messages=(SYSTEM,)))
    assert cached < upto_tools < history  # on the old order the history stayed "cached"
    assert cached > prompt_tokens(ChatRequest(messages=(SYSTEM,)))  # the system prompt and tools 0-6 stay


def test_a_system_change_keeps_the_tools_on_anthropic_only() -> None:
    other = Message(role="system", content="X" + (SYSTEM.content or "")[1:])
    first = ChatRequest(messages=(SYSTEM, *HISTORY), tools=TOOLS)
    second = ChatRequest(messages=(other, *HISTORY), tools=TOOLS)
    tools_tokens = prompt_tokens(ChatRequest(messages=(), tools=TOOLS))
    assert usages([first, second], "chat")[1][1] < 10  # the system prompt comes first: nothing is kept
    kept = usages([first, second], "anthropic")[1][1]
    assert tools_tokens <= kept < tools_tokens + 8  # tools come first: they are kept (and `{"content":"`)


def test_the_audit_reads_anthropic_in_its_order() -> None:
    """The audit's reusable prefix (no provider numbers): on Anthropic a tools change makes the
    system prompt unreusable and names the tools; a system change keeps the tools reusable."""
    tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in TOOLS]
    changed = [*tools[:-1], {**tools[-1], "description": "A new description."}]
    msgs = [{"role": "user", "content": "hello " * 50}]
    system = SYSTEM.content or ""

    def rows(provider: str | None, reqs: list[tuple[str, list[dict[str, object]]]]) -> list[tuple[int, str]]:
        auditor = Auditor()
        out = []
        for sys_text, tl in reqs:
            row = auditor.add(AuditRequest(system=sys_text, tools=tl, messages=msgs, provider=provider))
            out.append((row.reusable_prefix_bytes, row.cause))
        return out

    tools_change = [(system, tools), (system, changed)]
    chat, anth = rows("openai", tools_change), rows("anthropic", tools_change)
    assert chat[1][1] == anth[1][1] == "tools_changed"
    sys_bytes = len(system.encode())
    assert anth[1][0] < chat[1][0] - sys_bytes + 5  # Anthropic: the system prompt after the tools is lost too
    system_change = [(system, tools), ("X" + system[1:], tools)]
    chat, anth = rows("openai", system_change), rows("anthropic", system_change)
    assert chat[1] == (0, "system_changed")
    assert anth[1][1] == "system_changed" and anth[1][0] > 1000  # the tools before it stay reusable
