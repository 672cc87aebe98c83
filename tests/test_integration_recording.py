"""The in-process recording under every framework adapter (``integrations/recording.py``): the
official ``openai`` SDK, sync and async, streaming and not, talking through the recorder's
``httpx`` client to a loopback server (``tests/fakeserver.py`` for chat completions,
``tests/proxy_upstream.py`` for gzip answers), on SQLite and on PostgreSQL.

What must hold: every request the SDK sent is recorded byte for byte with its answer and the
same audit the proxy gives; a changed system prompt or tool list is said once per segment with
its fix; a failed call is recorded and its error still reaches the caller; what is over the
recording cap is kept as size and hash only.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import openai
import pytest

from ctxwright.cli.main import main
from ctxwright.integrations.recording import FrameworkRecorder, PrefixWarning
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F
from ports import free_port

TOOL = {
    "type": "function",
    "function": {"name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {}}},
}


def _rows(store: Store, sid: str) -> list[dict[str, Any]]:
    return ProxyLog(store).exchange_rows(sid)


def test_every_call_is_recorded_as_sent_and_audited_live(db_target: str, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[PrefixWarning] = []
    with F([F.reply_text("one"), F.reply_text("two"), F.reply_text("three"), F.reply_text("four")]) as srv:
        rec = FrameworkRecorder(db_target, framework="test", on_warning=seen.append)
        client = openai.OpenAI(base_url=srv.url, api_key="sk-test-key-0123456789", http_client=rec.http_client())
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You help."}, {"role": "user", "content": "hi"}]
        for turn, change in enumerate((None, None, "system", "tools")):
            if change == "system":
                msgs[0] = {"role": "system", "content": "You help. It is 12:01."}
            kwargs: dict[str, Any] = {"tools": [TOOL]} if change == "tools" else {}
            r = client.chat.completions.create(model="m", messages=msgs, **kwargs)
            msgs += [
                {"role": "assistant", "content": r.choices[0].message.content},
                {"role": "user", "content": f"q{turn}"},
            ]
        sid = rec.session_id
        sent = [json.loads(r.raw) for r in srv.recorded]
        rec.close()
    assert sid is not None
    store = Store(db_target)
    rows = _rows(store, sid)
    assert [json.loads(r["request_body"]) for r in rows] == sent  # what the SDK sent, call by call
    assert [r["audit"]["cause"] for r in rows] == ["first", "append", "system_changed", "tools_changed"]
    assert [(w.call_index, w.segment) for w in seen] == [(2, "system prompt"), (3, "tool list")]
    assert "appended after the history" in seen[0].fix and seen[0].byte_offset is not None
    assert "sk-test-key" not in json.dumps(rows, default=str)  # no header is recorded
    assert main(["audit", "--proxy-session", sid, "--json", "--db", db_target]) == 0
    offline = json.loads(capsys.readouterr().out)["requests"]
    assert [o["reusable_prefix_tokens"] for o in offline] == [r["audit"]["reusable_prefix_tokens"] for r in rows]
    store.close()


def test_the_async_client_and_a_stream_are_recorded(tmp_path: Any) -> None:
    db = str(tmp_path / "a.db")

    async def run(rec: FrameworkRecorder, url: str) -> str:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", http_client=rec.async_http_client())
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "stream it"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        await client.close()
        return text

    with F([F.reply_text("streamed answer")]) as srv, FrameworkRecorder(db, name="agent-7") as rec:
        text = asyncio.run(run(rec, srv.url))
        sid = rec.session_id
    assert text == "streamed answer" and sid is not None
    store = Store(db)
    (row,) = _rows(store, sid)
    assert (
        row["streamed"] == 1
        and bytes(row["response_body"]).endswith(b"data: [DONE]\n\n")
        and row["outcome"] == "complete"
    )
    assert ProxyLog(store).session_row(sid)["group_key"] == "agent-7"
    store.close()


def test_a_failed_call_is_recorded_and_the_error_still_reaches_the_caller(tmp_path: Any) -> None:
    db = str(tmp_path / "f.db")
    with FrameworkRecorder(db) as rec:
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="x", max_retries=0, http_client=rec.http_client()
        )
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello?"}])
        rows = ProxyLog(rec.store).exchange_rows(rec.session_id)
    assert len(rows) == 1 and rows[0]["outcome"] == "upstream_broken" and "ConnectError" in rows[0]["error"]


def test_an_answer_over_the_cap_is_kept_as_size_and_hash(tmp_path: Any, upstream: Any) -> None:
    db = str(tmp_path / "c.db")
    with FrameworkRecorder(db, record_cap=64) as rec:
        client = openai.OpenAI(base_url=upstream.url + "/v1", api_key="x", http_client=rec.http_client())
        r = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "gzip please"}], extra_headers={"x-test-behaviour": "gzip"}
        )
        assert r.choices[0].message.content
        (row,) = ProxyLog(rec.store).exchange_rows(rec.session_id)
    assert row["response_body"] is None and row["response_bytes"] > 64 and row["response_encoding"] == "gzip"
    assert row["request_body"] is None and len(row["request_sha256"]) == 64


def test_show_prints_a_framework_session_call_by_call(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "s.db")
    with F([F.reply_text("first answer"), F.reply_text("second answer")]) as srv, FrameworkRecorder(db) as rec:
        client = openai.OpenAI(base_url=srv.url, api_key="x", http_client=rec.http_client())
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "question one"}]
        client.chat.completions.create(model="m", messages=msgs)
        msgs += [{"role": "assistant", "content": "first answer"}, {"role": "user", "content": "question two"}]
        client.chat.completions.create(model="m", messages=msgs)
        sid = rec.session_id
    assert sid is not None
    assert main(["--db", db, "show", sid[:6]]) == 0
    out = capsys.readouterr().out
    assert f"session {sid} (recorded from the wire" in out and "2 call(s)" in out
    assert "user: question two" in out and "second answer" in out and "append" in out
    assert main(["--db", db, "show", sid, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["audit"]["cause"] for c in data["calls"]] == ["first", "append"]
    assert data["calls"][1]["request"]["messages"] == msgs
    assert main(["--db", db, "show", "nosuchid"]) == 2  # neither kind: the usual one line
    assert "no session 'nosuchid'" in capsys.readouterr().err
    report = tmp_path / "r.html"
    assert main(["--db", db, "report", "--proxy-session", sid, "-o", str(report)]) == 0
    assert sid in report.read_text()


def _two_calls(client: openai.OpenAI) -> None:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S " * 40}, {"role": "user", "content": "q1"}]
    client.chat.completions.create(model="m", messages=msgs)
    msgs += [{"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    client.chat.completions.create(model="m", messages=msgs)


def _shape(line: str) -> str:
    """A per-call line without what differs between two runs: the session id and the time."""
    _sid, rest = line.split(" ", 1)
    return re.sub(r" +\d+ ms", " N ms", rest)


def test_each_call_prints_the_proxys_line_and_where_the_session_is(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig

    db = str(tmp_path / "lines.db")
    with F([F.reply_text("a1"), F.reply_text("a2")]) as srv, FrameworkRecorder(db, framework="test") as rec:
        _two_calls(openai.OpenAI(base_url=srv.url, api_key="x", http_client=rec.http_client()))
        sid = rec.session_id
    out, err = capsys.readouterr()
    assert out == ""  # the application's stdout is left to it
    lines = err.splitlines()
    assert len(lines) == 3, err
    assert lines[0].startswith(f"{sid} #0 ") and lines[2].startswith(f"{sid} #1 ")
    where = f"ctxwright: test session {sid} is recorded in {db}; audit it with: ctxwright audit {sid} --db {db}"
    assert lines[1] == where
    # the same calls through ``ctxwright proxy`` print the same lines
    proxied: list[str] = []
    with F([F.reply_text("a1"), F.reply_text("a2")]) as srv:
        store = Store(tmp_path / "proxy.db")
        with RecordingProxy.start(ProxyConfig(upstream=srv.url), store, printer=proxied.append) as proxy:
            _two_calls(openai.OpenAI(base_url=proxy.url + "/v1", api_key="x"))
            assert proxy.recorder.wait_idle(30, at_least=2)
        store.close()
    assert [_shape(x) for x in proxied] == [_shape(lines[0]), _shape(lines[2])]
    assert "append" in lines[2]


def test_quiet_prints_nothing_but_still_records(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "quiet.db")
    with F([F.reply_text("a1"), F.reply_text("a2")]) as srv, FrameworkRecorder(db, quiet=True) as rec:
        _two_calls(openai.OpenAI(base_url=srv.url, api_key="x", http_client=rec.http_client()))
        rows = ProxyLog(rec.store).exchange_rows(rec.session_id)
    assert capsys.readouterr() == ("", "")
    assert [r["audit"]["cause"] for r in rows] == ["first", "append"]
