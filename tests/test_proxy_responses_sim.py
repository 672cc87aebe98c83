"""``ctxwright proxy`` in front of the Responses simulator (``tests/providers/responses_sim.py``),
the official ``openai`` SDK's ``responses.create`` as the client: the relay passes OpenAI's
caching fields through untouched, records each exchange in the session its
``prompt_cache_key`` names, and reads the provider's own usage (``cached_tokens`` inside
``input_tokens``) into its audit."""

from __future__ import annotations

import sys
from pathlib import Path

import openai
import pytest

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))

from providers.responses_sim import ResponsesSim, text

INSTRUCTIONS = "Answer from the house rules only. " * 160  # ~5,400 bytes: cached past 1,024 tokens


@pytest.mark.parametrize("stream", [False, True])
def test_responses_through_the_proxy_are_recorded_with_the_providers_cached_tokens(
    tmp_path: Path, stream: bool
) -> None:
    store = Store(tmp_path / "p.db")
    lines: list[str] = []
    with ResponsesSim(respond=lambda b: [text("Rule 3 applies.")]) as sim:
        with RecordingProxy.start(ProxyConfig(upstream=sim.url), store, printer=lines.append) as proxy:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-test-proxy", max_retries=0)
            items: list[dict[str, str]] = [{"role": "user", "content": "Which rule?"}]
            for _ in range(3):
                kw = {
                    "model": "gpt-5.5",
                    "instructions": INSTRUCTIONS,
                    "input": items,
                    "prompt_cache_key": "cw-proxy-1",
                    "prompt_cache_retention": "24h",
                    "store": False,
                }
                if stream:
                    with client.responses.stream(**kw) as events:  # type: ignore[call-overload]
                        for _ev in events:
                            pass
                        answer = events.get_final_response().output_text
                else:
                    answer = client.responses.create(**kw).output_text  # type: ignore[call-overload]
                assert answer == "Rule 3 applies."
                items = [*items, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
            assert proxy.recorder.wait_idle(60, at_least=3), (proxy.recorder.recorded, proxy.recorder.failures)
        # the upstream received OpenAI's caching fields as the client sent them
        assert all(q["prompt_cache_key"] == "cw-proxy-1" and q["prompt_cache_retention"] == "24h" for q in sim.requests)
        assert not sim.refused
        cached = [r["usage"]["input_tokens_details"]["cached_tokens"] for r in sim.responses]
    assert cached[0] == 0 and cached[1] > 0 and cached[2] >= cached[1]  # in 128-token steps
    (session,) = proxy_sessions(store)
    assert session["grouped_by"] == "prompt_cache_key" and session["group_key"] == "cw-proxy-1"
    records = proxy_session_requests(store, session["id"])
    assert [r["proxy"]["audit"]["cached_tokens"] for r in records] == cached  # the provider's own count
    assert len(lines) == 3
