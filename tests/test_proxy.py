"""``ctxwright proxy`` with real parts: the official ``openai`` and ``anthropic`` SDKs as clients,
the relay on uvicorn, a loopback upstream on uvicorn (``tests/proxy_upstream.py``) that records
the bytes it received and sent, and a real SQLite store.

What is asserted: the upstream receives exactly the bytes the client sent, the client receives
exactly the bytes the upstream sent (streamed or not, compressed or not), the API key is relayed
but never written to the database or printed, and every bad input of the proxy's contract
(upstream down, slow, garbage, a client gone mid-stream, a 50 MB body, a body that is not JSON,
sessions interleaved on one connection, many clients at once) ends as documented.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai
import pytest

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from ports import free_port, wait_listening
from proxy_upstream import Upstream

OPENAI_KEY = "sk-proj-NEVERSTORE-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-NEVERSTORE-abcdef"
SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def proxy(upstream, tmp_path):
    store = Store(tmp_path / "proxy.db")
    lines: list[str] = []
    p = RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=lines.append)
    p.lines = lines  # type: ignore[attr-defined]
    p.store = store  # type: ignore[attr-defined]
    yield p
    p.stop()


class Sent:
    """The request bytes an SDK put on the wire, captured by an httpx event hook."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def hook(self, request: httpx.Request) -> None:
        self.bodies.append(request.read())

    def client(self) -> httpx.Client:
        return httpx.Client(event_hooks={"request": [self.hook]}, timeout=30)

    def client2(self) -> httpx2.Client:
        """The anthropic SDK's HTTP client is httpx2 (a fork of httpx), which takes the same hook."""
        return httpx2.Client(event_hooks={"request": [self.hook]}, timeout=30)


def _db_bytes(store: Store) -> bytes:
    return b"".join(Path(f"{store.path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{store.path}{s}").exists())


def _done(proxy, n: int = 1) -> None:
    """Wait until ``n`` exchanges in all are recorded."""
    assert proxy.recorder.wait_idle(20, at_least=n), (proxy.recorder.recorded, proxy.recorder.failures)


def _new_seen(upstream: Upstream, before: int):
    return upstream.seen[before:]


# -- the SDKs, byte for byte -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat_completions_through_the_proxy(proxy, upstream, stream):
    sent = Sent()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, http_client=sent.client(), max_retries=0)
    history = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    before = len(upstream.seen)
    texts = []
    for turn in range(2):
        if stream:
            chunks = client.chat.completions.create(
                model="gpt-test", messages=history, stream=True, stream_options={"include_usage": True}
            )
            texts.append("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        else:
            texts.append(client.chat.completions.create(model="gpt-test", messages=history).choices[0].message.content)
        history += [{"role": "assistant", "content": texts[-1]}, {"role": "user", "content": f"more {turn}"}]
    assert texts == [upstream.text, upstream.text]
    seen = _new_seen(upstream, before)
    assert [s.raw for s in seen] == sent.bodies  # not a byte changed on the way up
    assert seen[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"  # the key is relayed
    assert seen[0].path == "/v1/chat/completions"
    _done(proxy, 2)
    sessions = proxy_sessions(proxy.store)
    assert len(sessions) == 1 and sessions[0]["calls"] == 2 and sessions[0]["grouped_by"] == "continuity"
    records = proxy_session_requests(proxy.store, sessions[0]["id"])
    assert [json.dumps(r["request"]).encode() for r in records] == [
        json.dumps(json.loads(b)).encode() for b in sent.bodies
    ]
    assert [r["proxy"]["streamed"] for r in records] == [stream, stream]
    assert [r["proxy"]["audit"]["cause"] for r in records] == ["first", "append"]
    assert records[1]["proxy"]["audit"]["cached_tokens"] == 64
    assert len(proxy.lines) == 2 and "append" in proxy.lines[1] and "cached 64" in proxy.lines[1]
    # the key went to the upstream and nowhere else
    assert OPENAI_KEY.encode() not in _db_bytes(proxy.store)
    assert not any(OPENAI_KEY in line for line in proxy.lines)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses_api_through_the_proxy(proxy, upstream, stream):
    sent = Sent()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, http_client=sent.client(), max_retries=0)
    before = len(upstream.seen)
    items: list[dict] = [{"role": "user", "content": "weather in Paris?"}]
    for _ in range(2):
        kwargs = {"model": "gpt-test", "instructions": "Be brief.", "input": items, "prompt_cache_key": "conv-42"}
        if stream:
            with client.responses.stream(**kwargs) as events:
                for _ev in events:
                    pass
                text = events.get_final_response().output_text
        else:
            text = client.responses.create(**kwargs).output_text
        assert text == upstream.text
        items = [*items, {"role": "assistant", "content": text}, {"role": "user", "content": "and Rome?"}]
    seen = _new_seen(upstream, before)
    assert [s.raw for s in seen] == sent.bodies
    _done(proxy, 2)
    (session,) = proxy_sessions(proxy.store)
    assert session["grouped_by"] == "prompt_cache_key" and session["group_key"] == "conv-42"
    records = proxy_session_requests(proxy.store, session["id"])
    assert [r["proxy"]["audit"]["cause"] for r in records] == ["first", "append"]
    assert records[1]["proxy"]["audit"]["cached_tokens"] == 64  # from response.completed when streamed
    assert OPENAI_KEY.encode() not in _db_bytes(proxy.store)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_messages_through_the_proxy(proxy, upstream, stream):
    sent = Sent()
    client = anthropic.Anthropic(base_url=proxy.url, api_key=ANTHROPIC_KEY, http_client=sent.client2(), max_retries=0)
    before = len(upstream.seen)
    messages: list[dict] = [{"role": "user", "content": "hi"}]
    kwargs = {"model": "claude-test", "max_tokens": 64, "system": "You are terse.", "metadata": {"user_id": "u-7"}}
    for _ in range(2):
        if stream:
            with client.messages.stream(messages=messages, **kwargs) as s:
                text = s.get_final_text()
        else:
            text = client.messages.create(messages=messages, **kwargs).content[0].text
        assert text == upstream.text
        messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": "again"}]
    seen = _new_seen(upstream, before)
    assert [s.raw for s in seen] == sent.bodies
    assert all(s.path.startswith("/v1/messages") for s in seen)
    assert seen[0].headers.get("anthropic-version")
    _done(proxy, 2)
    (session,) = proxy_sessions(proxy.store)
    assert session["grouped_by"] == "metadata.user_id"
    records = proxy_session_requests(proxy.store, session["id"])
    audit = [r["proxy"]["audit"] for r in records]
    assert [a["cause"] for a in audit] == ["first", "append"]
    assert audit[1]["cached_tokens"] == 64 and audit[1]["prompt_tokens"] == 120
    assert ANTHROPIC_KEY.encode() not in _db_bytes(proxy.store)
    assert not any(ANTHROPIC_KEY in line for line in proxy.lines)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
@pytest.mark.parametrize("behaviour", ["", "gzip"])
def test_the_client_receives_the_upstream_bytes_exactly(proxy, upstream, path, behaviour):
    """Raw bytes on both sides: a gzip answer stays gzip (the client asked for it), and the
    recording is decoded."""
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "input": "x"}
    if path.endswith("/messages"):
        del body["input"]
    headers = {
        "authorization": "Bearer k",
        "x-api-key": "k",
        "anthropic-version": "2023-06-01",
        "accept-encoding": "gzip",
        "x-test-behaviour": behaviour,
    }
    before = len(upstream.seen)
    with httpx.Client() as c, c.stream("POST", proxy.url + path, json=body, headers=headers) as r:
        got = b"".join(r.iter_raw())
        assert r.headers.get("content-encoding") == ("gzip" if behaviour else None)
        assert r.headers["x-request-id"] == "req_123"
    (seen,) = _new_seen(upstream, before)
    assert got == seen.sent and got
    _done(proxy)
    (row,) = [r for r in ProxyLog(proxy.store).exchange_rows(proxy_sessions(proxy.store)[0]["id"])]
    plain = gzip.decompress(got) if behaviour else got
    assert bytes(row["response_body"]) == plain and row["response_encoding"] == (behaviour or None)
    assert row["response_sha256"] == hashlib.sha256(got).hexdigest() and row["response_bytes"] == len(got)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_streams_arrive_whole_and_in_order(proxy, upstream, path):
    body: dict = {"model": "m", "max_tokens": 5, "stream": True}
    body["input" if path.endswith("/responses") else "messages"] = (
        "x" if path.endswith("/responses") else [{"role": "user", "content": "x"}]
    )
    before = len(upstream.seen)
    headers = {"authorization": "Bearer k", "anthropic-version": "2023-06-01"}
    with httpx.Client() as c, c.stream("POST", proxy.url + path, json=body, headers=headers) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        got = b"".join(r.iter_raw())
    assert got == _new_seen(upstream, before)[0].sent


# -- what the audit and the CLI make of it -----------------------------------------------------


def test_sessions_by_header_interleaved_on_one_connection(proxy, upstream):
    """Two sessions alternate on one keep-alive connection; each is audited on its own."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
    hist = {
        "a": [{"role": "system", "content": "A"}, {"role": "user", "content": "a1"}],
        "b": [{"role": "system", "content": "A"}, {"role": "user", "content": "a1"}],  # same start as a
    }
    for turn in range(3):
        for name in ("a", "b"):
            client.chat.completions.create(model="m", messages=hist[name], extra_headers={"X-Ctxwright-Session": name})
            hist[name] = [
                *hist[name],
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": f"{name}{turn}"},
            ]
    _done(proxy, 6)
    sessions = {s["group_key"]: s for s in proxy_sessions(proxy.store)}
    assert set(sessions) == {"a", "b"} and all(s["calls"] == 3 for s in sessions.values())
    for s in sessions.values():
        causes = [r["proxy"]["audit"]["cause"] for r in proxy_session_requests(proxy.store, s["id"])]
        assert causes == ["first", "append", "append"]


def test_sessions_by_prefix_continuity_interleaved(proxy):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
    hist = {n: [{"role": "system", "content": "S"}, {"role": "user", "content": f"task {n}"}] for n in "xy"}
    for turn in range(3):
        for n in "xy":
            client.chat.completions.create(model="m", messages=hist[n])
            hist[n] = [*hist[n], {"role": "assistant", "content": "ok"}, {"role": "user", "content": str(turn)}]
    _done(proxy, 6)
    sessions = proxy_sessions(proxy.store)
    assert sorted(s["calls"] for s in sessions) == [3, 3]
    for s in sessions:
        records = proxy_session_requests(proxy.store, s["id"])
        assert len({r["request"]["messages"][1]["content"] for r in records}) == 1  # one task per session


def test_a_timestamp_in_the_system_prompt_stays_one_session_and_is_named_at_its_byte(proxy, capsys):
    """The proxy's headline case, with no session header: an agent loop whose system prompt
    carries the time. Each call is placed by the messages it repeats, so the three calls are
    one session and every call after the first is ``system_changed`` at the timestamp's byte;
    a second run of the same task (same first message, a new system prompt) is a session of
    its own."""
    from ctxwright.cli.main import main

    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)

    def system(t: float) -> dict[str, str]:
        return {"role": "system", "content": f"You are a helpful agent. Current time: {t:.6f}"}

    for run in range(2):
        history = [{"role": "user", "content": "What is in /tmp?"}]
        for turn in range(3):
            client.chat.completions.create(model="m", messages=[system(time.time() + run * 1000 + turn), *history])
            history += [{"role": "assistant", "content": f"step {turn}"}, {"role": "user", "content": f"go on {turn}"}]
    _done(proxy, 6)
    sessions = proxy_sessions(proxy.store)
    assert sorted(s["calls"] for s in sessions) == [3, 3]
    prefix = len("You are a helpful agent. Current time: ")
    for s in sessions:
        assert main(["audit", "--proxy-session", s["id"], "--json", "--db", str(proxy.store.path)]) == 0
        calls = json.loads(capsys.readouterr().out)["requests"]
        assert [c["cause"] for c in calls] == ["first", "system_changed", "system_changed"]
        for c in calls[1:]:
            where = c["first_divergence"]
            assert where["message_index"] == 0 and where["field"] == "content"
            # in the timestamp's digits: past the fixed text, by the leading digits the two times share
            assert prefix <= where["byte_offset"] < prefix + len("1700000000"), where


def test_an_agent_whose_tools_change_mid_conversation_stays_one_session(proxy, capsys):
    """The same rule for the tools: a tool added after the first call (an MCP server that
    connected late) changes the prefix, and the call is still placed by the messages it repeats
    -- one session, the second call ``tools_changed`` -- with no header."""
    from ctxwright.cli.main import main

    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)

    def tool(name: str) -> dict:
        return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}

    history = [{"role": "system", "content": "S"}, {"role": "user", "content": "list the files"}]
    client.chat.completions.create(model="m", messages=history, tools=[tool("ls")])
    history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and read one"}]
    client.chat.completions.create(model="m", messages=history, tools=[tool("ls"), tool("read")])
    _done(proxy, 2)
    (session,) = proxy_sessions(proxy.store)
    assert session["calls"] == 2 and session["grouped_by"] == "continuity"
    assert main(["audit", "--proxy-session", session["id"], "--json", "--db", str(proxy.store.path)]) == 0
    assert [c["cause"] for c in json.loads(capsys.readouterr().out)["requests"]] == ["first", "tools_changed"]


def test_cli_audit_of_a_proxy_session(proxy, upstream, capsys):
    from ctxwright.cli.main import main

    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    session = {"X-Ctxwright-Session": "one"}  # a changed system prompt extends nothing: named, it stays one session
    client.chat.completions.create(model="m", messages=msgs, extra_headers=session)
    client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "S2"}, *msgs[1:]], extra_headers=session
    )
    _done(proxy, 2)
    sid = proxy_sessions(proxy.store)[0]["id"]
    assert main(["audit", "--proxy-session", sid, "--json", "--db", str(proxy.store.path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["cause"] for r in out["requests"]] == ["first", "system_changed"]
    assert main(["proxy", "--list", "--json", "--db", str(proxy.store.path)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"] == sid
    assert main(["audit", "--proxy-session", "px-none", "--db", str(proxy.store.path)]) == 2
    assert "no proxy session" in capsys.readouterr().err


# -- bad input ---------------------------------------------------------------------------------


def test_upstream_down_is_a_502_with_a_clear_json_error(tmp_path):
    store = Store(tmp_path / "p.db")
    with RecordingProxy.start(ProxyConfig(upstream=f"http://127.0.0.1:{free_port()}"), store) as p:
        client = openai.OpenAI(base_url=p.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert exc.value.status_code == 502
        assert "could not connect to the upstream" in exc.value.message
        err = exc.value.body
        assert err["type"] == "upstream_unreachable" if "type" in err else err
        _done(p)
    (row,) = ProxyLog(store).exchange_rows(proxy_sessions(store)[0]["id"])
    assert row["outcome"] == "upstream_unreachable" and row["status"] is None


def test_upstream_errors_reach_the_client_unchanged(proxy, upstream):
    before = len(upstream.seen)
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": "Bearer k", "x-test-behaviour": "status=429"},
    )
    assert r.status_code == 429 and r.headers["retry-after"] == "7"
    assert r.content == _new_seen(upstream, before)[0].sent
    client = anthropic.Anthropic(base_url=proxy.url, api_key=ANTHROPIC_KEY, max_retries=0)
    with pytest.raises(anthropic.RateLimitError, match="Rate limit reached") as exc:
        client.messages.create(
            model="c",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-test-behaviour": "status=429"},
        )
    assert exc.value.response.headers["retry-after"] == "7"


def test_slow_upstream_times_out_with_504(upstream, tmp_path):
    store = Store(tmp_path / "p.db")
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, read_timeout=0.3), store) as p:
        t0 = time.monotonic()
        r = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": "Bearer k", "x-test-behaviour": "slow=2"},
            timeout=10,
        )
        assert r.status_code == 504 and time.monotonic() - t0 < 1.5
        assert "sent no answer within 0.3 s" in r.json()["error"]["message"]
        _done(p)
    (row,) = ProxyLog(store).exchange_rows(proxy_sessions(store)[0]["id"])
    assert row["outcome"] == "upstream_timeout"


def test_an_upstream_silent_mid_stream_is_cut_and_recorded_as_a_timeout(upstream, tmp_path):
    store = Store(tmp_path / "p.db")
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, read_timeout=1.0), store) as p:
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        headers = {"authorization": "Bearer k", "x-test-behaviour": "stall=4"}
        got = b""
        with (
            pytest.raises(httpx.RemoteProtocolError),
            httpx.Client(timeout=10) as c,
            c.stream("POST", p.url + "/v1/chat/completions", json=body, headers=headers) as r,
        ):
            for chunk in r.iter_raw():
                got += chunk
        assert got.startswith(b"data: ")  # the first event arrived before the silence
        assert p.recorder.wait_idle(20, at_least=1)
    (row,) = ProxyLog(store).exchange_rows(proxy_sessions(store)[0]["id"])
    assert row["outcome"] == "upstream_timeout" and row["status"] == 200
    assert bytes(row["response_body"]) == got


def test_garbage_from_the_upstream_is_forwarded_and_recorded_as_unparsed(proxy, upstream):
    before = len(upstream.seen)
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": "Bearer k", "x-test-behaviour": "garbage"},
    )
    assert r.status_code == 200 and r.content == _new_seen(upstream, before)[0].sent
    _done(proxy)
    (row,) = ProxyLog(proxy.store).exchange_rows(proxy_sessions(proxy.store)[0]["id"])
    assert row["response_parsed"] == 0 and bytes(row["response_body"]) == r.content


def test_an_upstream_that_does_not_speak_http_is_a_502(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer() -> None:
        for _ in range(3):
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            conn.close()

    threading.Thread(target=answer, daemon=True).start()
    store = Store(tmp_path / "p.db")
    with RecordingProxy.start(ProxyConfig(upstream=f"http://127.0.0.1:{srv.getsockname()[1]}"), store) as p:
        r = httpx.post(
            p.url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        )
        assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_broken"
    srv.close()


def test_a_client_that_leaves_after_the_last_event_got_its_whole_answer(proxy, upstream):
    """The ``openai`` SDK closes a streamed answer as soon as it reads ``[DONE]``; an upstream
    that ends its body only later (here 3 s) must not make the call a ``client_disconnected``
    one -- the client had all of it."""
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        extra_headers={"x-test-behaviour": "linger=3"},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == upstream.text
    _done(proxy)
    (row,) = ProxyLog(proxy.store).exchange_rows(proxy_sessions(proxy.store)[0]["id"])
    assert row["outcome"] == "complete", row
    assert not any("client_disconnected" in line for line in proxy.lines)


def test_a_client_gone_mid_stream_closes_the_upstream_stream(proxy, upstream):
    before = len(upstream.seen)
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
    headers = {"authorization": "Bearer k", "x-test-behaviour": "drip=200"}  # 10 s of events
    with httpx.Client() as c, c.stream("POST", proxy.url + "/v1/chat/completions", json=body, headers=headers) as r:
        got = b""
        for chunk in r.iter_raw():
            got += chunk
            if b"drip" in got:
                break  # leave mid-stream: the connection is closed
    seen = _new_seen(upstream, before)[0]
    deadline = time.monotonic() + 5
    while not seen.stream_closed_early and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.stream_closed_early  # the proxy stopped reading the upstream
    _done(proxy)
    (row,) = ProxyLog(proxy.store).exchange_rows(proxy_sessions(proxy.store)[0]["id"])
    assert row["outcome"] == "client_disconnected"
    assert 0 < row["response_bytes"] < len(seen.sent) + 1 and row["total_ms"] < 5000


def test_a_50_mb_body_is_relayed_whole_and_recorded_as_size_and_hash(proxy, upstream):
    filler = "x" * (50 * 1024 * 1024)
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": filler}]}).encode()
    before = len(upstream.seen)
    r = httpx.post(
        proxy.url + "/v1/chat/completions",
        content=raw,
        headers={"authorization": "Bearer k", "content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 200
    assert hashlib.sha256(_new_seen(upstream, before)[0].raw).digest() == hashlib.sha256(raw).digest()
    _done(proxy)
    (row,) = ProxyLog(proxy.store).exchange_rows(None)
    assert row["request_bytes"] == len(raw) and row["request_body"] is None
    assert row["request_sha256"] == hashlib.sha256(raw).hexdigest()
    assert row["error"] == "request body over the recording cap"
    upstream.seen[before:] = []  # 50 MB less to hold for the other tests


def test_a_body_that_is_not_json_is_relayed_untouched_and_recorded_unparsed(proxy, upstream):
    raw = b"\x00\x01 not json {"
    before = len(upstream.seen)
    r = httpx.post(proxy.url + "/v1/chat/completions?api-version=1", content=raw, headers={"authorization": "Bearer k"})
    assert r.status_code == 400  # the upstream's verdict, passed on
    seen = _new_seen(upstream, before)[0]
    assert seen.raw == raw and seen.path == "/v1/chat/completions?api-version=1"
    _done(proxy)
    (row,) = ProxyLog(proxy.store).exchange_rows(None)
    assert row["request_parsed"] == 0 and bytes(row["request_body"]) == raw and row["api"] == "openai_chat"


def test_many_clients_at_once(proxy, upstream):
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=OPENAI_KEY, max_retries=0)
            hist = [{"role": "user", "content": f"client {i}"}]
            for _ in range(4):
                client.chat.completions.create(model="m", messages=hist, stream=i % 2 == 0)
                hist = [*hist, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    _done(proxy, 96)
    sessions = proxy_sessions(proxy.store)
    assert len(sessions) == 24 and all(s["calls"] == 4 for s in sessions)


def test_the_cli_proxy_runs_prints_a_line_per_call_and_stops_on_ctrl_c(upstream, tmp_path):
    db = tmp_path / "cli.db"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxwright.cli.main",
            "proxy",
            "--upstream",
            upstream.url,
            "--port",
            str(port),
            "--db",
            str(db),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        wait_listening(port, proc, 20, "the proxy")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=OPENAI_KEY, max_retries=0)
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
        client.chat.completions.create(model="m", messages=msgs, extra_headers={"X-Ctxwright-Session": "demo"})
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "OpenAI clients: base URL" in out and "1 exchange(s) recorded" in out
    call_lines = [line for line in out.splitlines() if line.startswith("px-")]
    assert len(call_lines) == 1 and " first " in call_lines[0] and "cached 64" in call_lines[0]
    assert OPENAI_KEY not in out + err
    assert OPENAI_KEY.encode() not in b"".join(
        p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("cli.db")
    )
    # a taken port is one clear line
    busy = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwright.cli.main",
            "proxy",
            "--upstream",
            upstream.url,
            "--port",
            str(upstream.thread.port),
            "--db",
            str(db),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert busy.returncode == 2 and "cannot listen on" in busy.stderr and "Traceback" not in busy.stderr


def test_uvicorn_runs_on_httptools_and_uvloop():
    """Both are dependencies: a relay on h11 and the asyncio loop costs more CPU per request."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from ctxwright.proxy.server import build_app, uvicorn_config

    config = uvicorn_config(build_app(ProxyConfig("http://127.0.0.1:1"), lambda ex: None), "127.0.0.1", 0)
    assert issubclass(config.http, HttpToolsProtocol) and config.loop == "uvloop"


def test_header_scan_drops_hop_by_hop_and_connection_named_and_reads_first_values():
    from ctxwright.proxy.server import _scan

    raw = [
        (b"Host", b"127.0.0.1:8787"),
        (b"Connection", b"keep-alive, X-Drop"),
        (b"X-Drop", b"1"),
        (b"Content-Type", b"application/json"),
        (b"content-type", b"text/plain"),
        (b"X-Ctxwright-Session", b"s1"),
        (b"TE", b"trailers"),
        (b"Authorization", b"Bearer k"),
    ]
    keep, seen = _scan(raw, drop_host=True)
    assert keep == [
        (b"Content-Type", b"application/json"),
        (b"content-type", b"text/plain"),
        (b"X-Ctxwright-Session", b"s1"),
        (b"Authorization", b"Bearer k"),
    ]
    assert seen[b"content-type"] == "application/json" and seen[b"x-ctxwright-session"] == "s1"
    assert (b"Host", b"127.0.0.1:8787") in _scan(raw, drop_host=False)[0]
