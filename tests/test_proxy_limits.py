"""Hostile probes of ``ctxwright proxy``'s limits, with real parts: the relay on uvicorn, the
loopback upstream (``tests/proxy_upstream.py``) or a raw-socket one where an upstream must
break HTTP's framing, raw client sockets where a client must misbehave, the official
``openai`` SDK where one behaves, the CLI in a subprocess where its memory is measured, and a
real SQLite store.

What is asserted: a compressed body is never decoded past the recording cap (a gzip bomb
through the CLI proxy leaves its peak memory where it was, and is recorded as size, hash and
"decoded size over the recording cap"); clients that stall in their request head or body are
closed within the configured timeouts while others are served, and past ``max_connections``
new requests get a 503; a client that leaves before the upstream's first byte cancels the
upstream request at once (the upstream sees its connection closed) and is recorded as
``client_gone``; and after an upstream stream cut mid-way, the next request succeeds with no
retry.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from ctxwright.cli.main import main
from ctxwright.proxy.decode import decode_body
from ctxwright.proxy.limits import ClientLimits
from ctxwright.proxy.log import proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from ports import free_port, wait_listening
from proxy_upstream import gzip_bomb

SRC = Path(__file__).resolve().parents[1] / "src"
MIB = 1024 * 1024
CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def _wait(what: Callable[[], object], timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


# -- compressed bodies: decoded within the cap ------------------------------------------------


def _zlib_stream(wbits: int, mib: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MIB)
    return b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()


def _bomb(coding: str, mib: int) -> bytes:
    """``mib`` MiB of zeros in ``coding``, built a MiB at a time."""
    zeros = bytes(MIB)
    if coding == "gzip":
        return gzip_bomb(mib)
    if coding == "deflate":
        return _zlib_stream(zlib.MAX_WBITS, mib)
    if coding == "raw-deflate":
        return _zlib_stream(-zlib.MAX_WBITS, mib)
    if coding == "gzip, gzip":
        return gzip.compress(gzip_bomb(mib))
    if coding == "zstd":
        zstandard = pytest.importorskip("zstandard")
        c = zstandard.ZstdCompressor(level=3).compressobj()
        return b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()
    brotli = pytest.importorskip("brotli")
    b = brotli.Compressor(quality=5)
    return b"".join(b.process(zeros) for _ in range(mib)) + b.finish()


def _header(coding: str) -> str:
    return "deflate" if coding == "raw-deflate" else coding


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "gzip, gzip", "zstd", "br"])
def test_decode_body_round_trips_each_coding_within_its_cap(coding):
    text = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * 2000}]}).encode()
    if coding == "gzip":
        raw = gzip.compress(text)
    elif coding == "deflate":
        raw = zlib.compress(text)
    elif coding == "raw-deflate":
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        raw = c.compress(text) + c.flush()
    elif coding == "gzip, gzip":
        raw = gzip.compress(gzip.compress(text))
    elif coding == "zstd":
        raw = pytest.importorskip("zstandard").ZstdCompressor().compress(text)
    else:
        raw = pytest.importorskip("brotli").compress(text)
    enc = _header(coding)
    assert decode_body(raw, enc, len(text)).data == text  # exactly the cap fits
    over = decode_body(raw, enc, len(text) - 1)
    assert over.data is None and over.over_cap
    cut = decode_body(raw[: len(raw) // 2], enc, 10 * len(text))  # a body cut short does not decode
    assert cut.data is None and not cut.over_cap


def test_decode_body_refuses_what_it_cannot_decode():
    text = b'{"a": 1}'
    assert decode_body(text, None, 100).data == text
    assert decode_body(text, "identity", 100).data == text
    assert decode_body(text, None, 3).over_cap  # an identity body over the cap
    assert decode_body(b"\x00garbage", "gzip", 100).data is None
    assert decode_body(text, "compress", 100).data is None  # an encoding this build cannot undo
    many = text
    for _ in range(5):
        many = gzip.compress(many)
    assert decode_body(many, ", ".join(["gzip"] * 5), 100).data is None  # more codings than any body needs
    assert decode_body(gzip.compress(zlib.compress(text)), "deflate, gzip", 100).data == text


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate", "gzip, gzip", "zstd", "br"])
def test_a_bomb_is_never_decoded_past_the_cap(coding):
    """128 MiB of zeros in a few hundred KB (a few hundred bytes for zstd and br): decoding
    stops at the 1 MiB cap, holding no more than the cap and one step, and at once."""
    bomb = _bomb(coding, 128)
    assert len(bomb) < 2 * MIB
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        got = decode_body(bomb, _header(coding), MIB)
        elapsed = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.data is None and got.over_cap
    assert peak < MIB + 4 * MIB, peak  # the cap, one decoding step, bookkeeping; never the 128 MiB
    assert elapsed < 10  # stopped at the cap, not expanded to the end (that takes seconds)


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


def _rows(db: Path) -> list[dict]:
    with sqlite3.connect(db) as con:
        con.row_factory = sqlite3.Row
        return [dict(r) for r in con.execute("SELECT * FROM proxy_exchanges ORDER BY id")]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the proxy's peak RSS from /proc")
def test_a_gzip_bomb_through_the_cli_proxy_keeps_its_memory_and_is_recorded(upstream, tmp_path):
    """A 256 KB gzip request that expands to 256 MiB, and a gzip answer that does the same,
    through ``ctxwright proxy --record-cap 1``: its peak memory grows by far less than one
    expansion, and both exchanges are recorded as size, hash and "decoded size over the cap"."""
    db, port = tmp_path / "bomb.db", free_port()
    cmd = [sys.executable, "-m", "ctxwright.cli.main", "proxy", "--upstream", upstream.url]
    cmd += ["--port", str(port), "--db", str(db), "--record-cap", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_listening(port, proc, 30, "the proxy")
        headers = {"authorization": "Bearer k", "content-type": "application/json"}
        assert httpx.post(base + "/v1/chat/completions", json=CHAT, headers=headers, timeout=30).status_code == 200
        assert _wait(lambda: db.exists() and len(_rows(db)) == 1, 30)
        baseline = _peak_kib(proc.pid)  # the proxy warmed up: imports, one audit, one write

        bomb = gzip_bomb(256)
        r = httpx.post(
            base + "/v1/chat/completions",
            content=bomb,
            headers={**headers, "content-encoding": "gzip"},
            timeout=60,
        )
        assert r.status_code == 400  # the upstream's verdict on a body it cannot read, relayed
        with (
            httpx.Client(timeout=60) as c,
            c.stream(
                "POST", base + "/v1/chat/completions", json=CHAT, headers={**headers, "x-test-behaviour": "bomb=256"}
            ) as answer,
        ):
            got = b"".join(answer.iter_raw())  # raw: the test itself must not expand it either
        assert got == bomb
        assert _wait(lambda: len(_rows(db)) == 3, 60), _rows(db)
        grown_mib = (_peak_kib(proc.pid) - baseline) / 1024
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert grown_mib < 64, f"the proxy's peak memory grew by {grown_mib:.0f} MiB"
    _, asked, answered = _rows(db)
    assert asked["request_bytes"] == len(bomb) and asked["request_body"] is None
    assert asked["request_sha256"] == hashlib.sha256(bomb).hexdigest()
    assert asked["error"] == f"request body's decoded size over the recording cap ({MIB:,} bytes)"
    assert answered["response_bytes"] == len(bomb) and answered["response_body"] is None
    assert answered["response_sha256"] == hashlib.sha256(bomb).hexdigest()
    assert answered["error"] == f"response body's decoded size over the recording cap ({MIB:,} bytes)"
    assert answered["outcome"] == "complete" and answered["status"] == 200


# -- stalled clients ----------------------------------------------------------------------------


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the proxy closes ``sock`` (``True``) or ``seconds`` pass (``False``)."""
    got = b""
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False, got
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False, got
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk


def _read_response(sock: socket.socket) -> bytes:
    """One whole response with a ``Content-Length``, read off ``sock``."""
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_stalled_clients_are_closed_within_the_timeouts_and_others_are_served(upstream, tmp_path):
    store = Store(tmp_path / "p.db")
    limits = ClientLimits(header_timeout=1.0, body_timeout=1.0)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, clients=limits), store) as p:
        addr = (p.thread.host, p.thread.port)
        t0 = time.monotonic()
        silent = [socket.create_connection(addr) for _ in range(10)]  # connect, say nothing
        partial = [socket.create_connection(addr) for _ in range(10)]  # half a request head
        for s in partial:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        body = json.dumps(CHAT).encode()
        mid_body = [socket.create_connection(addr) for _ in range(10)]  # a whole head, half a body
        for s in mid_body:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10]
            )
        # a kept-alive connection: one whole request, then half of the next head
        again = socket.create_connection(addr)
        again.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _read_response(again).startswith(b"HTTP/1.1 200")
        again.sendall(b"GET /v1/models HTTP/1.1\r\nHo")

        # meanwhile a well-behaved client is served
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0, timeout=30)
        assert client.chat.completions.create(model="m", messages=CHAT["messages"]).choices[0].message.content

        for group in (silent, partial, [again]):
            for s in group:
                closed, _ = _closed_within(s, 20)
                assert closed, f"a client stalled in its request head was not closed: {group.index(s)} of {len(group)}"
        for s in mid_body:
            closed, answer = _closed_within(s, 20)
            assert closed, "a client stalled mid-body was not closed"
            assert answer.startswith(b"HTTP/1.1 408") and b"--body-timeout" in answer
        elapsed = time.monotonic() - t0
        assert elapsed < 20  # the timeouts are 1 s: closed long before the 75 s the probe waited
        for s in [*silent, *partial, *mid_body, again]:
            s.close()
        assert p.recorder.wait_idle(20, at_least=11)
        # and the proxy still serves
        assert client.chat.completions.create(model="m", messages=CHAT["messages"]).choices[0].message.content
    outcomes = [r["outcome"] for r in ProxyLog(store).exchange_rows(None)]
    outcomes += [r["outcome"] for s in proxy_sessions(store) for r in ProxyLog(store).exchange_rows(s["id"])]
    assert outcomes.count("client_timeout") == 10


def test_answers_slower_than_the_head_deadline_are_not_cut(upstream, tmp_path):
    """The deadline is for the request head only: a request whose body comes in a later
    packet, and whose answer takes longer than the deadline, is served whole -- twice on one
    kept-alive connection -- as is a slow answer to a bodiless GET."""
    limits = ClientLimits(header_timeout=0.5, body_timeout=10.0)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, clients=limits), Store(tmp_path / "p.db")) as p:
        body = json.dumps(CHAT).encode()
        head = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
            b"x-test-behaviour: slow=1.5\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        with socket.create_connection((p.thread.host, p.thread.port)) as s:
            for _ in range(2):
                s.sendall(head)
                time.sleep(0.2)  # the body in a packet of its own
                s.sendall(body)
                s.settimeout(30)
                assert _read_response(s).startswith(b"HTTP/1.1 200")
        r = httpx.get(p.url + "/v1/models", headers={"x-test-behaviour": "slow=1.5"}, timeout=30)
        assert r.status_code == 200


def test_the_head_deadline_holds_on_the_pure_python_fallback_too(upstream, tmp_path, monkeypatch):
    """Without httptools and uvloop, uvicorn runs on h11 and asyncio: the same deadline."""
    from ctxwright.proxy import server

    monkeypatch.setattr(server, "_fast", lambda module: False)
    limits = ClientLimits(header_timeout=1.0)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, clients=limits), Store(tmp_path / "p.db")) as p:
        assert "H11" in type(p.thread.server.config.http_protocol_class).__name__ or "H11" in str(
            p.thread.server.config.http_protocol_class
        )
        stalled = socket.create_connection((p.thread.host, p.thread.port))
        stalled.sendall(b"GET /v1/models HTTP/1.1\r\nHo")
        assert httpx.get(p.url + "/v1/models", timeout=30).status_code == 200
        assert _closed_within(stalled, 20)[0]
        stalled.close()


def test_past_max_connections_new_requests_get_a_503(upstream, tmp_path):
    store = Store(tmp_path / "p.db")
    limits = ClientLimits(header_timeout=60.0, max_connections=3)
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, clients=limits), store) as p:
        connections = p.thread.server.server_state.connections  # uvicorn's, counted once accepted
        held = [socket.create_connection((p.thread.host, p.thread.port)) for _ in range(2)]
        assert _wait(lambda: len(connections) == 2)
        assert httpx.get(p.url + "/v1/models", timeout=30).status_code == 200  # the third is served
        held.append(socket.create_connection((p.thread.host, p.thread.port)))
        assert _wait(lambda: len(connections) == 3)
        assert httpx.get(p.url + "/v1/models", timeout=30).status_code == 503  # the fourth is not
        for s in held:
            s.close()
        assert _wait(lambda: not connections)
        assert httpx.get(p.url + "/v1/models", timeout=30).status_code == 200


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--header-timeout", "0"), ("--body-timeout", "-1"), ("--body-timeout", "nan"), ("--max-connections", "0")],
)
def test_client_limit_flags_are_checked(flag, value, tmp_path, capsys):
    args = ["proxy", "--upstream", "http://127.0.0.1:1", "--db", str(tmp_path / "x.db"), flag, value]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


# -- a client gone before the upstream's first byte ----------------------------------------


def test_a_client_gone_before_the_first_byte_cancels_the_upstream_request(upstream, tmp_path):
    """The SDK gives up after 1 s while the upstream still thinks (it would answer in 60 s and
    the proxy would wait 120): the upstream sees its connection closed at once, and the
    exchange is recorded as ``client_gone``."""
    store = Store(tmp_path / "p.db")
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, read_timeout=120), store) as p:
        before = len(upstream.seen)
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0, timeout=1.0)
        with pytest.raises(openai.APITimeoutError):
            client.chat.completions.create(
                model="m", messages=CHAT["messages"], extra_headers={"x-test-behaviour": "hold=60"}
            )
        gave_up = time.monotonic()
        assert _wait(lambda: len(upstream.seen) > before)
        seen = upstream.seen[before]
        assert _wait(lambda: seen.closed_at is not None, 30), "the upstream request was not cancelled"
        assert seen.closed_at is not None and seen.closed_at - gave_up < 30
        assert p.recorder.wait_idle(20, at_least=1)
    (row,) = ProxyLog(store).exchange_rows(proxy_sessions(store)[0]["id"])
    assert row["outcome"] == "client_gone" and row["status"] is None
    assert "before the upstream answered" in row["error"]
    assert row["total_ms"] < 30_000


# -- an upstream stream cut mid-way ------------------------------------------------------------


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class RawUpstream:
    """An upstream on a bare socket, for framing no HTTP server library would send: a request
    whose body has ``"cut"`` gets a stream that ends (a zero-length chunk) after its first
    event and then goes on with the rest of it on the same connection (``cut="chunked"``), or
    a JSON answer whose ``Content-Length`` is shorter than it (``cut="length"``), or a stream
    whose connection is closed mid-way (``cut="close"``); every other request gets a chat
    completion. Connections are kept alive and counted."""

    def __init__(self, cut: str) -> None:
        self.cut = cut
        self.connections = 0
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen()
        self.url = f"http://127.0.0.1:{self.srv.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with conn:
            try:
                while True:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            return
                        buf += data
                    head, _, buf = buf.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n")[1:]:
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value)
                    while len(buf) < length:
                        buf += conn.recv(65536)
                    body, buf = buf[:length], buf[length:]
                    if b"cut" in body and not self._cut(conn):
                        return
                    if b"cut" not in body:
                        reply = json.dumps(
                            {
                                "id": "c1",
                                "object": "chat.completion",
                                "created": 1,
                                "model": "m",
                                "choices": [
                                    {
                                        "index": 0,
                                        "message": {"role": "assistant", "content": "ok"},
                                        "finish_reason": "stop",
                                    }
                                ],
                            }
                        ).encode()
                        conn.sendall(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                            % len(reply)
                            + reply
                        )
            except OSError:
                return

    def _cut(self, conn: socket.socket) -> bool:
        """Send the broken answer; whether the connection stays open."""
        events = [b'data: {"choices": [{"index": 0, "delta": {"content": "he"}}]}\n\n', b"data: [DONE]\n\n"]
        if self.cut == "length":
            reply = b'{"id": "c1", "object": "chat.completion", "choices": []}'
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n" + reply)
            return True
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        if self.cut == "close":
            conn.sendall(head + _chunk(events[0]))
            return False
        # the stream ends after its first event, and the rest of it follows anyway, in one write
        conn.sendall(head + _chunk(events[0]) + b"0\r\n\r\n" + b"".join(_chunk(e) for e in events[1:]) + b"0\r\n\r\n")
        return True

    def stop(self) -> None:
        self.srv.close()


@pytest.mark.parametrize("cut", ["chunked", "length", "close"])
def test_after_a_stream_cut_mid_way_the_next_request_succeeds(cut, tmp_path):
    up = RawUpstream(cut)
    store = Store(tmp_path / "p.db")
    try:
        with RecordingProxy.start(ProxyConfig(upstream=up.url), store) as p:
            # one SDK client, one pool, no retry: a 502 on the next call would fail this test
            client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0, timeout=30)
            for _ in range(3):
                try:
                    if cut == "length":
                        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "cut"}])
                    else:
                        stream = client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": "cut"}], stream=True
                        )
                        for _event in stream:
                            pass
                except (openai.APIConnectionError, openai.APIResponseValidationError, ValueError):
                    pass  # the broken answer itself may fail in the SDK: the point is the next call
                reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "next"}])
                assert reply.choices[0].message.content == "ok"
            assert p.recorder.wait_idle(20, at_least=6)
        # each broken answer's connection was dropped, each good one kept: 3 broken, 4 connections
        assert up.connections == 4
    finally:
        up.stop()
