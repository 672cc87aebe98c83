"""The ReAct loop against the scripted backend: parallel calls, every error kind, the cap."""

from __future__ import annotations

import json
import threading
import time

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.errors import BackendUnavailable
from ctxwright.store.sessions import Store
from ctxwright.tools.builtin import default_tools
from ctxwright.tools.registry import ToolRegistry, tool


def make(replies, store=None, registry=None, **cfg):
    reg = registry or default_tools()
    session = Session.start(Prefix.build("You answer with tools.", reg.specs()), store=store)
    backend = ScriptedBackend(replies)
    return Agent(session, backend, reg, AgentConfig(**cfg)), backend


def tool_msgs(session):
    return [m for m in session.messages() if m.role == "tool"]


def test_parallel_tool_calls_then_final_answer(store):
    a, backend = make(
        [
            Message(
                role="assistant",
                tool_calls=(
                    call("get_current_time", {"timezone": "America/Vancouver"}, "c1"),
                    call("get_weather", {"city": "Vancouver"}, "c2"),
                ),
            ),
            "It is sunny in Vancouver.",
        ],
        store=store,
    )
    r = a.run("time and weather in Vancouver?")
    assert r.stop_reason == "final_answer" and r.final_answer == "It is sunny in Vancouver."
    tms = tool_msgs(a.session)
    assert [m.tool_call_id for m in tms] == ["c1", "c2"]  # paired, in call order
    assert "America/Vancouver" in tms[0].content and "Vancouver" in tms[1].content
    # the second request carries the first reply verbatim and both results
    second = backend.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert len(store.calls(a.session.id)) == 2


def test_parallel_calls_run_concurrently():
    reg = ToolRegistry()

    @tool
    def slow(n: int) -> str:
        """Sleep a little.

        Args:
            n: which call
        """
        time.sleep(0.4)
        return f"done {n}"

    reg.register(slow)
    a, _ = make(
        [Message(role="assistant", tool_calls=tuple(call("slow", {"n": i}, f"c{i}") for i in range(4))), "ok"],
        registry=reg,
    )
    t0 = time.perf_counter()
    a.run("go")
    assert time.perf_counter() - t0 < 1.2  # 4 × 0.4 s serially would be 1.6 s
    assert [m.content for m in tool_msgs(a.session)] == [f"done {i}" for i in range(4)]


@pytest.mark.parametrize(
    "bad_call,error_type",
    [
        (call("no_such_tool", {}, "c1"), "unknown_tool"),
        (call("get_weather", "{city: Vancouver", "c1"), "invalid_arguments_json"),
        (call("get_weather", {"town": "Vancouver"}, "c1"), "invalid_arguments"),
        (call("calculator", {"expression": "__import__('os')"}, "c1"), "CalculatorError"),
    ],
)
def test_each_error_kind_is_fed_back_and_loop_continues(bad_call, error_type):
    a, backend = make([Message(role="assistant", tool_calls=(bad_call,)), "recovered"])
    r = a.run("q")
    assert r.stop_reason == "final_answer" and r.final_answer == "recovered"
    (tm,) = tool_msgs(a.session)
    err = json.loads(tm.content)["error"]
    assert err["type"] == error_type
    assert err["arguments"] == bad_call.arguments  # what the model sent, verbatim
    assert err["hint"]
    assert backend.requests[1].messages[-1].tool_call_id == "c1"


def test_hanging_tool_times_out_and_others_finish():
    reg = ToolRegistry()
    release = threading.Event()

    @tool
    def hang() -> str:
        """Never returns in time."""
        release.wait(10)
        return "late"

    @tool
    def quick() -> str:
        """Returns at once."""
        return "fast"

    reg.register(hang)
    reg.register(quick)
    a, _ = make(
        [Message(role="assistant", tool_calls=(call("hang", {}, "h"), call("quick", {}, "q"))), "ok"],
        registry=reg,
        tool_timeout_s=0.3,
    )
    t0 = time.perf_counter()
    a.run("q")
    release.set()
    assert time.perf_counter() - t0 < 3
    hang_msg, quick_msg = tool_msgs(a.session)
    assert json.loads(hang_msg.content)["error"]["type"] == "timeout"
    assert quick_msg.content == "fast"


def test_iteration_cap_reports_stop_reason():
    looping = Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c"),))
    a, backend = make([looping], max_iterations=3)
    r = a.run("loop")
    assert r.stop_reason == "max_iterations" and r.iterations == 3 and r.final_answer is None
    assert len(backend.requests) == 3


def test_huge_tool_output_is_capped_with_a_note():
    reg = ToolRegistry()

    @tool
    def dump() -> str:
        """Five megabytes."""
        return "x" * 5_000_000

    reg.register(dump)
    a, _backend = make(
        [Message(role="assistant", tool_calls=(call("dump", {}, "d"),)), "ok"], registry=reg, max_result_chars=10_000
    )
    a.run("q")
    (tm,) = tool_msgs(a.session)
    assert len(tm.content) < 11_000 and "5,000,000 characters" in tm.content


def test_backend_failure_keeps_every_event(store):
    a, _ = make(
        [
            Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c"),)),
            BackendUnavailable("endpoint down"),
        ],
        store=store,
    )
    r = a.run("q")
    assert r.stop_reason == "backend_error" and "endpoint down" in (r.error or "")
    kinds = [e.kind for e in store.events(a.session.id)]
    assert kinds == ["user", "assistant", "tool"]
    calls = store.calls(a.session.id)
    assert (calls[-1].error or "").startswith("BackendUnavailable")
    # the session can be resumed and continued
    resumed = Session.resume(Store(store.path), a.session.id)
    assert len(resumed.events) == 3


def test_tool_choice_first_applies_only_to_first_call():
    a, backend = make(
        [Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c"),)), "done"],
        tool_choice_first="required",
    )
    a.run("q")
    assert [r.tool_choice for r in backend.requests] == ["required", "auto"]


def test_ledger_parts_add_up():
    a, _ = make([Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c"),)), "done"])
    r = a.run("weather in Paris?")
    last = r.calls[-1].ledger
    assert last.tool_results > 0 and last.latest_user > 0 and last.history > 0 and last.system_and_tools > 0
    assert abs(sum(last.shares().values()) - 1) < 1e-9


def test_max_tool_rounds_then_answer_is_required():
    looping = Message(role="assistant", tool_calls=(call("get_weather", {"city": "Paris"}, "c"),))
    a, backend = make([looping, looping, "answer"], max_tool_rounds=2, tool_choice_first="required")
    r = a.run("q")
    assert [q.tool_choice for q in backend.requests] == ["required", "auto", "none"]
    assert r.stop_reason == "final_answer"
