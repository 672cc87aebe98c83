"""The public Harness: the same agent the CLI runs, built from Python; resume re-derives
everything from the stored session and refuses a tool list that differs from its prefix."""

from __future__ import annotations

import json

import pytest

from ctxwright import (
    CompactionConfig,
    ConfigError,
    CtxwrightError,
    Harness,
    OpenAIBackend,
    PrefixMismatch,
    RunResult,
    ScriptedBackend,
    tool,
)
from ctxwright.backends.base import Backend
from ctxwright.backends.scripted import call
from ctxwright.core.messages import Message, Usage
from ctxwright.core.reasoning import META_KEY as REASONING_KEY
from ctxwright.core.reasoning import ReasoningPolicyConflict
from ctxwright.core.request import Completion
from ctxwright.defence.marking import TAGS_SECTION
from ctxwright.errors import BackendUnavailable
from ctxwright.status.bar import OPERATING_MANUAL
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


class EmbeddedLike(ScriptedBackend):
    """A scripted backend that reports the embedded backend's name, so the harness applies
    the embedded model's defaults without loading a model."""

    name = "embedded"


def _add_then_answer(answer: str = "2 + 3 = 5.") -> list:
    return [Message(role="assistant", tool_calls=(call("add", {"a": 2, "b": 3}, "c1"),)), answer]


def tool_names(request) -> list[str]:
    return [t.name for t in request.tools]


def test_run_and_resume_keep_the_prefix_bytes(tmp_path):
    db = tmp_path / "agent.db"
    first = ScriptedBackend([*_add_then_answer(), "4 + 4 = 8."])
    # append-mode status: every request is an exact extension of the previous one
    opts = dict(db=db, status_mode="append")
    with Harness(system="You add numbers with the add tool.", tools=[add], backend=first, **opts) as h:
        result = h.run("What is 2 + 3?")
        sid = h.session_id
        assert isinstance(result, RunResult)
        assert (result.final_answer, result.stop_reason) == ("2 + 3 = 5.", "final_answer")
        tool_msg = next(m for m in first.requests[1].messages if m.role == "tool")
        assert tool_msg.content == "5"  # the tool really ran
    second = ScriptedBackend(["4 + 4 = 8."])
    with Harness.resume(sid, tools=[add], backend=second, **opts) as h2:
        assert h2.session_id == sid
        assert h2.run("And 4 + 4?").final_answer == "4 + 4 = 8."
    before, after = first.requests[-1], second.requests[0]
    assert after.messages[0] == before.messages[0] and after.tools == before.tools
    assert after.messages[: len(before.messages)] == before.messages[: len(before.messages)]
    assert after.messages[-2].content == "And 4 + 4?"  # then the status bar, last


def test_served_defaults_add_the_harness_tools_and_the_status_manual(tmp_path):
    backend = ScriptedBackend(["hi"])
    with Harness(system="S.", tools=[add], backend=backend) as h:
        h.run("hello")
    req = backend.requests[0]
    assert tool_names(req) == ["add", "rewrite_todo_list", "update_todo_status", "read_result", "recall", "delegate"]
    # read_result's pages are untrusted: the tags are explained between the prompt and the manual
    assert req.messages[0].content == "S.\n\n" + TAGS_SECTION + "\n\n" + OPERATING_MANUAL
    assert req.messages[-1].content.startswith("<agent_status>")
    assert req.tool_choice == "auto"
    assert h.session.store is None  # db=None: in memory only


def test_embedded_defaults_come_from_one_place(tmp_path):
    backend = EmbeddedLike([*_add_then_answer(), "Eight, because 4 + 4 = 8."])
    with Harness(system="S.", tools=[add], backend=backend) as h:
        h.run("What is 2 + 3?")
        h.run("And 4 + 4?")
    first, second, third = backend.requests
    assert tool_names(first) == ["add"] and first.messages[0].content == "S."  # no extras, no manual
    assert first.tool_choice == "required"  # the first call of a new session must act
    assert second.tool_choice == "none"  # max_tool_rounds=1: then an answer is required
    assert third.tool_choice == "auto"  # a follow-up is not forced to call a tool
    assert [m.role for m in third.messages].count("user") == 2  # no status message


def test_explicit_options_win_over_backend_defaults():
    backend = EmbeddedLike(["ok, done and answered in full."])
    with Harness(
        system="S.",
        tools=[add],
        backend=backend,
        todo=True,
        status=False,
        tool_choice_first="auto",
        max_tool_rounds=3,
        compaction=False,
        read_result=True,  # needs compaction: ignored without it
    ) as h:
        h.run("hi")
        assert h.agent.config.max_tool_rounds == 3 and h.agent.context is None
    req = backend.requests[0]
    assert tool_names(req) == ["add", "rewrite_todo_list", "update_todo_status"]
    assert req.tool_choice == "auto"


def test_summaries_default_by_backend_and_a_given_config_is_not_mutated():
    given = CompactionConfig(keep_recent_results=2)
    with Harness(tools=[add], backend=ScriptedBackend(["x"]), compaction=given, window=9000) as served:
        cfg = served.agent.config.compaction
        assert cfg is not None and cfg.archival_summaries and cfg.full_compaction
        assert cfg.keep_recent_results == 2 and cfg.window_tokens == 9000
    assert given.archival_summaries is False and given.window_tokens is None
    with Harness(tools=[add], backend=EmbeddedLike(["x"]), compaction=given) as small:
        cfg = small.agent.config.compaction
        assert cfg is not None and not cfg.archival_summaries and not cfg.full_compaction
    on = CompactionConfig(archival_summaries=True)
    with Harness(tools=[add], backend=EmbeddedLike(["x"]), compaction=on) as kept:
        cfg = kept.agent.config.compaction
        assert cfg is not None and cfg.archival_summaries  # the config switched it on: kept


def test_default_tools_and_prompt_are_the_demo(tmp_path):
    backend = ScriptedBackend(["hi"])
    with Harness(backend=backend, delegate=False, todo=False, read_result=False, recall=False, status=False) as h:
        h.run("hello")
    req = backend.requests[0]
    assert tool_names(req) == ["get_current_time", "get_weather", "calculator"]
    assert req.messages[0].content.startswith("You are a careful assistant")


def test_workspace_adds_file_tools_after_the_given_ones(tmp_path):
    (tmp_path / "a.txt").write_text("hello")
    backend = ScriptedBackend(
        [Message(role="assistant", tool_calls=(call("read_file", {"path": "a.txt"}, "r1"),)), "It says hello."]
    )
    with Harness(tools=[add], backend=backend, workspace=tmp_path, status=False, todo=False, delegate=False) as h:
        h.run("what is in a.txt?")
    assert tool_names(backend.requests[0]) == ["add", "read_file", "list_dir", "read_result", "recall"]
    assert "hello" in next(m for m in backend.requests[1].messages if m.role == "tool").content


def _add_floats(a: float, b: float) -> float:
    """Add two integers."""
    return a + b


def _add_other_doc(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@pytest.mark.parametrize(
    ("started", "given", "expected"),
    [
        ([add], [], "missing add"),
        ([add], [add, mul], "not in the session: mul"),
        ([add, mul], [mul, add], "order differs (session: add, mul; given: mul, add)"),
        ([add, mul], [tool(name="add")(_add_floats), mul], "add: parameter schema differs"),
        ([add, mul], [tool(name="add")(_add_other_doc), mul], "add: description differs"),
    ],
    ids=["missing", "extra", "order", "schema", "description"],
)
def test_resume_refuses_a_tool_list_that_differs_from_the_prefix(tmp_path, started, given, expected):
    db = tmp_path / "a.db"
    opts = dict(db=db, status=False, todo=False, delegate=False, read_result=False, recall=False)
    with Harness(tools=started, backend=ScriptedBackend(["x"]), **opts) as h:
        sid = h.session_id
    with pytest.raises(PrefixMismatch) as exc:
        Harness.resume(sid, tools=given, backend=ScriptedBackend(["x"]), **opts)
    assert expected in str(exc.value) and sid in str(exc.value)
    assert isinstance(exc.value, CtxwrightError)


def test_resume_rederives_the_harness_tools_from_the_prefix_not_the_backend(tmp_path):
    db = tmp_path / "a.db"
    extras = dict(status=True, todo=True, read_result=True, delegate=True)
    with Harness(tools=[add], backend=EmbeddedLike(["x"]), db=db, **extras) as h:  # all extras, asked for
        sid = h.session_id
        h.run("hi")
    backend = EmbeddedLike(["y"])  # whose defaults would switch every extra off
    with Harness.resume(sid, tools=[add], backend=backend, db=db) as h2:
        h2.run("again")
        assert h2.todo is not None and h2.delegator is not None and h2.agent.status is not None
    req = backend.requests[0]
    assert tool_names(req) == ["add", "rewrite_todo_list", "update_todo_status", "read_result", "delegate"]
    assert req.tool_choice == "auto"  # a resumed session is not forced to call a tool
    with pytest.raises(PrefixMismatch, match="with the status bar"):
        Harness.resume(sid, tools=[add], backend=EmbeddedLike(["y"]), db=db, status=False)
    with pytest.raises(PrefixMismatch, match="system prompt differs"):
        Harness.resume(sid, tools=[add], backend=EmbeddedLike(["y"]), db=db, system="Another prompt.")


def test_resume_keeps_the_recorded_reasoning_mode(tmp_path):
    db = tmp_path / "a.db"
    with Harness(tools=[add], backend=ScriptedBackend(["x"]), db=db, reasoning="keep") as h:
        sid = h.session_id
    with Harness.resume(sid, tools=[add], backend=ScriptedBackend(["x"]), db=db) as h2:
        assert h2.session.meta[REASONING_KEY] == "keep"
    with pytest.raises(ReasoningPolicyConflict):
        Harness.resume(sid, tools=[add], backend=ScriptedBackend(["x"]), db=db, reasoning="strip")


def test_resume_recreates_a_served_backend_from_the_store(tmp_path, monkeypatch):
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-the-store-4711")
    db = tmp_path / "a.db"
    with F([F.reply_text("first"), F.reply_text("second")]) as srv:
        with Harness(tools=[add], backend="openai", model="fake", base_url=srv.url, window=32_000, db=db) as h:
            assert isinstance(h.backend, OpenAIBackend)
            h.run("one")
            sid = h.session_id
        with Harness.resume(sid, tools=[add], db=db) as h2:  # no backend, model or URL given
            assert (h2.backend.name, h2.backend.model) == ("openai", "fake")
            assert h2.run("two").final_answer == "second"
            assert h2.agent.context is not None and h2.agent.context.window_tokens == 32_000
        assert [r["model"] for r in srv.requests] == ["fake", "fake"]
        assert srv.requests[1]["messages"][0] == srv.requests[0]["messages"][0]
    meta = Store(db).get_session(sid).meta
    assert "sk-not-for-the-store" not in json.dumps(meta) and "api_key" not in meta["harness"]["model"]
    assert meta["harness"]["model"]["api_key_env"] == "OPENAI_API_KEY"  # only the variable's name


def test_events_reach_the_callback():
    seen: list[str] = []
    backend = ScriptedBackend(_add_then_answer())
    with Harness(tools=[add], backend=backend, on_event=lambda event: seen.append(event.kind)) as h:
        h.run("What is 2 + 3?")
    assert seen[0] == "user" and "tool" in seen and seen[-1] == "assistant"
    assert seen.count("request") == 2


def test_close_releases_what_the_harness_opened(tmp_path):
    h = Harness(tools=[add], backend=ScriptedBackend(["x"]), db=tmp_path / "a.db")
    h.close()
    with pytest.raises(CtxwrightError, match="closed"):
        h.run("hi")
    shared = Store(tmp_path / "b.db")
    with Harness(tools=[add], backend=ScriptedBackend(["x"]), db=shared) as h2:
        h2.run("hi")
    assert shared.list_sessions()  # a Store passed in stays open


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": "ollama"}, "unknown backend 'ollama'"),
        ({"backend": "openai"}, "model=NAME"),
        ({"backend": "openai", "model": "m", "gguf": "x.gguf"}, "gguf= (--gguf) is for the embedded backend"),
        ({"backend": "embedded", "model": "m"}, "are for backend='openai'"),
        ({"backend": object()}, "is not a backend"),
        ({"backend": ScriptedBackend(["x"]), "model": "m"}, "configure the object instead"),
        ({"backend": ScriptedBackend(["x"]), "compaction": 3}, "pass a CompactionConfig"),
        ({"backend": ScriptedBackend(["x"]), "reasoning": "think"}, "unknown reasoning mode"),
        ({"backend": ScriptedBackend(["x"]), "resume": "abc"}, "needs the database"),
        ({"backend": ScriptedBackend(["x"]), "tools": [add, add]}, "already registered"),
    ],
)
def test_options_that_cannot_work_are_one_clear_error(options, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Harness(**options)


class Echo(Backend):
    """A user's backend: only ``complete`` written, every other member its default."""

    name = "echo"

    def __init__(self) -> None:
        self.model = "echo-1"
        self.sinks: list[object] = []

    def complete(self, request, *, on_event=None):
        self.sinks.append(on_event)
        return Completion(Message(role="assistant", content="echo"), Usage(), "stop", self.model)


class DuckTyped:
    """Has the members, but is not a ``Backend`` subclass."""

    name, model = "duck", "duck-1"

    def complete(self, request, *, on_event=None): ...

    def count_tokens(self, text): ...

    def close(self): ...


def test_a_backend_of_your_own_subclasses_backend(tmp_path):
    mine = Echo()
    assert (mine.context_window, mine.fork(), mine.recipe_record()) == (None, mine, {})
    assert mine.token_counter().source != "echo tokenizer"  # no tokenizer: the offline fallback
    with Harness(tools=[add], backend=mine, db=tmp_path / "e.db") as h:
        assert h.run("hi").final_answer == "echo"
        assert mine.sinks and all(callable(s) for s in mine.sinks)  # every backend gets the event sink
    with pytest.raises(ConfigError, match=r"subclass of ctxwright\.backends\.base\.Backend"):
        Harness(tools=[add], backend=DuckTyped())


def test_a_scripted_session_cannot_be_resumed_without_a_backend(tmp_path):
    db = tmp_path / "a.db"
    with Harness(tools=[add], backend=ScriptedBackend(["x"]), db=db) as h:
        sid = h.session_id
    with pytest.raises(ConfigError, match="pass backend="):
        Harness.resume(sid, tools=[add], db=db)


def test_gguf_is_checked_before_any_model_is_loaded(tmp_path):
    with pytest.raises(BackendUnavailable, match="does not exist"):
        Harness(gguf=tmp_path / "missing.gguf")
    with pytest.raises(BackendUnavailable, match="is not a file"):
        Harness(gguf=tmp_path)
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>not a model</html>")
    with pytest.raises(BackendUnavailable, match="is not a GGUF file"):
        Harness(gguf=bad)


def test_the_cli_and_the_harness_send_the_same_prefix(tmp_path, monkeypatch, capsys):
    from ctxwright.cli.main import main

    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    with F([F.reply_text("one"), F.reply_text("two")]) as srv:
        common = ["--backend", "openai", "--model", "fake", "--base-url", srv.url, "--workspace", str(tmp_path)]
        assert main(["--db", str(tmp_path / "c.db"), "run", *common, "hi"]) == 0
        with Harness(backend="openai", model="fake", base_url=srv.url, workspace=tmp_path) as h:
            h.run("hi")
        cli, lib = srv.recorded
    # byte for byte, from the start of the body through the system message to the user's
    end = cli.raw.index(b'"content":"hi"')
    assert cli.raw[:end] == lib.raw[:end]
    assert cli.json["tools"] == lib.json["tools"] and cli.json["messages"][0] == lib.json["messages"][0]
