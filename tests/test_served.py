"""Served models as a new user meets them (issue 11): the wire form of tool-call turns,
timeouts and announced retries, the ledger against the server's count, tool calls without
ids, streaming, credentials in the base URL, and replies cut off mid-transfer.

Through the real SDK and real HTTP on 127.0.0.1 against our loopback server
(``tests/fakeserver.py``), which plays the servers that cannot run here (OpenAI itself, a
proxy that cuts a body); ``tests/test_real_server.py`` runs llama-cpp-python's own server.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, tool
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.openai_compat import DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_S, OpenAIBackend
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.cli.progress import calls_table
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.core.messages import Message, ToolCall, assistant, system, tool_result, user
from ctxwright.core.prefix import Prefix
from ctxwright.core.progress import ProgressEvent, Retry, StreamFallback, Token
from ctxwright.core.records import CallRecord
from ctxwright.core.redact import redact
from ctxwright.core.render import NULL_CONTENT_KEY
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.core.tokens import Ledger, TokenCounter, build_ledger, check_reported
from ctxwright.core.tool_ids import assign_ids
from ctxwright.errors import BackendUnavailable, ConfigError, ResponseTruncated
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry
from fakeserver import FakeOpenAIServer as S
from ports import free_port

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def served(url: str, db: Path | None = None, **options: Any) -> Harness:
    """A Harness on a served model with only the ``add`` tool and no extras."""
    defaults: dict[str, Any] = {
        "system": "You add numbers with the add tool.",
        "tools": [add],
        "backend": "openai",
        "model": "m",
        "base_url": url,
        "db": db,
        "status": False,
        "todo": False,
        "delegate": False,
        "read_result": False,
        "compaction": False,
    }
    return Harness(**(defaults | options))


# -- 1. the wire form of a tool-call turn ------------------------------------------------------


def test_a_new_session_sends_tool_call_turns_with_empty_string_content(tmp_path: Path) -> None:
    with S(
        [
            S.reply_tool_calls([("c1", "add", '{"a":2,"b":3}')], usage=S.usage_openai(80, 9)),
            S.reply_text("5", usage=S.usage_openai(100, 1)),
        ]
    ) as srv:
        with served(srv.url, tmp_path / "a.db") as h:
            result = h.run("2 + 3?")
            assert h.session.meta[NULL_CONTENT_KEY] == "empty"
        second = srv.requests[1]["messages"]
    assert result.stop_reason == "final_answer"
    turn = next(m for m in second if m["role"] == "assistant")
    assert "content" in turn and turn["content"] == ""  # llama-cpp-python's server: 500 on null and on no key


def test_a_session_recorded_with_null_keeps_sending_null_after_resume(tmp_path: Path) -> None:
    """A session started before the rule has no form recorded: it renders ``null`` forever,
    old turns and new ones, so every byte it already sent is sent again unchanged."""
    db = tmp_path / "v1.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    store = Store(db)
    sid = store.list_sessions()[0]["id"]
    session = Session.resume(store, sid)
    assert NULL_CONTENT_KEY not in session.meta
    sent = [json.loads(line) for line in (FIXTURES / "store_v1.requests.jsonl").read_text().splitlines()]
    before = json.loads(session.build_request().canonical_bytes())
    assert before["messages"][: len(sent[-1]["messages"])] == sent[-1]["messages"]
    backend = ScriptedBackend([assistant(None, [call("lookup", {"key": "d"}, "c9")]), "d done"], model="deepseek-chat")
    reg = ToolRegistry()

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return ("value of " + key + " ") * (400 if key == "big" else 3)

    reg.register(lookup)
    Agent(session, backend, reg, AgentConfig(compaction=None)).run("And d.")
    last = json.loads(backend.requests[-1].canonical_bytes())["messages"]
    turns = [m for m in last if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(turns) == 4 and [m["content"] for m in turns] == [None, "ok", None, None]
    store.close()


# -- 2. wall time beside the reuse -----------------------------------------------------------------


def test_wall_time_is_stored_with_each_call_and_shown_by_the_reusable_tokens(tmp_path: Path) -> None:
    with (
        S(
            [
                S.reply_tool_calls([("c1", "add", '{"a":2,"b":3}')], usage=S.usage_openai(80, 9)),
                S.reply_json(S.completion_body({"content": "5"}, usage=S.usage_openai(100, 1)), delay_s=0.25),
            ]
        ) as srv,
        served(srv.url, tmp_path / "w.db") as h,
    ):
        result = h.run("2 + 3?")
        calls = h.store.calls(h.session_id) if h.store else []
    assert [c.cached_tokens for c in calls] == [None, None]  # this server reports no cache field
    walls = [c.wall_ms for c in calls]
    assert all(isinstance(w, float) for w in walls) and walls[1] >= 250 > walls[0]
    assert [r.wall_ms for r in result.calls] == walls
    for wide, beside in ((False, "cached/reusable"), (True, "reusable tok")):
        table = calls_table(result.calls, wide=wide)
        headers = [str(c.header) for c in table.columns]
        assert headers.index("wall ms") == headers.index(beside) + 1
        assert f"{walls[1]:,.0f}" in list(table.columns[headers.index("wall ms")].cells)


def test_show_lists_the_stored_wall_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "w.db"
    slow = S.reply_json(S.completion_body({"content": "5"}, usage=S.usage_openai(9, 1)), delay_s=0.3)
    with S([slow]) as srv, served(srv.url, db) as h:
        h.run("2 + 3?")
        sid = h.session_id
    capsys.readouterr()
    assert main(["--db", str(db), "show", sid]) == 0
    out = capsys.readouterr().out
    assert "wall ms" in out
    # the call's row: call 0, its prompt, cached/reusable, then the wall time, which holds the
    # server's 0.3 s delay (a loaded machine adds to it, never takes from it)
    row = re.search(r"│\s+0\s+│[^│]*│[^│]*│\s+([\d,]+)\s+│", out)
    assert row is not None, out
    assert 300 <= int(row.group(1).replace(",", "")) < 30_000


def test_a_failed_call_keeps_its_wall_time(tmp_path: Path) -> None:
    bad = S.error(400, {"error": {"message": "bad field", "type": "invalid_request_error"}})
    with S([bad]) as srv, served(srv.url, tmp_path / "f.db") as h:
        assert h.run("2 + 3?").stop_reason == "backend_error"
        (c,) = h.store.calls(h.session_id) if h.store else []
    assert isinstance(c.wall_ms, float) and c.error.startswith("BackendError")


# -- 3. timeouts and announced retries -----------------------------------------------------------------


def test_a_server_that_never_answers_is_retried_visibly_then_named_with_the_setting_to_raise(
    tmp_path: Path,
) -> None:
    events: list[ProgressEvent] = []
    slow = S.reply_text("too late", delay_s=3.0)
    with (
        S([slow, slow, slow]) as srv,
        served(srv.url, tmp_path / "t.db", timeout=0.3, max_retries=2, on_event=events.append) as h,
    ):
        result = h.run("2 + 3?")
    retries = [e for e in events if isinstance(e, Retry)]
    assert [r.attempt for r in retries] == [1, 2] and all(r.max_retries == 2 for r in retries)
    assert all("no answer within 0.3 s" in r.reason for r in retries)
    assert result.stop_reason == "backend_error"
    assert "did not answer within 0.3 s" in (result.error or "") and "--timeout" in (result.error or "")
    assert len(srv.requests) == 3


def test_the_cli_takes_timeout_and_max_retries_and_prints_each_retry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = S.reply_text("too late", delay_s=3.0)
    with S([slow, slow]) as srv:
        code = main(
            [
                *("--db", str(tmp_path / "c.db"), "run", "--base-url", srv.url, "--model", "m"),
                *("--timeout", "0.3", "--max-retries", "1", "--no-status", "hello"),
            ]
        )
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"retry 1/1 in \d+\.\d s: no answer within 0\.3 s", err)
    assert "did not answer within 0.3 s" in err and "--timeout SECONDS" in err
    assert len(srv.requests) == 2


def test_retry_defaults_are_the_documented_ones() -> None:
    assert (DEFAULT_TIMEOUT_S, DEFAULT_MAX_RETRIES) == (120.0, 2)
    with Harness(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", status=False) as h:
        assert (h.backend.timeout, h.backend.max_retries) == (120.0, 2)  # type: ignore[attr-defined]
    docs = (ROOT / "docs" / "servers.md").read_text()
    assert "--timeout" in docs and "120" in docs and "--max-retries" in docs and "default 2" in docs
    readme = (ROOT / "README.md").read_text()
    assert "--timeout" in readme and "--max-retries" in readme


@pytest.mark.parametrize(
    "options, message",
    [
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"max_retries": -1}, "max_retries must be 0 or more"),
    ],
)
def test_bad_retry_settings_are_one_clear_error(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Harness(backend="openai", model="m", base_url="http://127.0.0.1:9/v1", **options)


def test_retry_settings_are_refused_for_the_embedded_model() -> None:
    with pytest.raises(ConfigError, match="for a served model"):
        Harness(timeout=5)


# -- 4. the ledger against the server --------------------------------------------------------------


def test_the_ledger_parts_and_framing_add_up_to_the_prompt_compaction_counts() -> None:
    counter = TokenCounter()
    reg = ToolRegistry()
    reg.register(add)
    session = Session.start(Prefix.build("You add numbers.", reg.specs()))
    backend = ScriptedBackend([assistant(None, [call("add", {"a": 2, "b": 3}, "c1")]), "5"])
    manager = ContextManager(CompactionConfig(), counter, 100_000)
    seen: list[int] = []
    original = backend.complete

    def complete(request: ChatRequest, *, on_event: Any = None) -> Any:
        seen.append(manager.request_tokens(session))
        return original(request, on_event=on_event)

    backend.complete = complete  # type: ignore[method-assign]
    result = Agent(session, backend, reg, AgentConfig(compaction=None), counter=counter).run("2 + 3?")
    for report, counted in zip(result.calls, seen, strict=True):
        ledger = report.ledger
        parts = ledger.system_and_tools + ledger.tool_results + ledger.history + ledger.latest_user
        assert ledger.framing > 0 and parts + ledger.framing == ledger.total == counted
        # the backend counted the prompt: the difference is a part of its own, and all add up to it
        assert ledger.template_difference == report.prompt_tokens - counted and ledger.prompt == report.prompt_tokens
    headers = [str(c.header) for c in calls_table(result.calls, wide=True).columns]
    assert headers[-3:] == ["framing", "template", "counted"]


def test_check_reported_margin_and_what_it_says() -> None:
    ledger = Ledger(1071, 0, 19, 63, framing=8, tools=798)  # the session: 1,161 counted
    assert check_reported(ledger, None, "estimate") is None
    assert check_reported(ledger, 1161 + 300, "estimate") is None  # within 30%
    dropped = check_reported(ledger, 390, "estimate")
    assert dropped is not None and dropped.kind == "tools_dropped" and "dropped the tools" in dropped.message
    assert "390" in dropped.message and "1,161" in dropped.message
    none = check_reported(ledger, 390, "estimate", tool_choice="none")
    assert none is not None and 'tool_choice is "none"' in none.message
    cut = check_reported(ledger, 100, "estimate")
    assert cut is not None and cut.kind == "prompt_cut" and "--window" in cut.message
    more = check_reported(ledger, 3000, "estimate")
    assert more is not None and more.kind == "template_adds"


def test_a_server_that_drops_the_tools_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default tools and prompt, on a server that answers 390 prompt tokens (what
    llama-cpp-python's server with ``--chat_format chatml`` reported for this request)."""
    with S([S.reply_text("It is 10:00.", usage=S.usage_openai(390, 8))]) as srv:
        run = ["--db", str(tmp_path / "d.db"), "run", "--base-url", srv.url, "--model", "m", "--max-iterations", "1"]
        code = main([*run, "What's the current time and weather in Vancouver?"])
        out = capsys.readouterr()
    assert code == 0
    assert re.search(
        r"warning call 0: the server counted 390 prompt tokens, ctxwright [\d,]+ .*dropped the tools", out.err
    )
    store = Store(tmp_path / "d.db")
    (call0,) = store.calls(store.list_sessions()[0]["id"])
    assert call0.ledger["mismatch"]["kind"] == "tools_dropped"
    assert call0.ledger["total"] == sum(
        call0.ledger[k] for k in ("system_and_tools", "tool_results", "history", "latest_user", "framing")
    )
    store.close()


# -- 9. tool calls without an id -------------------------------------------------------------------


def test_a_tool_call_without_an_id_gets_one_and_the_loop_goes_on(tmp_path: Path) -> None:
    with S(
        [
            S.reply_tool_calls([(None, "add", '{"a":2,"b":3}'), (None, "add", '{"a":1,"b":1}')]),
            S.reply_text("5 and 2"),
            S.reply_text("ok"),
        ]
    ) as srv:
        db = tmp_path / "i.db"
        with served(srv.url, db) as h:
            result = h.run("2 + 3 and 1 + 1?")
            sid = h.session_id
            events = list(h.session.events)
        assert result.stop_reason == "final_answer" and result.final_answer == "5 and 2"
        reply = next(e for e in events if e.kind == "assistant")
        ids = [tc.id for tc in reply.message.tool_calls]
        assert all(re.fullmatch(r"[0-9A-Za-z]{9}", i) for i in ids) and len(set(ids)) == 2
        assert reply.extra["assigned_ids"] == {"0": ids[0], "1": ids[1]}
        assert [e.message.tool_call_id for e in events if e.kind == "tool"] == ids
        sent = srv.requests[1]["messages"]
        assert [tc["id"] for tc in sent[2]["tool_calls"]] == ids
        assert [m["tool_call_id"] for m in sent[3:5]] == ids
        # the ids are recorded: a resumed session sends the same bytes again
        with served(srv.url, db, resume=sid) as h2:
            h2.run("thanks")
        assert srv.requests[2]["messages"][: len(sent) + 1] == [*sent, srv.requests[2]["messages"][len(sent)]]


def test_given_ids_are_deterministic_and_unique_in_the_session() -> None:
    msg = assistant(None, [ToolCall("", "f", "{}"), ToolCall("dup", "f", "{}"), ToolCall("dup", "g", "{}")])
    one, assigned = assign_ids(msg, "sess", 3, {"x"})
    two, _ = assign_ids(msg, "sess", 3, {"x"})
    assert one == two and sorted(assigned) == [0, 2]
    ids = [tc.id for tc in one.tool_calls]
    assert ids[1] == "dup" and len(set(ids)) == 3
    used = {ids[0]}
    again, assigned = assign_ids(assistant(None, [ToolCall(ids[0], "f", "{}")]), "sess", 4, used)
    assert again.tool_calls[0].id != ids[0] and assigned


def test_a_null_id_is_not_the_text_none() -> None:
    msg = Message.from_wire({"role": "assistant", "tool_calls": [{"id": None, "function": {"name": "f"}}]})
    assert msg.tool_calls[0].id == ""


# -- 12. streaming ---------------------------------------------------------------------------------


def _script() -> list[Any]:
    return [
        S.reply_tool_calls([("c1", "add", '{"a": 2, "b": 3}')], usage=S.usage_openai(80, 9, cached=0)),
        S.reply_text("2 + 3 is 5, as the add tool says.", usage=S.usage_openai(120, 12, cached=64)),
    ]


def _recorded(db: Path) -> tuple[list[Any], list[Any]]:
    """Every event payload and call record, without what differs between two runs (times,
    the session id)."""
    con = sqlite3.connect(db)
    events = []
    for kind, payload in con.execute("SELECT kind, payload_json FROM events ORDER BY seq"):
        p = json.loads(payload)
        if isinstance(p.get("usage"), dict):
            p["usage"]["raw"].pop("latency_ms", None)
        p.pop("elapsed_ms", None)
        events.append((kind, p))
    calls = [
        (*row[:-1], json.loads(row[-1]) | {"raw": None})
        for row in con.execute(
            "SELECT request_sha256, request_bytes, prompt_tokens, cached_tokens, completion_tokens, model, "
            "tool_choice, max_tokens, temperature, extra_json, event_count, usage_json FROM calls ORDER BY call_index"
        )
    ]
    con.close()
    return events, calls


def test_streaming_records_exactly_what_a_plain_call_records(tmp_path: Path) -> None:
    runs = {}
    for stream in (False, True):
        tokens: list[str] = []

        def on(event: ProgressEvent, tokens: list[str] = tokens) -> None:
            if isinstance(event, Token):
                tokens.append(event.text)

        with S(_script()) as srv:
            with served(srv.url, tmp_path / f"s{stream}.db", stream=stream, on_event=on) as h:
                result = h.run("2 + 3?")
            runs[stream] = (result, tokens, srv.requests)
    (plain, no_tokens, plain_sent), (streamed, tokens, stream_sent) = runs[False], runs[True]
    assert not no_tokens and len(tokens) > 3
    assert "".join(tokens) == streamed.final_answer == plain.final_answer
    assert all(r.get("stream") is True and r["stream_options"] == {"include_usage": True} for r in stream_sent)
    assert [{k: v for k, v in r.items() if k not in ("stream", "stream_options")} for r in stream_sent] == plain_sent
    assert _recorded(tmp_path / "sFalse.db") == _recorded(tmp_path / "sTrue.db")
    assert [c.cached_tokens for c in streamed.calls] == [0, 64]


def test_an_empty_stream_falls_back_to_plain_calls(tmp_path: Path) -> None:
    """llama-cpp-python's server answers a streamed request with tools and tool_choice
    "auto" with HTTP 200 and an empty body (``tests/test_real_server.py`` shows it)."""
    events: list[ProgressEvent] = []
    with S([S.malformed(b"", content_type="text/event-stream"), *_script()]) as srv:
        with served(srv.url, None, stream=True, on_event=events.append) as h:
            result = h.run("2 + 3?")
        sent = srv.requests
    assert result.stop_reason == "final_answer"
    (fallback,) = [e for e in events if isinstance(e, StreamFallback)]
    assert "empty stream" in fallback.reason
    assert [r.get("stream") for r in sent] == [True, None, None]
    assert not [e for e in events if isinstance(e, Retry)]


def test_a_stream_without_usage_keeps_usage_unknown_and_stops_streaming() -> None:
    events: list[str] = []
    with S([S.reply_text("hello there"), S.reply_text("again")]) as srv:
        backend = OpenAIBackend("m", base_url=srv.url, stream=True, max_retries=0)
        first = backend.complete(ChatRequest((system("s"), user("u"))), on_event=lambda e: events.append(e.kind))
        backend.complete(ChatRequest((system("s"), user("u"))), on_event=lambda e: events.append(e.kind))
        backend.close()
        sent = srv.requests
    assert first.usage.prompt_tokens is None and first.message.content == "hello there"
    assert events.count("stream_fallback") == 1 and "token" in events
    assert [r.get("stream") for r in sent] == [True, None]


# -- 14. credentials in the base URL ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, secret",
    [
        ("cannot connect to http://alice:s3cret@10.0.0.1:8000/v1 (refused)", "s3cret"),
        ("https://x.openai.azure.com/openai/v1?api-version=1&api-key=AZKEY123", "AZKEY123"),
        ("https://generativelanguage.googleapis.com/v1beta/openai?key=AIzaSyGOOGLE", "AIzaSyGOOGLE"),
        ("http://proxy/v1?token=tok_abc&x=1", "tok_abc"),
        ("http://proxy/v1?access_token=AT999", "AT999"),
        ("http://proxy/v1?sig=SIGNATURE9", "SIGNATURE9"),
        ("http://tokenonly@host/v1", "tokenonly"),
    ],
)
def test_redact_removes_each_kind_of_url_credential(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and "***" in out
    assert redact(out) == out
    assert redact("plain text, a=b, user@example.org, http://host:8000/v1?x=1") == (
        "plain text, a=b, user@example.org, http://host:8000/v1?x=1"
    )


def _stored_bytes(db: Path) -> str:
    wal = Path(str(db) + "-wal")
    return db.read_bytes().decode("latin-1") + (wal.read_bytes().decode("latin-1") if wal.exists() else "")


def test_credentials_never_reach_the_screen_or_the_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a server that refuses: the error on the screen is redacted, and the session no model
    # answered is not kept (one error, once), so nothing of the URL is stored either
    port = free_port()
    url = f"http://alice:s3cret@127.0.0.1:{port}/v1"
    db = tmp_path / "k.db"
    code = main(["--db", str(db), "run", "--base-url", url, "--model", "m", "--max-retries", "0", "--no-status", "hi"])
    out = capsys.readouterr()
    assert code == 2 and "cannot connect to http://***@127.0.0.1" in out.err
    assert "s3cret" not in out.out + out.err + _stored_bytes(db)
    store = Store(db)
    assert store.list_sessions() == []
    store.close()
    # a server that answers: the session is kept, with the URL's credentials left out
    with S([S.reply_text("hello", usage=S.usage_openai(5, 1))]) as srv:
        url = srv.url.replace("http://", "http://alice:s3cret@")
        code = main(
            ["--db", str(db), "run", "--base-url", url, "--model", "m", "--max-retries", "0", "--no-status", "hi"]
        )
    out = capsys.readouterr()
    assert code == 0 and "s3cret" not in out.out + out.err + _stored_bytes(db)
    store = Store(db)
    (row,) = store.list_sessions()
    assert "s3cret" not in store.get_session(row["id"]).meta["harness"]["model"]["base_url"]
    assert "***@127.0.0.1" in store.get_session(row["id"]).meta["harness"]["model"]["base_url"]
    store.close()
    # resuming needs the URL again, and says so
    with pytest.raises(ConfigError, match=r"credentials.*--base-url"):
        Harness(resume=row["id"], db=db)


def test_a_server_error_that_echoes_the_key_is_redacted(tmp_path: Path) -> None:
    echo = S.error(
        502,
        {"error": {"message": "upstream http://gw/v1?api-key=LEAKED1 failed", "type": "bad_gateway"}},
        headers={"x-should-retry": "false"},
    )
    with S([echo]) as srv, served(srv.url, tmp_path / "e.db") as h:
        result = h.run("hi")
        (c,) = h.store.calls(h.session_id) if h.store else []
    assert "LEAKED1" not in (result.error or "") and "api-key=***" in (result.error or "")
    assert "LEAKED1" not in c.error


def test_the_store_redacts_a_call_error_whoever_wrote_it(store: Store) -> None:
    sid = store.create_session({"system": "s", "tools": []}, "0" * 64)
    store.record_call(
        CallRecord(sid, 0, request_sha256="x", request_bytes=1, prefix_sha256="y", error="GET http://u:pw@h/v1?key=K1")
    )
    (c,) = store.calls(sid)
    assert c.error == "GET http://***@h/v1?key=***"


# -- 16. a body cut off mid-transfer --------------------------------------------------------------------


def test_a_body_cut_mid_transfer_is_not_cannot_connect() -> None:
    with S([S.cut(S.reply_text("x" * 400, usage=S.usage_openai(1, 1)), 60)]) as srv:
        backend = OpenAIBackend("m", base_url=srv.url, max_retries=0)
        with pytest.raises(ResponseTruncated) as info:
            backend.complete(ChatRequest((system("s"), user("u"))))
        backend.close()
    text = str(info.value)
    assert "cut off mid-transfer after 60 of" in text and "cannot connect" not in text
    assert "check the server's log" in text.lower()


def test_a_stream_cut_mid_transfer_is_truncated_too() -> None:
    with S([S.cut(S.reply_text("y" * 200, usage=S.usage_openai(1, 1)), 6)]) as srv:
        backend = OpenAIBackend("m", base_url=srv.url, max_retries=0, stream=True)
        with pytest.raises(ResponseTruncated, match=r"streamed reply .* cut off mid-transfer"):
            backend.complete(ChatRequest((system("s"), user("u"))), on_event=lambda e: None)
        backend.close()


def test_nothing_listening_is_still_cannot_connect(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(BackendUnavailable, match=r"cannot connect to .*Connection refused"):
        OpenAIBackend("m", base_url=url, max_retries=0).complete(ChatRequest((system("s"), user("u"))))


def test_the_cli_says_truncated_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = S.cut(S.reply_text("x" * 400), 60)
    with S([cut]) as srv:
        code = main(
            ["--db", str(tmp_path / "t.db"), "run", "--base-url", srv.url, "--model", "m", "--max-retries", "0", "hi"]
        )
    err = capsys.readouterr().err
    assert code == 2 and "cut off mid-transfer" in err and "Traceback" not in err
    assert "ResponseTruncated" in err


def test_a_tool_result_pairs_with_the_id_it_was_given() -> None:
    """The renderer sends what was recorded: the given id on both sides of the pair."""
    session = Session.start(Prefix.build("s", ()))
    msg, _ = assign_ids(assistant(None, [ToolCall("", "add", "{}")]), session.id, 0, set())
    session.add_user("u")
    session.add_assistant(msg)
    session.add_tool_result(msg.tool_calls[0].id, "5", tool_name="add")
    wire = session.build_request().to_wire()["messages"]
    assert wire[2]["tool_calls"][0]["id"] == wire[3]["tool_call_id"] == msg.tool_calls[0].id
    assert tool_result(msg.tool_calls[0].id, "5").to_wire() == wire[3]


def test_build_ledger_counts_the_tools_apart() -> None:
    counter = TokenCounter()
    reg = ToolRegistry()
    reg.register(add)
    prefix = Prefix.build("sys", reg.specs())
    tools_text = json.dumps([t.to_wire() for t in prefix.tools])
    ledger = build_ledger(counter, prefix.canonical(), [user("hi")], tools_text)
    assert 0 < ledger.tools < ledger.system_and_tools and ledger.framing == 4
