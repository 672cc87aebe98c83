"""The one renderer: what is rebuilt from the store is, byte for byte, what the backend
received -- for random sessions mixing parallel tool rounds, reasoning under every policy,
status updates in both modes, compactions of every layer, failed calls and resumes."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.audit.live import past_requests
from ctxwright.audit.logs import requests_from_export
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.events import AssistantEvent, BudgetRecord, StatusEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall, canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import ReasoningPolicy, install
from ctxwright.core.render import Renderer, RenderSettings, render
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.core.session import Session
from ctxwright.errors import BackendUnavailable
from ctxwright.status.bar import StatusBar, StatusConfig
from ctxwright.store.export import request_bodies, session_export
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool

TOOLS = (
    ToolSpec.create("lookup", "look a key up", {"type": "object", "properties": {"key": {"type": "string"}}}),
    ToolSpec.create("fetch", "fetch a page", {"type": "object", "properties": {"page": {"type": "integer"}}}),
)
MODES = ("strip", "keep", "must_send_back", "qwen3")
STEPS = (
    "user",
    "tool_round",
    "answer",
    "failed_call",
    "status_replace",
    "status_append",
    "clearing",
    "noise",
    "trim",
    "full",
    "resume",
)


def _reasoning(data, mode: str, tool_calls: bool) -> tuple[str | None, str | None]:
    """(reasoning_content, a leading <think> block for the content) for one reply."""
    if mode == "must_send_back" and tool_calls:  # the policy requires it: present, maybe empty
        return data.draw(st.sampled_from(["thinking", ""]), label="reasoning"), None
    r = data.draw(st.sampled_from([None, "thinking", ""]), label="reasoning")
    think = data.draw(st.sampled_from([None, "<think>plan</think>"]), label="think")
    return r, think


class Driver:
    """Plays one random session the way the agent loop does: render, send, record."""

    def __init__(self, data, tmp: Path, mode: str) -> None:
        self.data, self.mode, self.path = data, mode, tmp / "s.db"
        self.store = Store(self.path)
        self.s = Session.start(Prefix.build("sys", TOOLS), store=self.store, model="session-model")
        install(self.s, ReasoningPolicy(mode))  # type: ignore[arg-type]
        self.reply: list[Message] = []
        self.backend = ScriptedBackend([lambda req: self._next()], model="served-model")
        self.n = 0

    def _next(self) -> Message:
        msg = self.reply.pop()
        if msg.role != "assistant":
            raise BackendUnavailable("scripted outage")
        return msg

    def call(self, reply: Message) -> bool:
        """One model call; False when the backend failed (recorded as a failed call)."""
        s, draw = self.s, self.data.draw
        req = s.build_request(
            tool_choice=draw(st.sampled_from(["auto", "required", "none", "lookup"]), label="tool_choice"),
            max_tokens=draw(st.sampled_from([None, 64, 512]), label="max_tokens"),
            temperature=draw(st.sampled_from([None, 0.0, 0.7]), label="temperature"),
            extra=draw(st.sampled_from([{}, {"seed": 3}]), label="extra"),
        )
        # the incremental renderer is the pure function of the events
        assert req.messages == tuple(render(s.prefix, s.events, RenderSettings.from_meta(s.meta)))
        self.reply.append(reply)
        try:
            completion = self.backend.complete(req)
        except BackendUnavailable as exc:
            s.record_call(req, None, error=str(exc), model=self.backend.model)
            return False
        idx = s.record_call(req, completion.usage, model=self.backend.model)
        s.add_assistant(completion.message, completion.usage, call_index=idx, finish_reason=completion.finish_reason)
        return True

    def tool_round(self) -> None:
        k = self.data.draw(st.integers(1, 3), label="parallel calls")
        calls = tuple(ToolCall(f"c{self.n}_{i}", "lookup", f'{{"key":"k{i}"}}') for i in range(k))
        self.n += 1
        r, think = _reasoning(self.data, self.mode, True)
        if self.call(Message(role="assistant", content=think, tool_calls=calls, reasoning_content=r)):
            for tc in calls:
                self.s.add_tool_result(
                    tc.id, f"value of {tc.arguments} " * 5, tool_name="lookup", budget=BudgetRecord(tc.id)
                )

    def answer(self) -> None:
        r, think = _reasoning(self.data, self.mode, False)
        self.call(Message(role="assistant", content=(think or "") + "the answer", reasoning_content=r))

    def compact(self, layer: str) -> None:
        s, draw = self.s, self.data.draw
        shown = [seq for seq, _ in s.base_entries() if seq is not None]
        if not shown:
            return
        if layer in ("clearing", "noise"):
            tools = [seq for seq in shown if isinstance(s.events[seq], ToolEvent)] or shown
            picked = draw(st.lists(st.sampled_from(tools), min_size=1, max_size=3, unique=True), label=layer)
            s.add_compaction(layer, replace={q: f"[{layer}: {q}]" for q in picked}, call_index=s.call_count)
            return
        a = draw(st.integers(0, len(shown) - 1), label="from")
        b = draw(st.integers(a, min(len(shown), a + 4)), label="to")
        span = shown[a:b] or shown[a : a + 1]
        note = (span[0], f"[{layer}: {len(span)} message(s) removed]")
        s.add_compaction(layer, drop=span, note=note, note_replaces_all=layer == "full", call_index=s.call_count)

    def step(self, name: str) -> None:
        s = self.s
        if name == "user":
            s.add_user(f"question {len(s.events)}")
        elif name == "tool_round":
            self.tool_round()
        elif name == "answer":
            self.answer()
        elif name == "failed_call":
            self.call(Message(role="user", content="outage"))  # the scripted backend raises
        elif name.startswith("status_"):
            mode = name.removeprefix("status_")
            text = f"<agent_status>\ncalls: {s.call_count}\n</agent_status>"
            s.append(StatusEvent(message=Message(role="user", content=text), mode=mode))  # type: ignore[arg-type]
        elif name == "resume":
            self.s = Session.resume(Store(self.path), s.id)
            install(self.s)  # the recorded mode
        else:
            self.compact(name)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), mode=st.sampled_from(MODES), steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=24))
def test_property_requests_rebuilt_from_the_store_are_the_requests_sent(data, mode, steps):
    with tempfile.TemporaryDirectory() as tmp:
        d = Driver(data, Path(tmp), mode)
        d.s.add_user("the task")
        for name in [*steps, "answer"]:
            d.step(name)
        sent = d.backend.requests
        store = Store(d.path)  # a fresh connection: only what was stored
        # 1. export --requests: every call's body, rebuilt, equals what the backend received
        sid, bodies, missing = request_bodies(store, d.s.id)
        assert missing == [] and all(b.verified for b in bodies) and all(not b.unknown for b in bodies)
        assert [canonical_json(b.body) for b in bodies] == [canonical_json(r.openai_body("served-model")) for r in sent]
        # 2. the audit's replay (resume, export audit) rebuilds the answered calls exactly
        answered = {c.call_index for c in store.calls(sid) if c.error is None}
        wanted = [[m.canonical() for m in r.messages[1:]] for k, r in enumerate(sent) if k in answered]
        resumed = Session.resume(store, sid)
        assert [[canonical_json(m) for m in p.messages] for p in past_requests(resumed)] == wanted
        export = [req for req, _ in requests_from_export(session_export(store, sid)) if req is not None]
        assert [[canonical_json(m) for m in p.messages] for p in export] == wanted
        # 3. and the resumed session renders what the live one renders now
        assert resumed.messages() == d.s.messages()
        store.close()
        d.store.close()


def test_incremental_and_pure_rendering_agree_event_by_event():
    """Feeding one event at a time (the live cache) and rendering from scratch agree after
    every event, including a note waiting for a later event and a replaced future seq."""
    s = Session.start(Prefix.build("sys", TOOLS))
    install(s, ReasoningPolicy("qwen3"))
    s.add_user("q1")
    s.add_assistant(Message(role="assistant", content="<think>x</think>a1", reasoning_content="r1"))
    s.add_compaction("trim", drop=[0], note=(5, "[note for a later seq]"))
    s.add_compaction("clearing", replace={6: "[cleared before it existed]"})
    s.add_user("q2")
    s.append(StatusEvent(message=Message(role="user", content="<agent_status>1</agent_status>"), mode="append"))
    s.add_tool_result("c9", "six", tool_name="lookup")  # seq 6: replaced by the earlier compaction
    s.append(StatusEvent(message=Message(role="user", content="<agent_status>2</agent_status>"), mode="replace"))
    live = Renderer(s.settings(), tools_in_use=True)
    for i, ev in enumerate(s.events):
        live.feed(ev)
        pure = Renderer(s.settings(), tools_in_use=True).feed_all(s.events[: i + 1])
        assert live.entries() == pure.entries() and live.trajectory() == pure.trajectory()
    contents = [m.content for m in s.trajectory()]
    # the note stands before seq 5 (a status hidden by the newer one), so right after q2
    assert contents == [
        "a1",
        "q2",
        "[note for a later seq]",
        "[cleared before it existed]",
        "<agent_status>2</agent_status>",
    ]


def test_resumed_strip_session_with_reasoning_is_audited_as_append(store):
    """Issue 10's regression: replies carrying reasoning_content under ``strip``, resumed;
    the offline replay left the policy out, so the first call after the resume was audited
    ``history_edited``. Rendered by one renderer with the recorded policy, it is ``append``."""

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    reg = ToolRegistry()
    reg.register(lookup)
    s = Session.start(Prefix.build("sys", reg.specs()), store=store, model="deepseek-chat")
    install(s, ReasoningPolicy("strip"))
    replies = [
        Message(
            role="assistant", content=None, reasoning_content="think", tool_calls=(call("lookup", {"key": "a"}, "c1"),)
        ),
        Message(role="assistant", content="a is known", reasoning_content="done thinking"),
    ]
    first = Agent(s, ScriptedBackend(replies), reg, AgentConfig())
    assert [c.cause for c in first.run("look up a").calls] == ["first", "append"]
    resumed = Session.resume(Store(store.path), s.id)
    install(resumed)
    backend = ScriptedBackend(["nothing else"])
    again = Agent(resumed, backend, reg, AgentConfig(), status=StatusBar(StatusConfig(mode="append")))
    r = again.run("anything else?")
    assert [c.cause for c in r.calls] == ["append"]
    assert not any(m.reasoning_content for m in backend.requests[0].messages)  # strip, as before the resume


def test_status_view_hides_by_seq_not_by_text():
    """A replace-mode status hides the status event before it, whatever a user typed."""
    s = Session.start(Prefix.build("sys"))
    s.add_user("<agent_status> typed by the user")  # looks like a status, is not one
    s.append(StatusEvent(message=Message(role="user", content="<agent_status>1</agent_status>"), mode="append"))
    s.append(StatusEvent(message=Message(role="user", content="<agent_status>2</agent_status>"), mode="replace"))
    assert [m.content for m in s.trajectory()] == ["<agent_status> typed by the user", "<agent_status>2</agent_status>"]
    assert len(s.base_messages()) == 3  # the compaction layers still see every recorded status


def test_settings_come_from_the_record():
    assert RenderSettings.from_meta({"reasoning_mode": "qwen3"}).reasoning == "qwen3"
    assert RenderSettings.from_meta({}).policy is None
    msgs = [Message(role="assistant", content="a", reasoning_content="r")]
    r = Renderer(RenderSettings("strip"), tools_in_use=False)
    r.feed(AssistantEvent(seq=0, message=msgs[0]))
    first, second = r.trajectory(), r.trajectory()
    assert first[0].reasoning_content is None and first[0] is second[0]  # rewritten once, same object
    assert ChatRequest(messages=tuple(first)).canonical_bytes() == ChatRequest(messages=tuple(second)).canonical_bytes()


def test_show_marks_what_the_next_request_no_longer_sends_as_recorded(store, capsys):
    from ctxwright.cli.main import main

    s = Session.start(Prefix.build("sys"), store=store)
    s.add_user("first question")
    s.add_assistant(Message(role="assistant", content="first answer"))
    s.add_user("second question")
    s.add_compaction("trim", drop=[0, 1], note=(0, "[removed]"))
    s.add_compaction("clearing", replace={2: "[shortened]"})
    assert main(["--db", str(store.path), "show", s.id]) == 0
    lines = capsys.readouterr().out.splitlines()
    first = next(line for line in lines if "first question" in line)
    second = next(line for line in lines if "second question" in line)
    assert "(no longer sent)" in first and "(now sent as: [shortened])" in second
