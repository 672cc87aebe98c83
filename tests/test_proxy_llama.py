"""``ctxwright proxy`` in front of a real model server: llama-cpp-python's OpenAI-compatible
server on the bundled SmolLM2-135M (``tests/llamaserver.py``), the official ``openai`` SDK as
the client. What the client received is what the proxy recorded, byte for byte (sha256 of the
raw bytes on both sides), streamed and not, and the session's calls are audited."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import openai
import pytest

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from llamaserver import LlamaServer

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed (make test installs it)"
)
pytestmark = pytest.mark.slow


def test_the_proxy_in_front_of_llama_cpp_server(tmp_path: Path) -> None:
    store = Store(tmp_path / "proxy.db")
    with LlamaServer(tmp_path / "server.log") as srv:
        origin = srv.url.removesuffix("/v1")
        with RecordingProxy.start(ProxyConfig(upstream=origin), store) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-local-NEVERSTORE", max_retries=0)
            msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
            first = client.chat.completions.create(model=srv.model, messages=msgs, max_tokens=8, temperature=0)
            msgs += [
                {"role": "assistant", "content": first.choices[0].message.content or ""},
                {"role": "user", "content": "Again."},
            ]
            chunks = client.chat.completions.create(
                model=srv.model, messages=msgs, max_tokens=8, temperature=0, stream=True
            )
            assert [c for c in chunks]  # the stream arrived through the proxy
            raw_body = json.dumps({"model": srv.model, "messages": msgs, "max_tokens": 4, "stream": True}).encode()
            with (
                httpx.Client(timeout=120) as c,
                c.stream(
                    "POST",
                    proxy.url + "/v1/chat/completions",
                    content=raw_body,
                    headers={"content-type": "application/json", "X-Ctxwright-Session": "raw"},
                ) as r,
            ):
                got = b"".join(r.iter_raw())
            assert r.status_code == 200 and got.startswith(b"data: ")
            assert proxy.recorder.wait_idle(60, at_least=3)
    sessions = {s["grouped_by"]: s for s in proxy_sessions(store)}
    records = proxy_session_requests(store, sessions["continuity"]["id"])
    assert [r["proxy"]["audit"]["cause"] for r in records] == ["first", "append"]
    assert [r["proxy"]["streamed"] for r in records] == [False, True]
    assert records[0]["response"]["choices"][0]["message"]["content"] == first.choices[0].message.content
    (raw,) = ProxyLog(store).exchange_rows(sessions["header"]["id"])
    assert raw["request_sha256"] == hashlib.sha256(raw_body).hexdigest()
    assert raw["response_sha256"] == hashlib.sha256(got).hexdigest() and raw["response_bytes"] == len(got)
    assert b"NEVERSTORE" not in b"".join(p.read_bytes() for p in tmp_path.glob("proxy.db*"))
