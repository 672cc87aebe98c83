"""``ctxwright replay serve`` as a real subprocess, and the server under hostile clients.

The command prints its URL on its first line, answers the official SDK, prints each divergence
on stderr, stops cleanly on SIGTERM (the trace written) and when its parent dies; a bad golden
or flag is one line and exit 2. The server caps bodies (plain and compressed: 413), cuts off
stalled clients (408 for a body, a closed connection for a head)."""

from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from ctxwright.cli.main import main
from ctxwright.proxy.limits import ClientLimits
from ctxwright.replay.golden import load_golden
from ctxwright.replay.server import ReplayServer
from replay_agents import FINAL, GOLDENS, chat_agent, chat_golden, write_jsonl

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC)}


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxwright.cli.main", "replay", "serve", *args]


def _url_of(proc: subprocess.Popen[str]) -> str:
    """The URL from the first line of stdout (read with a deadline, never a fixed sleep)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server printed it (or exited)
    if not line.startswith("ctxwright replay on http://"):
        proc.kill()
        pytest.fail(f"no URL line: {line!r} {proc.communicate(timeout=30)}")
    return line.split()[-1]


def test_serve_prints_its_url_answers_and_stops_on_sigterm(tmp_path: Path) -> None:
    golden = write_jsonl(tmp_path / "g.jsonl", chat_golden())
    trace = tmp_path / "trace.jsonl"
    proc = subprocess.Popen(
        _cmd(str(golden), "--trace", str(trace)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV
    )
    try:
        url = _url_of(proc)
        assert url.startswith("http://127.0.0.1:")  # loopback by default, port 0 picked a free one
        out = chat_agent(url, stream=True)
        assert out["text"] == FINAL
        client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "something else"}])
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stderr.strip().splitlines() == [
        "ctxwright replay: call 1 of a new conversation: the recording has 1 conversation, all started"
    ]
    assert "c1#0 openai_chat stream 200" in stdout and "3 calls answered, 1 divergence" in stdout
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [(r["replay"]["position"], r["replay"]["status"]) for r in lines] == [(0, 200), (1, 200), (0, 400)]


def test_serve_dies_with_its_parent(tmp_path: Path) -> None:
    """A parent that is killed (SIGKILL: nothing of it runs) leaves no server behind."""
    golden = write_jsonl(tmp_path / "g.jsonl", chat_golden())
    pidfile = tmp_path / "child.pid"
    parent_code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen({_cmd(str(golden))!r}, stdout=subprocess.PIPE, text=True)\n"
        "print(p.stdout.readline(), flush=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=ENV)
    assert parent.stdout is not None
    assert parent.stdout.readline().startswith("ctxwright replay on http://")
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _alive(child):
        assert time.monotonic() < deadline, "the replay server outlived its parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_device_as_golden_is_one_line_and_exit_2() -> None:
    done = subprocess.run(_cmd("/dev/zero"), capture_output=True, text=True, env=ENV, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines() == [
        "ctxwright: /dev/zero is a character device, not a log: a device can be endless; give a regular file, "
        "a pipe, or - for stdin"
    ]


@pytest.mark.parametrize(
    "args, says",
    [
        (["--port", "70000", "G"], "--port 70000: give a TCP port from 0 to 65535"),
        (["--max-body", "0", "G"], "--max-body 0: give a size in MB above 0"),
        (["--body-timeout", "-1", "G"], "--body-timeout -1 is not a number of seconds above 0"),
        (["BIN"], "is not JSON: a golden is a request log"),
        (["G", "--session", "abc"], "give exactly one golden"),
        (["--session", "abc", "--store", "NODB"], "no ctxwright database at"),
        (["G", "--trace", "/dev/null"], "--trace /dev/null is not a regular file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys, args: list[str], says: str) -> None:
    golden = write_jsonl(tmp_path / "g.jsonl", chat_golden())
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    subst = {"G": str(golden), "BIN": str(binary), "NODB": str(tmp_path / "no.db")}
    capsys.readouterr()
    assert main(["replay", "serve", *(subst.get(a, a) for a in args)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines
    assert "Traceback" not in lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "serve", "--session", "abc", "--store", "postgresql://u:p@db.example:5433/ctx?sslmode=require"],
        ["--db", "postgresql://u:p@db.example:5433/ctx?sslmode=require", "replay", "serve", "--session", "abc"],
    ],
)
def test_a_postgresql_store_reaches_the_golden_loader_as_given(monkeypatch, capsys, args: list[str]) -> None:
    """``--store`` (an alias of ``--db``) and ``--db`` pass a URL on as text: ``Path()`` made
    ``postgresql://`` into ``postgresql:/``, an SQLite file name."""
    from ctxwright.errors import CtxwrightError
    from ctxwright.replay import golden as golden_module

    seen: list[object] = []

    def fake_load_golden(*_a: object, store: object = None, **_kw: object) -> None:
        seen.append(store)
        raise CtxwrightError("stop here")

    monkeypatch.setattr(golden_module, "load_golden", fake_load_golden)
    assert main(args) == 2
    assert seen == ["postgresql://u:p@db.example:5433/ctx?sslmode=require"]
    assert "stop here" in capsys.readouterr().err


# -- hostile clients ------------------------------------------------------------------------


@pytest.fixture
def small_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    golden = load_golden(write_jsonl(tmp_path / "g.jsonl", GOLDENS["openai_chat"]()))
    # 2 s, not less: the last request of the stall test must not itself time out on a loaded CI machine
    limits = ClientLimits(header_timeout=2.0, body_timeout=2.0, max_connections=8)
    with ReplayServer.start(golden, limits=limits, max_body=64 * 1024) as srv:
        yield srv


def test_an_oversized_body_is_413(small_server: ReplayServer) -> None:
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 100_000}]}
    r = httpx.post(small_server.url + "/v1/chat/completions", json=big)
    assert r.status_code == 413 and "larger than 65,536 bytes" in r.json()["error"]["message"]

    def chunks():  # type: ignore[no-untyped-def]
        for _ in range(100):
            yield b"x" * 4096

    r = httpx.post(small_server.url + "/v1/messages", content=chunks())  # chunked: no Content-Length
    assert r.status_code == 413 and r.json()["type"] == "error"
    assert small_server.calls == []


def test_a_compression_bomb_is_413_not_expanded(small_server: ReplayServer) -> None:
    bomb = gzip.compress(b'{"model": "m", "messages": [' + b" " * 50_000_000 + b"]}")
    assert len(bomb) < 100_000
    r = httpx.post(
        small_server.url + "/v1/chat/completions",
        content=bomb,
        headers={"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert r.status_code == 413


def test_a_stalled_body_is_408_and_a_stalled_head_is_cut_off(small_server: ReplayServer) -> None:
    port = int(small_server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        assert s.recv(4096) == b""  # closed by the server after the head timeout
    # and it still answers
    r = httpx.post(small_server.url + "/v1/chat/completions", json=chat_golden()[0]["request"])
    assert r.status_code == 200
