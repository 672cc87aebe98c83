"""Sub-agent isolation: the child starts with the parent's exact prefix bytes, its
trajectory stays out of the parent and is stored under it, and its failures come back
to the parent as clear tool errors."""

from __future__ import annotations

import json

from ctxwright.agent.delegate import Delegator
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.errors import BackendUnavailable
from ctxwright.tools.builtin import default_tools


def _parent(store, replies, **kw):
    tools = default_tools()
    tools.register(ResultReader().tool())
    d = Delegator(**kw)
    tools.register(d.tool())
    s = Session.start(
        Prefix.build("You are the parent.", tools.specs()), store=store, backend="scripted", model="scripted"
    )
    backend = ScriptedBackend(replies)
    agent = Agent(s, backend, tools, AgentConfig())
    d.bind(agent)
    return agent, backend, d


def _delegate_call(task: str, cid: str = "d1") -> Message:
    return Message(role="assistant", tool_calls=(call("delegate", {"task": task}, cid),))


def test_child_shares_prefix_bytes_and_parent_sees_only_the_conclusion(store):
    noise = "weather noise " * 50
    replies = [
        _delegate_call("find the weather in Oslo"),
        # the child's turns (same scripted backend: no fork on this backend)
        Message(role="assistant", tool_calls=(call("get_weather", {"city": "Oslo"}, "w1"),)),
        "Oslo: 3C, cloudy (from get_weather). " + noise,
        "The sub-agent says Oslo is 3C.",
    ]
    agent, backend, d = _parent(store, replies, max_conclusion_chars=120)
    r = agent.run("What is the weather in Oslo? Use a sub-agent.")
    assert r.stop_reason == "final_answer"
    parent_req, child_req = backend.requests[0], backend.requests[1]
    assert child_req.messages[0] == parent_req.messages[0] and child_req.tools == parent_req.tools
    wire = lambda req: json.dumps([req.messages[0].to_wire(), [t.to_wire() for t in req.tools]])  # noqa: E731
    assert wire(child_req) == wire(parent_req)  # byte-identical system prompt and tool list
    assert "Task: find the weather in Oslo" in child_req.messages[1].content
    (child_id,) = d.children
    assert store.get_session(child_id).parent_id == agent.session.id
    result = next(ev for ev in agent.session.events if isinstance(ev, ToolEvent)).message.content or ""
    assert result.startswith(f"[sub-agent {child_id}") and "Oslo: 3C" in result
    assert "cut at 120 characters" in result and len(result) < 250
    # the child's tool call and result live in the child only
    assert not any(isinstance(ev, ToolEvent) and ev.tool_name == "get_weather" for ev in agent.session.events)
    assert any(isinstance(e, ToolEvent) and e.tool_name == "get_weather" for e in store.events(child_id))


def test_child_cannot_delegate_again_and_iteration_cap_is_an_error(store):
    replies = [
        _delegate_call("loop forever"),
        _delegate_call("nested", "d2"),
        *[
            Message(role="assistant", tool_calls=(call("get_current_time", {"timezone": "UTC"}, f"t{i}"),))
            for i in range(3)
        ],
        "giving up",
    ]
    agent, _backend, d = _parent(store, replies, max_iterations=3)
    agent.run("go")
    child_tool = [e for e in store.events(d.children[0]) if isinstance(e, ToolEvent)]
    assert "not available inside a sub-agent" in (child_tool[0].message.content or "")
    parent_tool = next(ev for ev in agent.session.events if isinstance(ev, ToolEvent))
    body = json.loads(parent_tool.message.content or "")["error"]
    assert "stopped without a conclusion: max_iterations" in body["message"]
    assert f"ctxwright show {d.children[0]}" in body["message"]


def test_child_backend_error_comes_back_as_a_tool_error(store):
    replies = [_delegate_call("x"), BackendUnavailable("endpoint down"), "parent continues"]
    agent, _, d = _parent(store, replies)
    r = agent.run("go")
    assert r.stop_reason == "final_answer" and r.final_answer == "parent continues"
    body = json.loads(next(ev for ev in agent.session.events if isinstance(ev, ToolEvent)).message.content or "")
    assert "backend_error" in body["error"]["message"] and "endpoint down" in body["error"]["message"]
    assert next(e.kind for e in store.events(d.children[0])) == "user"  # the child's events are kept


def test_show_prints_the_child_under_the_parent(store, capsys, tmp_path):
    replies = [_delegate_call("find the weather in Oslo"), "Oslo is cold.", "done"]
    agent, _, d = _parent(store, replies)
    agent.run("go")
    assert main(["--db", str(store.path), "show", agent.session.id]) == 0
    out = capsys.readouterr().out
    assert f"session {d.children[0]}" in out and f"child of {agent.session.id}" in out
