"""``provider_switched``: a gateway (OpenRouter) that serves one model name by another provider
than the previous call -- the ``provider`` field of its answer changes -- misses the cache
whatever the bytes, because each provider keeps its own cache.

Real parts: a small gateway on real HTTP that answers OpenAI chat completions the way
OpenRouter does (``provider`` at the top of the answer and of every stream chunk, the prompt's
cached tokens in ``prompt_tokens_details``) and keeps one prompt cache per provider; the proxy in
front of it; the official ``openai`` SDK as the client."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxwright.cache.reported import reported
from ctxwright.cache.verdict import CAUSES, ByteEvidence, fuse
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig, ProxyThread
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))


def _raw(served_by: str, cached: int, sent_at: float) -> dict[str, Any]:
    return {
        "provider": "openai",
        "served_by": served_by,
        "usage": {"prompt_tokens": 5000, "prompt_tokens_details": {"cached_tokens": cached}, "completion_tokens": 5},
        "cache": {"ttl": None, "ttl_s": None, "breakpoints": [], "routing_key": None, "sent_at": sent_at},
    }


def test_a_miss_after_the_gateway_switched_provider_is_provider_switched() -> None:
    append = ByteEvidence(cause="append", reusable_prefix_tokens=4800)
    prev = reported(_raw("Anthropic", 0, 1000.0))
    switched = fuse(append, reported(_raw("Google", 0, 1010.0)), prev)
    assert switched.cause == "provider_switched" and "provider_switched" in CAUSES
    assert switched.details == {"previous_provider": "Anthropic", "provider": "Google"}
    assert "'Google', the previous one by 'Anthropic'" in switched.evidence
    # the same provider reading the prefix is a hit; a switch that still read it is no miss
    assert fuse(append, reported(_raw("Anthropic", 4800, 1010.0)), prev).cause == "hit"
    assert fuse(append, reported(_raw("Google", 4800, 1010.0)), prev).cause == "hit"
    # the same provider missing is not a switch
    assert fuse(append, reported(_raw("Anthropic", 0, 1010.0)), prev).cause == "provider_reported"


class Gateway:
    """OpenRouter-like: each call is served by the next provider of ``plan``, each provider
    with its own cache of the prompts it served (a prompt's cached tokens are those of the
    longest earlier prompt of that provider it starts with, 4 characters a token)."""

    def __init__(self, plan: list[str]) -> None:
        self.plan = plan
        self.seen: dict[str, list[str]] = {}
        self.lock = threading.Lock()
        self.thread = ProxyThread(Starlette(routes=[Route("/api/v1/chat/completions", self.chat, methods=["POST"])]))

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        prompt = json.dumps(body["messages"], sort_keys=True)[:-1]  # without the list's "]": a prefix of the next
        with self.lock:
            n = sum(len(v) for v in self.seen.values())
            provider = self.plan[n % len(self.plan)]
            earlier = self.seen.setdefault(provider, [])
            cached = max((len(p) for p in earlier if prompt.startswith(p)), default=0) // 4
            earlier.append(prompt)
        usage = {
            "prompt_tokens": len(prompt) // 4,
            "completion_tokens": 2,
            "total_tokens": len(prompt) // 4 + 2,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        base = {"id": f"gen-{n}", "provider": provider, "model": body["model"], "created": int(time.time())}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "ok"}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse({**base, "object": "chat.completion", "choices": [choice], "usage": usage})

        def chunks() -> Any:
            for delta, usage_part in (({"role": "assistant", "content": "ok"}, None), ({}, usage)):
                chunk = {**base, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
                if usage_part is not None:
                    chunk["usage"] = usage_part
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")


def test_the_proxy_names_the_switch_of_a_gateways_provider(tmp_path: Path) -> None:
    store = Store(tmp_path / "g.db")
    lines: list[str] = []
    gateway = Gateway(["Anthropic", "Anthropic", "Google"])
    with (
        gateway.thread,
        RecordingProxy.start(ProxyConfig(upstream=gateway.thread.url + "/api"), store, printer=lines.append) as p,
    ):
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-or-test", max_retries=0)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": "Answer from the house rules only. " * 400},
            {"role": "user", "content": "Which rule?"},
        ]
        for i in range(3):
            create: Any = client.chat.completions.create
            kw: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if i == 2 else {}
            reply = create(model="anthropic/claude-sonnet-4.5", messages=messages, **kw)
            if i == 2:
                assert "".join(c.choices[0].delta.content or "" for c in reply if c.choices) == "ok"
            messages = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": f"and {i}?"}]
        assert p.recorder.wait_idle(60, at_least=3)
    (session,) = proxy_sessions(store)
    caches = [r["proxy"]["audit"].get("cache") or {} for r in proxy_session_requests(store, session["id"])]
    assert [c.get("cause") for c in caches] == ["first", "hit", "provider_switched"], caches
    assert caches[2]["previous_provider"] == "Anthropic" and caches[2]["provider"] == "Google"
    assert "provider cache: provider_switched: bytes identical" in lines[2] and "'Google'" in lines[2]
