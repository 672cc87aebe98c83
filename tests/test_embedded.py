"""End to end on the real embedded model (llama.cpp + SmolLM2-135M): a tool round trip,
prefix reuse across calls, the rendering rules, and the clear errors."""

from __future__ import annotations

import json
import os

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.progress import Token
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.errors import BackendUnavailable, ContextWindowExceeded
from ctxwright.tools.builtin import default_tools

llama_cpp = pytest.importorskip("llama_cpp", reason="the embedded extra is not installed")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend():
    from ctxwright.backends.embedded import EmbeddedBackend

    b = EmbeddedBackend(n_ctx=4096)
    yield b
    b.close()


SYSTEM = "You are a careful assistant that answers with facts from tools."


def test_tool_round_trip_reuses_the_whole_prefix(backend, store):
    reg = default_tools()
    session = Session.start(Prefix.build(SYSTEM, reg.specs()), store=store, backend="embedded", model=backend.model)
    agent = Agent(session, backend, reg, AgentConfig(tool_choice_first="required", max_tool_rounds=1, max_tokens=160))
    result = agent.run("What's the current time and weather in Vancouver?")
    assert result.stop_reason == "final_answer"
    assert len(result.calls) == 2
    first, second = result.calls
    assert first.tool_calls >= 1
    # every tool call parsed into a registered tool with JSON arguments
    calls = [tc for m in session.messages() if m.role == "assistant" for tc in m.tool_calls]
    assert calls and all(tc.name in reg for tc in calls)
    assert all(isinstance(json.loads(tc.arguments), dict) for tc in calls)
    # the second call reused at least the whole prefix (system turn + tool text)
    from ctxwright.backends.embedded import adapt_messages

    system_turn = backend._template.render(
        messages=adapt_messages((session.prefix.system_message(),), session.prefix.tools), add_generation_prompt=False
    )
    prefix_tokens = len(backend.tokenize(system_turn))
    assert second.cached_tokens is not None and second.cached_tokens >= prefix_tokens
    assert second.prompt_tokens > first.prompt_tokens
    stored = store.calls(session.id)
    assert [c.cached_tokens for c in stored] == [first.cached_tokens, second.cached_tokens]
    assert all(c.prefill_ms is not None and c.decode_ms is not None for c in stored)


def test_tool_results_render_as_user_turn_and_session_keeps_tool_role(backend):
    msgs = (
        Message(role="system", content="s"),
        Message(role="user", content="q"),
        Message(role="assistant", tool_calls=(ToolCall("a", "get_weather", '{"city":"Paris"}'),)),
        Message(role="tool", tool_call_id="a", content='{"t": 3}'),
    )
    prompt = backend.render_prompt(ChatRequest(messages=msgs))
    assert "<|im_start|>tool" not in prompt
    assert 'Result of get_weather: {"t": 3}' in prompt
    assert "&quot;" not in prompt  # no HTML escaping


def test_rendering_is_byte_stable_across_calls(backend):
    reg = default_tools()
    s = Session.start(Prefix.build(SYSTEM, reg.specs()))
    s.add_user("hi")
    p1 = backend.render_prompt(s.build_request())
    s.add_assistant(Message(role="assistant", content="hello there"))
    s.add_user("more")
    p2 = backend.render_prompt(s.build_request())
    assert p2.startswith(p1[: p1.rindex("<|im_start|>assistant")])


def test_window_overflow_is_our_exception(backend):
    req = ChatRequest(
        messages=(Message(role="system", content="s"), Message(role="user", content="word " * 6000)), max_tokens=64
    )
    with pytest.raises(ContextWindowExceeded, match="window"):
        backend.complete(req)


def test_corrupt_model_file_is_a_clear_error(tmp_path):
    from ctxwright.backends.embedded import EmbeddedBackend

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(BackendUnavailable, match="missing or corrupt"):
        EmbeddedBackend(bad)


def test_missing_model_env_is_a_clear_error(monkeypatch, tmp_path):
    from ctxwright.backends.embedded import find_model_file

    monkeypatch.setenv("CTXWRIGHT_MODEL", str(tmp_path / "nope.gguf"))
    with pytest.raises(BackendUnavailable, match="not a file"):
        find_model_file()


def test_reply_cut_inside_the_answer_keeps_the_text():
    from ctxwright.backends.embedded import EmbeddedBackend

    m = EmbeddedBackend._parse('{"answer": "It is 8 \\u00b0C and rai', cut=True)
    assert m.content == "It is 8 °C and rai [cut at max_tokens]" and not m.tool_calls
    m = EmbeddedBackend._parse('{"tool_calls": {"get_weather": {"city": "Oslo"}}}', cut=False)
    assert m.tool_calls[0].name == "get_weather" and m.tool_calls[0].arguments == '{"city":"Oslo"}'


def test_a_complete_reply_with_raw_line_breaks_is_not_marked_cut():
    """Hostile probe: the grammar lets a JSON string hold a raw newline, which strict JSON
    refuses; such a complete answer (or tool call) is read as written, never marked as cut."""
    from ctxwright.backends.embedded import CUT_MARK, EmbeddedBackend

    m = EmbeddedBackend._parse('{ "answer": "Report: weather\n- 12 °C, light rain\n\t-- end"}', cut=False)
    assert m.content == "Report: weather\n- 12 °C, light rain\n\t-- end"
    m = EmbeddedBackend._parse('{"tool_calls": {"write_note": {"text": "line 1\nline 2"}}}', cut=False)
    assert m.tool_calls[0].name == "write_note" and json.loads(m.tool_calls[0].arguments) == {"text": "line 1\nline 2"}
    # a reply that does not parse is marked only when llama.cpp stopped it at max_tokens
    assert not EmbeddedBackend._parse('{"answer": "unclosed', cut=False).content.endswith(CUT_MARK)
    assert EmbeddedBackend._parse('{"answer": "unclosed', cut=True).content == "unclosed" + CUT_MARK
    assert EmbeddedBackend._parse('{ "answer" ', cut=True).content == '{ "answer" ' + CUT_MARK  # cut before the text


def test_only_a_reply_stopped_at_max_tokens_is_marked_cut_and_tokens_are_counted(backend):
    """On the real model: an answer with a raw line break that ends by itself is whole and
    unmarked; one stopped at max_tokens is marked; completion_tokens is the tokens generated
    (never the stream's chunks, one more than the tokens)."""
    from ctxwright.backends.embedded import CUT_MARK

    def ask(system: str, question: str, max_tokens: int):
        backend.reset_cache()
        request = ChatRequest(
            messages=(Message(role="system", content=system), Message(role="user", content=question)),
            tool_choice="none",
            max_tokens=max_tokens,
            temperature=0.0,
        )
        return backend.complete(request)

    for limit in (8, 24):  # cut before the answer's text starts, and inside it
        short = ask("You are helpful.", "Say hello to Ada in one short sentence.", limit)
        assert short.finish_reason == "length" and short.message.content.endswith(CUT_MARK)
        assert short.usage.completion_tokens == limit
    report = ask(
        "You write reports. Every report has a title line, then bullet points, one per line.",
        "Write a short report on the weather in Vancouver: 12 °C, light rain.",
        256,
    )
    assert report.finish_reason == "stop" and not report.message.content.endswith(CUT_MARK)
    assert 0 < report.usage.completion_tokens < 256
    raw = report.usage.raw["raw_text"]
    if "\n" not in raw:
        pytest.skip("this build of the model wrote no line break; the unit test above covers the rule")
    assert report.message.content == json.loads(raw, strict=False)["answer"] and "\n" in report.message.content


def test_delegate_runs_on_a_fork_and_keeps_the_parents_kv_cache(backend, store):
    """Parent call, a sub-agent on the forked model, then the parent's next call: the parent's
    llama.cpp state still holds its prefix and trajectory (cached tokens cover the first call)."""
    from ctxwright.agent.delegate import Delegator
    from ctxwright.backends.scripted import call
    from ctxwright.compaction.retrieval import ResultReader

    reg = default_tools()
    reg.register(ResultReader().tool())
    d = Delegator(max_iterations=2)
    reg.register(d.tool())
    session = Session.start(Prefix.build(SYSTEM, reg.specs()), store=store, backend="embedded", model=backend.model)

    agent = Agent(session, backend, reg, AgentConfig(tool_choice_first="none", max_tokens=24))
    d.bind(agent)
    first = agent.run("Say hello.").calls[0]
    # the parent now delegates (scripted tool call, real child run on the fork)
    tc = call("delegate", {"task": "What is the weather in Oslo? Use get_weather."}, "d1")
    session.add_assistant(Message(role="assistant", tool_calls=(tc,)))
    out = reg.execute(tc)
    session.add_tool_result(tc.id, out.content, tool_name="delegate", ok=out.ok)
    assert d._child_backend is not backend and d.children
    assert store.get_session(d.children[0]).parent_id == session.id
    second = agent._call_model("none").report
    assert second.cached_tokens is not None and second.cached_tokens >= first.prompt_tokens - 8
    d._child_backend.close()


def test_streamed_answer_tokens_leave_the_recorded_call_unchanged(backend):
    """Token events only observe the generation: the same request gives the same message and
    token counts with and without a listener, and the tokens joined are the answer."""
    request = ChatRequest(
        messages=(
            Message(role="system", content=SYSTEM),
            Message(role="user", content="Say hello to Ada in one short sentence."),
        ),
        tool_choice="none",
        max_tokens=24,
        temperature=0.0,
    )
    backend.reset_cache()
    quiet = backend.complete(request)
    backend.reset_cache()
    tokens: list[str] = []
    loud = backend.complete(
        request, on_event=lambda event: tokens.append(event.text) if isinstance(event, Token) else None
    )
    assert loud.message == quiet.message and loud.finish_reason == quiet.finish_reason
    assert (loud.usage.prompt_tokens, loud.usage.completion_tokens, loud.usage.cached_tokens) == (
        quiet.usage.prompt_tokens,
        quiet.usage.completion_tokens,
        quiet.usage.cached_tokens,
    )
    assert len(tokens) > 3
    assert "".join(tokens) == loud.message.content  # a cut answer's mark is streamed too


def test_a_resumed_session_shows_the_prefill_a_fresh_model_does_again(backend, tmp_path):
    """Resumed in a new process, the model holds nothing: the resumed call re-prefills its
    whole prompt. Its reusable prefix is what the session sent before (the audit's own count),
    so ``cached/reusable`` reads ``0/N`` and the efficiency drops -- not ``0/0`` and 100%, as
    when llama.cpp's own count (it held nothing) stood in for the audit's. A call of the live
    session keeps llama.cpp's exact count: what it cached is never more than reusable."""
    from ctxwright import Harness
    from ctxwright.backends.embedded import EmbeddedBackend

    db = tmp_path / "resume.db"
    backend.reset_cache()
    with Harness(backend=backend, db=db, max_tokens=40) as h:
        first = h.run("What's the current time in Vancouver?").calls
        sid = h.session_id
    assert len(first) == 2
    live = first[1]
    assert live.cause == "append" and live.cached_tokens and live.reusable_tokens
    assert live.cached_tokens <= live.reusable_tokens  # llama.cpp's exact count: never above 100%
    fresh = EmbeddedBackend(n_ctx=4096)  # what a new process loads: no KV state, no token lists
    try:
        with Harness.resume(sid, backend=fresh, db=db, max_tokens=40) as h:
            resumed = h.run("And in Paris?").calls[0]
            summary = h.agent.auditor.summary()
            stored = h.store.calls(h.session_id)[-1]
    finally:
        fresh.close()
    assert resumed.cause == "append"
    assert resumed.cached_tokens == 0  # prefilled from scratch
    # everything the last call sent is a prefix of this one
    assert (resumed.reusable_tokens or 0) >= (live.prompt_tokens or 0) * 0.8
    assert summary.efficiency is not None and summary.efficiency < 0.7
    assert stored.audit.reusable_prefix_tokens == resumed.reusable_tokens


def test_ctxwright_threads_caps_every_local_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CTXWRIGHT_THREADS`` is the one cap on a local model's threads (core/threads.py): the
    embedded backend and the attention reader take it; a bad value is one line naming it."""
    from ctxwright.core.threads import default_threads
    from ctxwright.errors import ConfigError

    monkeypatch.setenv("CTXWRIGHT_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.setenv("CTXWRIGHT_THREADS", "3")
    assert default_threads() == 3
    monkeypatch.delenv("CTXWRIGHT_THREADS")
    assert default_threads() == min(2, os.cpu_count() or 1)
    monkeypatch.setenv("CTXWRIGHT_THREADS", "1")
    from ctxwright.backends.embedded import EmbeddedBackend

    one = EmbeddedBackend(n_ctx=256)
    try:
        assert one._n_threads == 1 and one.llm.context_params.n_threads == 1
    finally:
        one.close()
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("CTXWRIGHT_THREADS", bad)
        with pytest.raises(ConfigError, match="CTXWRIGHT_THREADS"):
            default_threads()
