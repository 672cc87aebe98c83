"""The per-call audit inside a live session: stored with every call, shown by `show`,
continued across resume, and a recorded compaction reported as such."""

from __future__ import annotations

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.audit.compare import reusable_tokens, segments_of
from ctxwright.audit.live import audit_request
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.core.events import UserEvent
from ctxwright.core.messages import Message, Usage
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import Completion
from ctxwright.core.session import Session
from ctxwright.store.sessions import Store
from ctxwright.tools.builtin import default_tools


def _agent(session, replies):
    return Agent(session, ScriptedBackend(replies), default_tools(), AgentConfig())


def test_each_call_is_audited_and_stored(store, capsys):
    reg = default_tools()
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    a = _agent(s, [Message(role="assistant", tool_calls=(call("get_weather", {"city": "Oslo"}, "c1"),)), "done"])
    r = a.run("weather in Oslo?")
    assert [c.cause for c in r.calls] == ["first", "append"]
    first, second = store.calls(s.id)
    assert first.audit.cause == "first" and first.audit.reusable_prefix_tokens == 0
    assert second.audit.cause == "append"
    # everything the first request held is reusable by the second, to the byte
    first_req = audit_request(a.backend.requests[0], None)
    assert second.audit.raw["reusable_prefix_bytes"] == sum(len(seg) for seg in segments_of(first_req))
    summ = a.auditor.summary()
    assert summ.requests == 2 and summ.hit_ratio is not None
    assert main(["--db", str(store.path), "show", s.id]) == 0
    out = capsys.readouterr().out
    assert "append" in out and "hit ratio" in out and "efficiency" in out


def test_resumed_session_audits_against_what_it_sent_before(store):
    reg = default_tools()
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    _agent(s, ["first answer"]).run("q1")
    resumed = Session.resume(Store(store.path), s.id)
    a2 = _agent(resumed, ["second answer"])
    assert len(a2.auditor.rows) == 1  # rebuilt from the store
    r = a2.run("q2")
    assert r.calls[0].cause == "append" and (r.calls[0].reusable_tokens or 0) > 0
    assert store.calls(s.id)[1].audit.index == 1


def test_recorded_compaction_is_reported_as_compaction_not_edit(store):
    s = Session.start(Prefix.build("sys"), store=store)
    a = Agent(s, ScriptedBackend(["a", "b"]), default_tools(), AgentConfig())
    a.run("q1")
    first_user = next(ev.seq for ev in s.events if isinstance(ev, UserEvent))
    s.add_compaction("test", replace={first_user: "[summary] q1"})
    r = a.run("q2")
    assert r.calls[-1].cause == "compaction"
    assert r.calls[-1].reusable_tokens is not None


def test_edit_without_a_compaction_event_is_history_edited(store, monkeypatch):
    s = Session.start(Prefix.build("sys"), store=store)
    a = Agent(s, ScriptedBackend(["a", "b"]), default_tools(), AgentConfig())
    a.run("q1")
    # a harness bug that edits history in place (the renderer never does: no event says so)
    rendered = s.trajectory
    monkeypatch.setattr(s, "trajectory", lambda: [Message(role="user", content="q1 edited"), *rendered()[1:]])
    r = a.run("q2")
    assert r.calls[-1].cause == "history_edited"
    audit = store.calls(s.id)[-1].audit.raw
    assert audit["first_divergence"] == {"message_index": 1, "field": "content", "byte_offset": 2}
    assert audit["context"]["after"].startswith(" edited")


class _ColdModel(ScriptedBackend):
    """Reports what llama.cpp reports in a new process: nothing cached, and by its own count
    nothing reusable (it held no token list yet)."""

    def complete(self, request, *, on_event=None):
        done = super().complete(request, on_event=on_event)
        u = done.usage
        usage = Usage(prompt_tokens=u.prompt_tokens, completion_tokens=u.completion_tokens, cached_tokens=0)
        usage.raw["reusable_tokens"] = 0
        return Completion(message=done.message, usage=usage, finish_reason=done.finish_reason, model=done.model)


def test_a_backend_that_held_nothing_does_not_hide_the_prefill_after_resume(store):
    """Resumed on a backend whose own count of reusable tokens is 0: the reusable prefix is
    still what the session sent before, so the call reads cached 0 of reusable N."""
    reg = default_tools()
    s = Session.start(Prefix.build("sys " * 200, reg.specs()), store=store)
    _agent(s, ["first answer"]).run("q1")
    resumed = Session.resume(Store(store.path), s.id)
    a2 = Agent(resumed, _ColdModel(["second answer"]), reg, AgentConfig())
    call = a2.run("q2").calls[0]
    assert call.cause == "append" and call.cached_tokens == 0
    assert (call.reusable_tokens or 0) > 200
    assert store.calls(s.id)[1].audit.reusable_prefix_tokens == call.reusable_tokens
    summ = a2.auditor.summary()
    assert summ.efficiency is not None and summ.efficiency < 1.0


def test_the_reusable_prefix_is_the_larger_of_the_audits_count_and_the_backends():
    # the audit's count is scaled to the provider's units (its rendering, not canonical JSON)
    assert reusable_tokens(400, 1000, 500, None) == 200
    # a backend that held nothing does not bring the audit's count down to its own 0
    assert reusable_tokens(400, 1000, 500, 0) == 200
    # where it held more than the scaled count says (llama.cpp's exact token lists), it counts
    assert reusable_tokens(400, 1000, 500, 260) == 260
    # never more than the prompt; nothing reported: ctxwright's own count is the prompt
    assert reusable_tokens(400, 1000, 500, 900) == 500
    assert reusable_tokens(400, 1000, None, None) == 400
    assert reusable_tokens(0, 0, 0, None) == 0
