"""``ctxwright proxy --compress`` (``proxy/compress.py``): each tool result sent compressed, once,
and the same bytes on every later request -- so the agent's prefix holds at the provider.

Real parts: the official ``openai`` and ``anthropic`` SDKs as clients, the relay on uvicorn, the
loopback upstream that keeps the raw bytes it received (``tests/proxy_upstream.py``), the
caching Anthropic simulator (``tests/providers/anthropic_sim.py``), real SQLite stores, and for
``wrap`` the CLI as a subprocess.

What must hold: fewer tokens upstream than sent directly (>= 25% on a JSON listing and repeated
log output), every planted fact in the upstream's last request, each compressed result's bytes
the same on every later request (the proxy's own audit: every call after the first an
``append``), the same bytes after a restart (read from the store), every other byte of a body
as the client sent it, and a body that cannot be rewritten relayed as it came, with one line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from ctxwright.core.tokens import TokenCounter
from ctxwright.proxy.compress import tool_results
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))

from providers.anthropic_sim import AnthropicSim
from proxy_upstream import Upstream

KEY = "sk-test-compress"
TOOLS = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object", "properties": {}}}}]


def listing() -> str:
    items: list[dict[str, Any]] = [
        {"id": i, "name": f"svc-{i}", "region": "eu-west-1", "status": "running", "owner": "team-core", "replicas": 3}
        for i in range(150)
    ]
    items[77]["owner"] = "FACT-owner-q7"
    items[140]["status"] = "FACT-status-z9"
    return json.dumps(items, indent=2)


def pytest_log(run: int) -> str:
    lines = [f"tests/test_mod.py::test_case PASSED [{i * 100 // 200:3d}%]" for i in range(200)]
    lines.insert(120, f"tests/test_mod.py::test_edge FAILED - AssertionError: FACT-assert-r{run}")
    lines.append(f"=== 1 failed, 199 passed in 3.{run}1s ===")
    return "\n".join(lines)


def build_log() -> str:
    lines = [f"[{i * 100 // 300:3d}%] Building CXX object core.dir/part.cpp.o ({i} of 300)" for i in range(300)]
    lines.insert(211, "warning: unused variable FACT-warn-k3 in part.cpp:88")
    return "\n".join(lines)


#: the session's tool results, in order: a listing, a test run, a build, a short answer, the
#: test run again with another failure, and the same again
OUTPUTS = [
    ("call_1", listing()),
    ("call_2", pytest_log(1)),
    ("call_3", build_log()),
    ("call_4", "FACT-short-ok: 3 files changed"),
    ("call_5", pytest_log(2)),
    ("call_6", pytest_log(2)),
]
FACTS = ["FACT-owner-q7", "FACT-status-z9", "FACT-assert-r1", "FACT-warn-k3", "FACT-short-ok", "FACT-assert-r2"]


def chat_messages(upto: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful ops agent."},
        {"role": "user", "content": "Find out why the deploy fails."},
    ]
    for cid, out in OUTPUTS[:upto]:
        call = {"id": cid, "type": "function", "function": {"name": "shell", "arguments": '{"cmd": "x"}'}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": out},
        ]
    return msgs


def run_chat(base_url: str, rounds: range) -> None:
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0)
    for k in rounds:
        client.chat.completions.create(model="m", messages=chat_messages(k + 1), tools=TOOLS)  # type: ignore[arg-type]


def results_of(raw: bytes) -> dict[str, str]:
    body = json.loads(raw)
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m.get("role") == "tool"}


def one_session_causes(store: Store) -> list[str]:
    (session,) = proxy_sessions(store)
    return [r["proxy"]["audit"]["cause"] for r in proxy_session_requests(store, str(session["id"]))]


@pytest.fixture
def compressing(upstream: Upstream, tmp_path: Path) -> Iterator[tuple[RecordingProxy, list[str]]]:
    lines: list[str] = []
    store = Store(tmp_path / "c.db")
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url, compress=True), store, printer=lines.append) as p:
        yield p, lines
    store.close()


def _idle(proxy: RecordingProxy, n: int) -> None:
    assert proxy.recorder.wait_idle(60, at_least=n), proxy.recorder.summary()


def test_a_tool_heavy_session_costs_fewer_tokens_keeps_every_fact_and_never_breaks_its_prefix(
    upstream: Upstream, compressing: tuple[RecordingProxy, list[str]]
) -> None:
    proxy, lines = compressing
    n = len(OUTPUTS)
    start = len(upstream.seen)
    run_chat(upstream.url + "/v1", range(n))  # direct: the same conversation, no proxy
    direct = [s.raw for s in upstream.seen[start:]]
    run_chat(proxy.url + "/v1", range(n))
    sent = [s.raw for s in upstream.seen[start + n :]]
    _idle(proxy, n)
    counter = TokenCounter()
    direct_tokens = sum(counter.count(r.decode()) for r in direct)
    sent_tokens = sum(counter.count(r.decode()) for r in sent)
    assert sent_tokens <= 0.75 * direct_tokens, (sent_tokens, direct_tokens)
    last = sent[-1].decode()
    assert all(json.dumps(f)[1:-1] in last for f in FACTS), [f for f in FACTS if f not in last]
    # each result, once compressed, goes upstream as the same bytes on every later request
    seen: dict[str, str] = {}
    for raw in sent:
        for cid, text in results_of(raw).items():
            assert seen.setdefault(cid, text) == text, cid
    assert seen["call_6"] == "[same as the result of call call_5]"  # the exact repeat, a reference
    assert seen["call_4"] == OUTPUTS[3][1]  # too short to shorten: sent as it was
    assert one_session_causes(proxy.recorder.store) == ["first"] + ["append"] * (n - 1)  # type: ignore[arg-type]
    # the original of a rewritten result is kept on disk, and named in it when the rule left bytes out
    path = Path(seen["call_3"].rsplit("full output: ", 1)[1].rstrip("]"))
    assert path.read_text() == OUTPUTS[2][1]
    assert "full output" not in seen["call_1"]  # a table holds every byte of the listing
    assert (path.parent / f"{hashlib.sha256(OUTPUTS[0][1].encode()).hexdigest()}.txt").read_text() == OUTPUTS[0][1]
    # what was recorded is what went upstream, and the line per call says what was saved
    recorded = proxy_session_requests(proxy.recorder.store, str(proxy_sessions(proxy.recorder.store)[0]["id"]))  # type: ignore[arg-type]
    assert [json.dumps(r["request"], separators=(",", ":")) for r in recorded] == [
        json.dumps(json.loads(raw), separators=(",", ":")) for raw in sent
    ]
    assert recorded[-1]["proxy"]["audit"]["compression"]["saved_chars"] > 0
    calls = [line for line in lines if " #" in line]
    assert len(calls) == n and all("compressed " in line and " chars (" in line for line in calls), calls


def test_a_restarted_proxy_sends_what_the_store_kept(
    upstream: Upstream, db_target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # a PostgreSQL store's originals: the data dir
    db = db_target  # SQLite, then PostgreSQL
    config = ProxyConfig(upstream=upstream.url, compress=True)
    start = len(upstream.seen)
    with RecordingProxy.start(config, Store(db)) as first:
        run_chat(first.url + "/v1", range(3))
        _idle(first, 3)
    before = results_of(upstream.seen[-1].raw)
    with RecordingProxy.start(config, Store(db)) as second:
        run_chat(second.url + "/v1", range(3, 6))
        _idle(second, 3)
    after = results_of(upstream.seen[-1].raw)
    assert {cid: after[cid] for cid in before} == before
    kept = Path(before["call_3"].rsplit("full output: ", 1)[1].rstrip("]"))
    assert kept.read_text() == OUTPUTS[2][1] and kept.is_relative_to(tmp_path)
    store = Store(db)
    assert one_session_causes(store) == ["first"] + ["append"] * 5  # one session across the restart, no break
    # the store decides, not a recomputation: bytes an earlier build stored keep going upstream
    store.db.execute("UPDATE proxy_compressed SET text = text || ' [kept]' WHERE call_id = 'call_1'")
    store.close()
    with RecordingProxy.start(config, Store(db)) as third:
        run_chat(third.url + "/v1", range(5, 6))
        _idle(third, 1)
    assert results_of(upstream.seen[-1].raw)["call_1"] == before["call_1"] + " [kept]"
    assert len(upstream.seen) - start == 7


def test_only_the_tool_result_strings_change_every_other_byte_stays(
    upstream: Upstream, compressing: tuple[RecordingProxy, list[str]]
) -> None:
    proxy, _lines = compressing
    log = build_log()
    # spacing, key order, escapes and a number's spelling a re-serialization would change
    head = (
        '{"model" : "m",\n "temperature": 1.0E0, "messages": [{"content": "caf\\u00e9 \\/ s", "role": "system"},'
        ' {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": '
        '{"name": "shell", "arguments": "{}"}}]}, {"tool_call_id": "c1", "role": "tool", "content": '
    )
    raw = (head + json.dumps(log) + "}]}").encode()
    auth = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers=auth, timeout=30)
    assert r.status_code == 200
    got = upstream.seen[-1]
    new = json.loads(got.raw)["messages"][2]["content"]
    assert "FACT-warn-k3" in new and len(new) < len(log) / 4
    assert got.raw == (head + json.dumps(new, ensure_ascii=False) + "}]}").encode()
    assert got.headers["content-length"] == str(len(got.raw))


def test_anthropic_tool_results_through_the_sdk_hold_the_providers_cache(tmp_path: Path) -> None:
    with AnthropicSim() as sim, closing(Store(tmp_path / "a.db")) as store:
        config = ProxyConfig(upstream=sim.url, compress=True)
        with RecordingProxy.start(config, store) as proxy:
            client = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
            msgs: list[dict[str, Any]] = [{"role": "user", "content": "Find out why the deploy fails."}]
            reads = []
            for i, (cid, out) in enumerate(OUTPUTS):
                content: Any = out if i % 2 else [{"type": "text", "text": out}]  # a string, or text blocks
                msgs += [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": cid, "name": "shell", "input": {}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": cid, "content": content}]},
                ]
                marked = json.loads(json.dumps(msgs))  # the breakpoint on the newest block, as Claude Code moves it
                marked[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
                reply = client.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=64,
                    messages=marked,
                    system="ops agent",
                )
                reads.append(reply.usage.cache_read_input_tokens or 0)
            _idle(proxy, len(OUTPUTS))
            causes = one_session_causes(store)
    texts: dict[str, str] = {}
    for body in sim.requests:
        for r in tool_results(_spans(body), "anthropic_messages"):
            assert texts.setdefault(r.call_id, str(r.original)) == str(r.original), r.call_id
    assert texts["call_6"] == "[same as the result of call call_5]"
    last = json.dumps(sim.requests[-1])
    assert all(f in last for f in FACTS)
    assert causes == ["first"] + ["append"] * (len(OUTPUTS) - 1)
    assert all(r > 0 for r in reads[1:]), reads  # the provider read each earlier prefix from its cache


def _spans(body: dict[str, Any]) -> Any:
    from ctxwright.proxy.compress import _spanned

    return _spanned(json.dumps(body))


def test_responses_api_function_call_outputs_are_compressed(
    upstream: Upstream, compressing: tuple[RecordingProxy, list[str]]
) -> None:
    proxy, _lines = compressing
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
    items: list[Any] = [{"role": "user", "content": "list the services"}]
    items += [
        {"type": "function_call", "call_id": "fc_1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "fc_1", "output": listing()},
    ]
    client.responses.create(model="m", input=items)
    sent = json.loads(upstream.seen[-1].raw)["input"][2]["output"]
    assert sent.startswith("[JSON array of 150 objects as a table") and "FACT-owner-q7" in sent
    assert len(sent) < len(listing()) / 2


def _chat_body(out: str) -> bytes:
    call = {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
    msgs = [{"role": "assistant", "tool_calls": [call]}, {"role": "tool", "tool_call_id": "c1", "content": out}]
    return json.dumps({"model": "m", "messages": msgs}).encode()


#: bodies --compress cannot rewrite, and the words its line gives
BODIES = {
    "not_json": (b'{"model": "m", "messages": [', "not JSON"),
    "deep": (b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
    "not_utf8": (_chat_body(build_log()).replace(b"FACT-warn-k3", b"FACT-\xff-k3"), "not UTF-8"),
}


@pytest.mark.parametrize("case", ["not_json", "deep", "not_utf8", "over_cap", "gzip", "compressor_fails"])
def test_a_body_it_cannot_rewrite_goes_as_it_came_with_one_line(
    upstream: Upstream, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines: list[str] = []
    cap = 4096 if case == "over_cap" else 1 << 20
    config = ProxyConfig(upstream=upstream.url, compress=True, record_cap=cap)
    body = BODIES[case][0] if case in BODIES else _chat_body(build_log())
    if case == "compressor_fails":

        def broken(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError("a bug")

        monkeypatch.setattr("ctxwright.proxy.compress.compress_result", broken)
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    wire = body
    if case == "gzip":
        wire = gzip.compress(body)
        headers["content-encoding"] = "gzip"
    with closing(Store(tmp_path / "g.db")) as store, RecordingProxy.start(config, store, printer=lines.append) as proxy:
        httpx.post(proxy.url + "/v1/chat/completions", content=wire, headers=headers, timeout=30)
        _idle(proxy, 1)
        assert proxy.recorder.recorded == 1  # nothing lost
    got = upstream.seen[-1]
    if case == "gzip":  # decoded within the cap, rewritten, sent plain
        assert "content-encoding" not in got.headers
        text = json.loads(got.raw)["messages"][1]["content"]
        assert "FACT-warn-k3" in text and len(text) < len(build_log()) / 4
        assert len(lines) == 1 and "compressed 1/1 results" in lines[0]
    else:
        assert got.raw == wire  # byte for byte
        why = BODIES[case][1] if case in BODIES else {"over_cap": "over the cap", "compressor_fails": "a bug"}[case]
        assert len(lines) == 1 and "not compressed" in lines[0] and why in lines[0], lines


@pytest.mark.slow
def test_wrap_passes_compress_to_its_proxy(upstream: Upstream, tmp_path: Path) -> None:
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, openai, sys\n"
        f"out = {listing()!r}\n"
        "call = {'id': 'c1', 'type': 'function', 'function': {'name': 'shell', 'arguments': '{}'}}\n"
        "msgs = [{'role': 'assistant', 'tool_calls': [call]}, {'role': 'tool', 'tool_call_id': 'c1', 'content': out}]\n"
        f"openai.OpenAI(api_key={KEY!r}, max_retries=0).chat.completions.create(model='m', messages=msgs)\n"
    )
    src = Path(__file__).resolve().parents[1] / "src"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src), "HOME": str(tmp_path)}
    before = len(upstream.seen)
    argv = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(tmp_path / "w.db"), "wrap", "--compress"]
    argv += ["--upstream", upstream.url, "--log", str(tmp_path / "w.log"), "--", sys.executable, str(agent)]
    done = subprocess.run(argv, capture_output=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr.decode()
    assert len(upstream.seen) == before + 1
    sent = json.loads(upstream.seen[-1].raw)["messages"][1]["content"]
    assert sent.startswith("[JSON array of 150 objects as a table") and "FACT-owner-q7" in sent
    assert "compressed 1/1 results" in (tmp_path / "w.log").read_text()


@pytest.mark.slow
def test_proxy_compress_with_workers_sends_one_form_per_result(upstream: Upstream, tmp_path: Path) -> None:
    """``ctxwright proxy --compress --workers 2``: each worker opens the store itself; a request
    on a new connection may reach either, and each result still goes upstream as one form."""
    import os
    import signal
    import socket
    import time

    from ports import free_port

    port = free_port()
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "NO_PROXY": "127.0.0.1"}
    argv = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(tmp_path / "w.db"), "proxy", "--compress"]
    argv += ["--upstream", upstream.url, "--port", str(port), "--workers", "2", "--quiet"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "the proxy did not listen"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        start = len(upstream.seen)
        for k in range(len(OUTPUTS)):  # a new client, a new connection, per call
            run_chat(f"http://127.0.0.1:{port}/v1", range(k, k + 1))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=90)
    forms: dict[str, str] = {}
    for s in upstream.seen[start:]:
        for cid, text in results_of(s.raw).items():
            assert forms.setdefault(cid, text) == text, cid
    assert len(forms["call_1"]) < len(OUTPUTS[0][1]) / 2
    store = Store(tmp_path / "w.db")
    assert one_session_causes(store) == ["first"] + ["append"] * (len(OUTPUTS) - 1)
    store.close()
