"""Reasoning pass-back: what each mode renders, the DeepSeek check, model defaults, and
byte stability of earlier turns (the prompt cache depends on it)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright.core.messages import Message, ToolCall, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import (
    META_KEY,
    ReasoningPolicy,
    install,
    policy_for_model,
    split_think,
)
from ctxwright.core.request import ToolSpec
from ctxwright.core.session import Session
from ctxwright.errors import CtxwrightError, ReasoningMissing, ReasoningPolicyConflict

TOOLS = (ToolSpec.create("read", "read a file", {"type": "object", "properties": {"path": {"type": "string"}}}),)
MODES = ("strip", "keep", "must_send_back", "qwen3")


def call(i: int) -> ToolCall:
    return ToolCall(id=f"c{i}", name="read", arguments=f'{{"path":"f{i}"}}')


def tool_turn(i: int, reasoning: str | None = "why", content: str | None = None) -> Message:
    return Message(role="assistant", content=content, tool_calls=(call(i),), reasoning_content=reasoning)


def answer(text: str, reasoning: str | None = None) -> Message:
    return Message(role="assistant", content=text, reasoning_content=reasoning)


def session_with(mode: str, *, tools=TOOLS) -> Session:
    s = Session.start(Prefix.build("sys", tools), model="test-model")
    install(s, ReasoningPolicy(mode))  # type: ignore[arg-type]
    return s


def add_tool_round(s: Session, i: int, reasoning: str | None = "why") -> None:
    s.add_assistant(tool_turn(i, reasoning))
    s.add_tool_result(f"c{i}", f"contents {i}", tool_name="read")


def wire(s: Session) -> list[dict]:
    """The messages exactly as they would be sent."""
    return s.build_request().to_wire()["messages"]


def wire_bytes(s: Session) -> list[str]:
    return [canonical_json(m) for m in wire(s)]


def two_turn_session(mode: str) -> Session:
    """Turn 1 (user, tool round, answer with reasoning), then turn 2 in progress."""
    s = session_with(mode)
    s.add_user("first question")
    add_tool_round(s, 1, "thinking about turn 1")
    s.add_assistant(answer("answer 1", "final thoughts 1"))
    s.add_user("second question")
    add_tool_round(s, 2, "thinking about turn 2")
    return s


# -- what each mode renders --------------------------------------------------------------
def test_strip_removes_reasoning_everywhere():
    s = two_turn_session("strip")
    s.add_assistant(answer("<think>\nhidden\n</think>\n\nvisible"))
    msgs = wire(s)
    assert not any("reasoning_content" in m for m in msgs)
    assert msgs[-1]["content"] == "visible"
    assert "hidden" not in canonical_json(msgs)


def test_strip_leaves_a_mere_mention_of_the_tag_alone():
    s = session_with("strip")
    s.add_user("q")
    s.add_assistant(answer("Models close reasoning with </think> tags."))
    assert wire(s)[-1]["content"] == "Models close reasoning with </think> tags."


def test_keep_sends_every_reasoning_back_as_recorded():
    s = two_turn_session("keep")
    msgs = wire(s)
    assert [m.get("reasoning_content") for m in msgs if m["role"] == "assistant"] == [
        "thinking about turn 1",
        "final thoughts 1",
        "thinking about turn 2",
    ]


def test_must_send_back_passes_when_reasoning_present():
    s = two_turn_session("must_send_back")
    assert [m.get("reasoning_content") for m in wire(s) if m["role"] == "assistant"] == [
        "thinking about turn 1",
        "final thoughts 1",
        "thinking about turn 2",
    ]


def test_must_send_back_raises_for_current_loop_turn_without_reasoning():
    s = session_with("must_send_back")
    s.add_user("q")
    add_tool_round(s, 1, "ok")
    add_tool_round(s, 2, None)  # the backend dropped it
    # request: [system, user, assistant c1, tool, assistant c2, tool] -> index 4
    with pytest.raises(ReasoningMissing, match="index 4") as exc:
        s.build_request()
    assert exc.value.index == 4
    assert isinstance(exc.value, CtxwrightError)
    text = str(exc.value)
    assert "HTTP 400" in text and "DeepSeek" in text and "record the reasoning_content" in text.lower()


def test_must_send_back_checks_tool_turns_before_the_last_user_too():
    s = session_with("must_send_back")
    s.add_user("q1")
    add_tool_round(s, 1, None)  # an old tool turn without reasoning: DeepSeek still rejects it
    s.add_assistant(answer("a1"))
    s.add_user("q2")
    with pytest.raises(ReasoningMissing, match="index 2"):
        wire(s)


def test_must_send_back_ignores_turns_without_tool_calls():
    s = session_with("must_send_back")
    s.add_user("q1")
    s.add_assistant(answer("a1"))  # no tool calls: not checked
    s.add_user("q2")
    s.add_assistant(answer("a2"))
    msgs = wire(s)
    assert not any("reasoning_content" in m for m in msgs)


def test_must_send_back_does_not_check_without_tools():
    s = session_with("must_send_back", tools=())
    s.add_user("q")
    add_tool_round(s, 1, None)
    wire(s)  # DeepSeek checks only when the request carries tools


def test_must_send_back_counts_empty_reasoning_as_present():
    s = session_with("must_send_back")
    s.add_user("q")
    add_tool_round(s, 1, "")
    assert wire(s)[2]["reasoning_content"] == ""


def test_qwen3_drops_earlier_turns_and_keeps_current_turn():
    s = two_turn_session("qwen3")
    s.add_assistant(answer("<think>\ncurrent thought\n</think>\n\nanswer 2"))
    msgs = wire(s)
    roles = [m["role"] for m in msgs]
    last_user = max(i for i, r in enumerate(roles) if r == "user")
    earlier = [m for m in msgs[:last_user] if m["role"] == "assistant"]
    current = [m for m in msgs[last_user:] if m["role"] == "assistant"]
    assert earlier and not any("reasoning_content" in m for m in earlier)
    assert current[0]["reasoning_content"] == "thinking about turn 2"
    assert current[1]["content"] == "<think>\ncurrent thought\n</think>\n\nanswer 2"  # as recorded


def test_qwen3_strips_think_in_content_of_earlier_turns():
    s = session_with("qwen3")
    s.add_user("q1")
    s.add_assistant(answer("<think>\nold\n</think>\n\nanswer 1"))
    s.add_user("q2")
    s.add_assistant(answer("still thinking</think>\n\nanswer 2"))  # QwQ form: no opening tag
    s.add_user("q3")
    msgs = wire(s)
    assert [m["content"] for m in msgs if m["role"] == "assistant"] == ["answer 1", "answer 2"]


def test_qwen3_treats_tool_response_user_messages_as_tool_results():
    s = session_with("qwen3")
    s.add_user("q")
    s.add_assistant(answer("calling", "keep me"))
    s.add_user("<tool_response>\n42\n</tool_response>")
    assert wire(s)[2]["reasoning_content"] == "keep me"


def test_split_think():
    assert split_think("<think>a</think>\n\nb") == ("a", "b")
    assert split_think("  <think>\na\n</think>b") == ("a", "b")
    assert split_think("a</think>b") == (None, "a</think>b")
    assert split_think("a</think>b", allow_missing_open=True) == ("a", "b")
    assert split_think("<think>unterminated") == (None, "<think>unterminated")
    assert split_think(None) == (None, None)


def test_apply_never_mutates_and_returns_new_list():
    msgs = [Message(role="user", content="q"), tool_turn(1, "r")]
    before = [m.canonical() for m in msgs]
    out = ReasoningPolicy("strip").apply(msgs)
    assert out is not msgs and out[1] is not msgs[1] and out[1].reasoning_content is None
    assert [m.canonical() for m in msgs] == before


def test_unknown_mode_rejected():
    with pytest.raises(ValueError, match="unknown reasoning mode"):
        ReasoningPolicy("drop")  # type: ignore[arg-type]


# -- defaults per model ------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, mode",
    [
        ("deepseek-reasoner", "must_send_back"),
        ("deepseek-ai/DeepSeek-R1", "must_send_back"),
        ("deepseek-v3.1-think", "must_send_back"),
        ("deepseek-v4-pro", "must_send_back"),
        ("deepseek-chat", "keep"),
        ("DeepSeek-R1-Distill-Qwen-7B-GGUF", "strip"),
        ("Qwen/Qwen3-8B", "qwen3"),
        ("qwen3-coder-30b-a3b", "qwen3"),
        ("Qwen/QwQ-32B", "qwen3"),
        ("openai/gpt-oss-20b", "qwen3"),
        ("claude-sonnet-4-5", "keep"),
        ("anthropic/claude-3-7-sonnet", "keep"),
        ("gpt-4o", "strip"),
        ("chatgpt-4o-latest", "strip"),
        ("o1", "strip"),
        ("o3-mini", "strip"),
        ("openai/o4-mini", "strip"),
        ("SmolLM2-360M-Instruct", "strip"),
        ("llama-3.1-8b", "strip"),
        ("", "strip"),
        (None, "strip"),
    ],
)
def test_policy_for_model(name, mode):
    assert policy_for_model(name).mode == mode


def test_install_defaults_from_model_and_records_mode(store):
    s = Session.start(Prefix.build("sys", TOOLS), store=store, model="qwen3-4b")
    install(s)
    assert s.meta[META_KEY] == "qwen3"
    resumed = Session.resume(store, s.id)
    assert resumed.meta[META_KEY] == "qwen3"
    assert install(resumed).mode == "qwen3"  # no policy: the recorded mode, whatever the model name says


def test_install_refuses_to_switch_mode():
    s = session_with("keep")
    before = wire_bytes(s)
    assert install(s, ReasoningPolicy("keep")).mode == "keep"  # same mode: no-op
    assert s.meta[META_KEY] == "keep" and wire_bytes(s) == before
    with pytest.raises(ReasoningPolicyConflict, match="prompt cache"):
        install(s, ReasoningPolicy("strip"))
    fresh = Session.start(Prefix.build("sys", TOOLS), meta={META_KEY: "keep"})
    with pytest.raises(ReasoningPolicyConflict):
        install(fresh, ReasoningPolicy("strip"))


# -- stability ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_rendering_is_byte_stable(mode):
    s = two_turn_session(mode)
    assert s.build_request().canonical_bytes() == s.build_request().canonical_bytes()


@pytest.mark.parametrize("mode", MODES)
def test_appending_within_a_turn_never_changes_earlier_bytes(mode):
    s = two_turn_session(mode)
    before = wire_bytes(s)
    add_tool_round(s, 3, "more thinking")
    s.add_assistant(answer("answer 2", "final thoughts 2"))
    after = wire_bytes(s)
    assert after[: len(before)] == before


@pytest.mark.parametrize("mode", ["strip", "keep", "must_send_back"])
def test_new_user_message_never_changes_earlier_bytes(mode):
    s = two_turn_session(mode)
    s.add_assistant(answer("answer 2", "final thoughts 2"))
    before = wire_bytes(s)
    s.add_user("third question")
    assert wire_bytes(s)[: len(before)] == before


def test_qwen3_rewrites_history_only_at_a_new_user_message():
    """The one mode that changes earlier bytes, and only here: a new user message closes
    the previous turn, whose reasoning the Qwen3 template would drop anyway. The cache
    breaks from the first assistant message of that turn on, never earlier."""
    s = two_turn_session("qwen3")
    s.add_assistant(answer("answer 2", "final thoughts 2"))
    before = wire_bytes(s)
    s.add_user("third question")
    after = wire_bytes(s)
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    prev_user = max(i for i, m in enumerate(wire(s)[: len(before)]) if m["role"] == "user")
    assert changed and changed[0] == prev_user + 1  # first assistant message of turn 2
    assert all(wire(s)[i]["role"] == "assistant" for i in changed)
    assert not any("reasoning_content" in wire(s)[i] for i in changed)


_steps = st.lists(
    st.tuples(st.sampled_from(["user", "tool_round", "answer"]), st.sampled_from([None, "r", "<think>t</think>x"])),
    max_size=12,
)


def _build(steps) -> list[Message]:
    out: list[Message] = []
    for i, (kind, r) in enumerate(steps):
        if kind == "user":
            out.append(Message(role="user", content=f"q{i}"))
        elif kind == "tool_round":
            think = r is not None and r.startswith("<think>")
            out.append(tool_turn(i, None if think else r, content=r if think else None))
            out.append(Message(role="tool", content=f"res{i}", tool_call_id=f"c{i}"))
        else:
            out.append(answer(r or "a") if r and r.startswith("<think>") else answer("a", r))
    return out


@settings(max_examples=200, deadline=None)
@given(steps=_steps, nxt=st.sampled_from(["user", "tool_round", "answer"]), mode=st.sampled_from(MODES))
def test_property_earlier_messages_keep_their_bytes(steps, nxt, mode):
    """For any trajectory, appending one more step leaves earlier messages byte-identical --
    except under qwen3 when the new step is a user message."""
    policy = ReasoningPolicy(mode)
    base = _build(steps)
    longer = _build([*steps, (nxt, "r")])
    a = [m.canonical() for m in policy.apply(base, tools_in_use=False)]
    b = [m.canonical() for m in policy.apply(longer, tools_in_use=False)]
    if mode == "qwen3" and nxt == "user":
        # the one rewrite: only the previous turn (after the previous last user message) changes
        from ctxwright.core.reasoning import last_user_index

        keep = last_user_index(base) + 1
        assert b[:keep] == a[:keep]
        return
    assert b[: len(a)] == a
