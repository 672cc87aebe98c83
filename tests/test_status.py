"""Status bar, TODO list and time sense: exact values from hand-built trajectories, the two
update modes and their audit classification, the chooser, and the 3-call limit scenario."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.events import StatusEvent, ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.errors import TodoError
from ctxwright.status.bar import STATUS_OPEN, StatusBar, StatusConfig, choose_mode
from ctxwright.status.todo import TodoList
from ctxwright.tools.registry import ToolRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import call_limit


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def phone_registry() -> ToolRegistry:
    """The same phone tool the call_limit benchmark uses."""
    return call_limit.registry()


def hand_built(session: Session) -> None:
    session.add_user("sort out my bills")
    for i, m in enumerate(["Xfinity", "Xfinity", "Comcast", "Xfinity"]):
        session.add_assistant(Message(role="assistant", tool_calls=(call("phone_call", {"merchant": m}, f"c{i}"),)))
        session.add_tool_result(f"c{i}", "busy", tool_name="phone_call", ok=True, elapsed_ms=100.0 * (i + 1))
    session.add_assistant(Message(role="assistant", tool_calls=(call("search", {"q": "x"}, "s1"),)))
    session.add_tool_result(
        "s1",
        json.dumps({"error": {"type": "timeout", "message": "search hung"}}),
        tool_name="search",
        ok=False,
        elapsed_ms=5012.0,
    )


def test_counters_limits_timings_and_error_exact():
    s = Session.start(Prefix.build("sys"))
    hand_built(s)
    bar = StatusBar(
        StatusConfig(
            limits={"phone_call[Xfinity]": 3, "phone_call": 10},
            key_args={"phone_call": "merchant"},
            expected_ms={"search": 500},
        )
    )
    v = bar.values(s)
    assert v["calls.phone_call"] == "4/10 (6 left)"
    assert v["calls.phone_call[Xfinity]"] == "3/3 limit reached"
    assert v["calls.phone_call[Comcast]"] == "1 call"
    assert v["calls.search"] == "1 call"
    assert v["last_calls"] == "phone_call: 300 ms; phone_call: 400 ms; search: 5012 ms, expected ~500 ms"
    assert v["last_error"] == "search: timeout: search hung"


def test_time_budget_and_env():
    clock = Clock()
    s = Session.start(Prefix.build("sys"))
    s.add_user("hi")
    object.__setattr__(s.events[0], "created_at", clock.t - 125)
    bar = StatusBar(StatusConfig(max_iterations=20, token_budget=10_000, wall_budget_s=600), clock=clock)
    v = bar.values(s, iteration=5, tokens_used=2_500)
    assert v["elapsed"] == "125 s since the session started"
    assert v["iterations_left"] == "16" and v["tokens_left"] == "7,500" and v["time_left"] == "475 s"
    assert v["python"] and v["os"] and v["cwd"]


def test_items_are_configurable():
    s = Session.start(Prefix.build("sys"))
    hand_built(s)
    v = StatusBar(StatusConfig(items=("counters",))).values(s)
    assert all(k.startswith("calls.") for k in v)


def test_todo_tools_and_errors():
    clock = Clock()
    s = Session.start(Prefix.build("sys"))
    todo = TodoList(s, clock=clock)
    todo.rewrite(["read the logs", "fix the bug", "run the tests"])
    assert [i.id for i in todo.items] == [1, 2, 3]
    todo.update(1, "in_progress")
    with pytest.raises(TodoError, match="already in_progress"):
        todo.update(2, "in_progress")
    with pytest.raises(TodoError, match="no TODO item with id 9"):
        todo.update(9, "completed")
    with pytest.raises(TodoError, match="unknown status"):
        todo.update(1, "done")
    clock.t += 10
    todo.update(1, "completed")
    assert todo.items[0].updated_at == clock.t and todo.items[0].created_at == clock.t - 10
    # ids are stable across a rewrite that keeps an item
    todo.rewrite(["fix the bug", "write docs"])
    assert [(i.id, i.text) for i in todo.items] == [(2, "fix the bug"), (4, "write docs")]
    assert todo.render() == "[ ] 2. fix the bug; [ ] 4. write docs"
    # rebuilt exactly from the event log
    assert TodoList(s).items == todo.items


def test_todo_errors_reach_the_model_as_tool_errors():
    s = Session.start(Prefix.build("sys"))
    todo = TodoList(s)
    reg = ToolRegistry(todo.tools())
    out = reg.execute(call("update_todo_status", {"id": 3, "status": "completed"}, "t"))
    assert not out.ok and "rewrite_todo_list first" in json.loads(out.content)["error"]["message"]


@pytest.mark.parametrize(
    "S,R,N,alpha,expected",
    [
        (100, 2000, 20, 0.1, "append"),  # 0.1·100·20/2 = 100 < 0.9·2000 = 1800
        (800, 300, 40, 0.1, "replace"),  # 1600 > 270
        (500, 1000, 20, 0.0, "append"),  # free cache reads: keeping stale status costs nothing
        (10, 10_000, 10, 1.0, "replace"),  # no cache discount: replacing loses nothing
        (200, 900, 10, 0.5, "replace"),  # 500 == 450? 0.5·200·10/2 = 500 > 450
    ],
)
def test_chooser_arithmetic(S, R, N, alpha, expected):
    assert choose_mode(S, R, N, alpha) == expected


def run_with_status(mode: str, replies) -> tuple[Agent, ScriptedBackend]:
    reg = phone_registry()
    s = Session.start(Prefix.build("sys", reg.specs()))
    backend = ScriptedBackend(replies)
    bar = StatusBar(
        StatusConfig(
            mode=mode,
            limits={"phone_call[Xfinity]": 3},
            key_args={"phone_call": "merchant"},
            items=("counters", "error"),
        )
    )
    return Agent(s, backend, reg, AgentConfig(), status=bar), backend


def calls_then_answer(n: int):
    return [
        Message(role="assistant", tool_calls=(call("phone_call", {"merchant": "Xfinity"}, f"c{i}"),)) for i in range(n)
    ] + ["done"]


@pytest.mark.parametrize("mode", ["replace", "append"])
def test_status_is_last_and_never_in_prefix(mode):
    agent, backend = run_with_status(mode, calls_then_answer(3))
    agent.run("call Xfinity")
    for req in backend.requests:
        last = req.messages[-1]
        assert last.role == "user" and last.content.startswith(STATUS_OPEN)
        assert STATUS_OPEN not in (req.messages[0].content or "")
    statuses = [[m for m in r.messages if (m.content or "").startswith(STATUS_OPEN)] for r in backend.requests]
    if mode == "replace":
        assert [len(x) for x in statuses] == [1, 1, 1, 1]
    else:
        assert [len(x) for x in statuses] == [1, 2, 3, 4]
    assert "calls.phone_call[Xfinity]: 3/3 limit reached" in backend.requests[-1].messages[-1].content


def test_replace_is_classified_status_replaced_and_append_is_append():
    agent, _ = run_with_status("replace", calls_then_answer(2))
    r = agent.run("call Xfinity")
    assert [c.cause for c in r.calls] == ["first", "status_replaced", "status_replaced"]
    assert all((c.reusable_tokens or 0) < (c.prompt_tokens or 0) for c in r.calls[1:])
    agent, _ = run_with_status("append", calls_then_answer(2))
    r = agent.run("call Xfinity")
    assert [c.cause for c in r.calls] == ["first", "append", "append"]


def test_three_call_limit_scenario_scripted():
    """Experiment 2-7's scenario: a policy that obeys what the status bar says stops at 3;
    the same policy without a status bar has nothing to go on and calls a 4th time."""

    def policy(request: ChatRequest) -> Message:
        last = request.messages[-1].content or ""
        if "limit reached" in last:
            return Message(role="assistant", content="Xfinity hit its limit of 3 calls; stopping.")
        n = sum(1 for m in request.messages if m.role == "tool")
        return Message(role="assistant", tool_calls=(call("phone_call", {"merchant": "Xfinity"}, f"c{n}"),))

    with_bar, _ = run_with_status("append", [policy] * 10)
    with_bar.config.max_iterations = 6
    r = with_bar.run("keep calling Xfinity until someone answers")
    assert r.stop_reason == "final_answer" and sum(c.tool_calls for c in r.calls) == 3

    reg = phone_registry()
    s = Session.start(Prefix.build("sys", reg.specs()))
    without = Agent(s, ScriptedBackend([policy] * 10), reg, AgentConfig(max_iterations=6))
    r = without.run("keep calling Xfinity until someone answers")
    assert sum(c.tool_calls for c in r.calls) > 3


def test_side_channel_timestamps_not_in_prefix():
    reg = phone_registry()
    s = Session.start(Prefix.build("sys", reg.specs()))
    backend = ScriptedBackend(
        [Message(role="assistant", tool_calls=(call("phone_call", {"merchant": "A"}, "c"),)), "ok"]
    )
    Agent(s, backend, reg, AgentConfig(timestamps=True)).run("hi")
    req = backend.requests[-1]
    import re

    stamp = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")
    assert stamp.match(req.messages[1].content) and stamp.match(req.messages[3].content)
    assert not stamp.search(req.messages[0].content)


def test_auto_mode_uses_measured_sizes():
    s = Session.start(Prefix.build("sys"))
    bar = StatusBar(StatusConfig(mode="auto", alpha=0.1, expected_updates=10, items=("counters",)))
    s.add_user("x" * 40_000)  # a big suffix between updates
    bar.record(s, count=lambda t: len(t) // 4)
    s.add_user("y" * 40_000)
    bar.record(s, count=lambda t: len(t) // 4)
    last = s.events[-1]
    assert isinstance(last, StatusEvent) and last.mode == "append"  # tiny status, 10k-token suffix
    bar2 = StatusBar(StatusConfig(mode="auto", alpha=0.9, expected_updates=50, items=("env",)))
    s2 = Session.start(Prefix.build("sys"))
    s2.add_user("short")
    bar2.record(s2, count=lambda t: len(t) // 4)
    s2.add_user("short")
    bar2.record(s2, count=lambda t: len(t) // 4)
    last = s2.events[-1]
    assert isinstance(last, StatusEvent) and last.mode == "replace"
    shown = [m for m in s2.trajectory() if (m.content or "").startswith(STATUS_OPEN)]
    assert len(shown) == 1 and shown[0].content == last.message.content


@pytest.mark.parametrize("mode", ["replace", "append"])
def test_resumed_status_session_audits_like_the_live_one(mode, store):
    from ctxwright.store.sessions import Store

    reg = phone_registry()
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    bar = StatusBar(StatusConfig(mode=mode, items=("counters",)))
    live = Agent(s, ScriptedBackend(calls_then_answer(2)), reg, AgentConfig(), status=bar)
    live.run("call Xfinity")
    resumed = Session.resume(Store(store.path), s.id)
    rebuilt = Agent(resumed, ScriptedBackend(["x"]), reg, AgentConfig(), status=StatusBar(bar.config))
    assert [r.reusable_prefix_bytes for r in rebuilt.auditor.rows] == [
        r.reusable_prefix_bytes for r in live.auditor.rows
    ]
    assert [r.cause for r in rebuilt.auditor.rows] == [r.cause for r in live.auditor.rows]


# -- which fields are sent (status_fields) ---------------------------------------------------


def _keys(text: str) -> list[str]:
    return [line.split(":", 1)[0] for line in text.splitlines()[1:-1]]


def test_status_fields_drop_or_choose_and_refuse_unknown_names() -> None:
    from ctxwright.errors import ConfigError
    from ctxwright.status.bar import ENV_KEYS, FIELDS, status_fields

    assert status_fields(None) == FIELDS
    dropped = status_fields(["-cwd", "-os"])
    assert "cwd" not in dropped and "os" not in dropped and {"shell", "python", "git_branch", "todo"} <= set(dropped)
    assert status_fields("all,-cwd,-os") == dropped == status_fields("-cwd -os")
    assert status_fields(["error", "counters"]) == ("counters", "error")  # the block's order, not the list's
    assert status_fields(["env", "-cwd"]) == tuple(k for k in ENV_KEYS if k != "cwd")
    for bad, words in [
        (["-cwd", "-sos"], "unknown field '-sos'; use counters, repeats"),
        ("cwd,home", "unknown field 'home'"),
        (["env", "-env"], "keeps no field; to send no status, turn the bar off"),
        (3, "give a list of field names"),
    ]:
        with pytest.raises(ConfigError) as exc:
            status_fields(bad)  # type: ignore[arg-type]
        assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    with pytest.raises(ConfigError) as exc:
        status_fields(["nope"])
    assert all(name in str(exc.value) for name in (*FIELDS, "env", "all"))  # every valid name, listed


def test_env_lines_are_shown_one_by_one() -> None:
    s = Session.start(Prefix.build("sys"))
    hand_built(s)
    bar = StatusBar(StatusConfig(items=("error", "shell", "python")), cwd="/secret/project")
    text = bar.render(bar.values(s))
    assert _keys(text) == ["last_error", "shell", "python"] and "/secret/project" not in text


def test_status_fields_leave_cwd_and_os_out_of_what_is_sent_and_a_resume_keeps_them(tmp_path: Path) -> None:
    from ctxwright import Harness

    db = tmp_path / "agent.db"
    workspace = tmp_path / "private-project"
    workspace.mkdir()
    first = ScriptedBackend(["hello there"])
    with Harness(system="S.", backend=first, db=db, workspace=workspace, status_fields=["-cwd", "-os"]) as h:
        h.run("hi")
        sid = h.session_id
    second = ScriptedBackend(["hello again"])
    with Harness.resume(sid, backend=second, db=db, workspace=workspace) as h2:  # no status_fields given
        h2.run("and again")
        record = h2.session.meta["harness"]
    for backend in (first, second):
        status = backend.requests[-1].messages[-1].content or ""
        assert status.startswith(STATUS_OPEN)
        keys = _keys(status)
        assert "cwd" not in keys and "os" not in keys and "shell" in keys and "last_error" in keys
        assert str(workspace) not in json.dumps([m.content for m in backend.requests[-1].messages])
    assert "cwd" not in record["status"]["fields"] and "shell" in record["status"]["fields"]
    # the default sends them (what docs/status-bar.md warns about)
    third = ScriptedBackend(["hi"])
    with Harness(system="S.", backend=third, workspace=workspace) as h3:
        h3.run("hi")
    assert {"cwd", "os"} <= set(_keys(third.requests[-1].messages[-1].content or ""))


def test_an_unknown_status_field_is_one_line_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwright.cli.main import main

    code = main(["run", "--db", str(tmp_path / "a.db"), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--status-fields", "all,-cwd,-home", "hi"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1, err
    assert "unknown field '-home'" in err and "cwd, os, shell" in err and "Traceback" not in err


# -- last_error after the repeat note -------------------------------------------------------


def test_last_error_carries_the_message_after_a_repeat_note(tmp_path: Path) -> None:
    from ctxwright import Harness, tool

    @tool
    def get_current_time() -> str:
        """The time now."""
        raise RuntimeError("the clock service is offline")

    replies = [Message(role="assistant", tool_calls=(call("get_current_time", {}, f"t{i}"),)) for i in range(4)]
    backend = ScriptedBackend([*replies, "I cannot read the clock."])
    with Harness(system="S.", tools=[get_current_time], backend=backend, max_repeats=3, timestamps=True) as h:
        h.run("what time is it?")
        events = h.session.events
    noted = [ev for ev in events if isinstance(ev, ToolEvent) and "[ctxwright:" in (ev.message.content or "")]
    assert noted, "the fourth identical call gets the repeat note"
    status = backend.requests[-1].messages[-1].content or ""
    line = next(li for li in status.splitlines() if li.startswith("last_error: "))
    assert line == "last_error: get_current_time: RuntimeError: the clock service is offline", line


def test_last_error_of_a_plain_text_failure_is_its_text() -> None:
    s = Session.start(Prefix.build("sys"))
    s.add_user("go")
    s.add_assistant(Message(role="assistant", tool_calls=(call("fetch", {}, "f1"),)))
    s.add_tool_result("f1", "connection refused\nby host", tool_name="fetch", ok=False)
    assert (
        StatusBar(StatusConfig(items=("error",))).values(s)["last_error"] == "fetch: error: connection refused by host"
    )
