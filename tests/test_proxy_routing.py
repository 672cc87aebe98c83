"""One proxy, several providers: ``ctxwright proxy`` routes Anthropic Messages to the Anthropic
upstream and OpenAI chat completions and Responses to the OpenAI one, each call recorded with
the upstream it went to.

Real parts: the Anthropic simulator (``tests/providers/anthropic_sim.py``) and the loopback
provider (``tests/proxy_upstream.py``) as two upstreams on real HTTP, the official ``anthropic``
and ``openai`` SDKs as clients of one proxy, the CLI as a subprocess (with ``--workers 2``: the
routing reaches the forked workers)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pytest

from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import DEFAULT_UPSTREAMS, ProxyConfig, provider_of
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))
from ports import free_port, wait_listening
from providers.anthropic_sim import AnthropicSim
from proxy_upstream import Upstream

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC), "NO_PROXY": "127.0.0.1"}
KEY = "sk-test-routing-0123456789"


@pytest.mark.parametrize(
    "path, headers, provider",
    [
        (b"/v1/messages", [], "anthropic"),
        (b"/v1/messages?beta=true", [], "anthropic"),  # Claude Code's
        (b"/v1/messages/count_tokens", [], "anthropic"),
        (b"/v1/messages/batches/msgbatch_1", [], "anthropic"),
        (b"/v1/chat/completions", [], "openai"),
        (b"/v1/responses", [], "openai"),
        (b"/v1/messagesx", [], "openai"),  # not the /v1/messages segment
        (b"/v1/threads/thread_1/messages", [], "openai"),  # OpenAI's Assistants messages
        (b"/v1/models", [], "openai"),
        (b"/v1/models", [(b"Anthropic-Version", b"2023-06-01")], "anthropic"),  # an Anthropic SDK's request
    ],
)
def test_a_request_goes_to_the_provider_its_path_names(
    path: bytes, headers: list[tuple[bytes, bytes]], provider: str
) -> None:
    assert provider_of(path, headers) == provider


def test_one_upstream_alone_takes_every_path_and_per_provider_ones_override_it() -> None:
    alone = ProxyConfig(upstream="http://one:1")
    assert alone.upstreams == {"anthropic": "http://one:1", "openai": "http://one:1"}
    assert alone.label == "http://one:1"
    both = ProxyConfig(upstream="http://one:1", upstreams={"anthropic": "http://a:2"})
    assert both.upstreams == {"anthropic": "http://a:2", "openai": "http://one:1"}
    assert both.label == "anthropic http://a:2, openai http://one:1"
    split = ProxyConfig(upstreams=DEFAULT_UPSTREAMS)
    assert split.upstream is None and split.upstream_for("openai") == "https://api.openai.com"


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({}, "give an upstream"),
        ({"upstreams": {"openai": "http://o:1"}}, "no upstream for anthropic: give --anthropic-upstream"),
        ({"upstreams": {"gemini": "http://g:1", "openai": "http://o:1"}}, "unknown provider 'gemini'"),
        ({"upstreams": {"anthropic": "api.anthropic.com", "openai": "http://o:1"}}, "--anthropic-upstream 'api."),
    ],
)
def test_a_config_without_a_usable_upstream_is_refused_in_one_line(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError) as err:
        ProxyConfig(**kwargs)  # type: ignore[arg-type]  # the bad values are the point
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_flags_default_to_each_providers_own_host() -> None:
    from ctxwright.cli.proxy import proxy_upstreams

    def flags(**given: str | None) -> argparse.Namespace:
        base: dict[str, str | None] = {"upstream": None, "anthropic_upstream": None, "openai_upstream": None}
        return argparse.Namespace(**{**base, **given})

    assert proxy_upstreams(flags()) == (None, DEFAULT_UPSTREAMS, [])
    assert proxy_upstreams(flags(upstream="http://h:1")) == ("http://h:1", {}, [])
    upstream, upstreams, notes = proxy_upstreams(flags(openai_upstream="http://o:1/v1"))
    assert upstream is None and upstreams == {"anthropic": DEFAULT_UPSTREAMS["anthropic"], "openai": "http://o:1"}
    assert notes == [
        "--openai-upstream http://o:1/v1 ends in /v1, the path clients send themselves: forwarding to "
        "http://o:1, so /v1/chat/completions goes to http://o:1/v1/chat/completions"
    ]


def test_one_proxy_serves_both_sdks_each_reaching_its_own_upstream(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    lines: list[str] = []
    with AnthropicSim() as asim, Upstream().serve() as oai:
        config = ProxyConfig(upstreams={"anthropic": asim.url, "openai": oai.url})
        with RecordingProxy.start(config, store, printer=lines.append) as proxy:
            claude = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
            reply = claude.messages.create(
                model="claude-sonnet-4-5", max_tokens=16, messages=[{"role": "user", "content": "hi anthropic"}]
            )
            assert reply.content[0].type == "text"
            gpt = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
            chat = gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi chat"}])
            assert chat.choices[0].message.content == oai.text
            resp = gpt.responses.create(model="gpt-4o", input="hi responses")
            assert resp.output_text == oai.text
            assert proxy.recorder.wait_idle(60, at_least=3)
    # each provider's calls reached its own upstream, and no other
    assert [r["messages"][0]["content"] for r in asim.requests] == ["hi anthropic"]
    assert [s.path for s in oai.seen] == ["/v1/chat/completions", "/v1/responses"]
    # each recorded, in a session stored with the upstream it went to
    sessions = {s["api"]: s for s in proxy_sessions(store)}
    assert set(sessions) == {"anthropic_messages", "openai_chat", "openai_responses"}
    assert sessions["anthropic_messages"]["upstream"] == asim.url
    assert sessions["openai_chat"]["upstream"] == sessions["openai_responses"]["upstream"] == oai.url
    for s in sessions.values():
        (call,) = proxy_session_requests(store, s["id"])
        assert call["proxy"]["status"] == 200
    assert len(lines) == 3


def test_an_unreachable_provider_is_named_by_its_own_upstream(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with Upstream().serve() as oai:
        config = ProxyConfig(upstreams={"anthropic": dead, "openai": oai.url}, connect_timeout=5)
        with RecordingProxy.start(config, Store(tmp_path / "d.db"), printer=None) as proxy:
            claude = anthropic.Anthropic(base_url=proxy.url, api_key=KEY, max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as err:
                claude.messages.create(
                    model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "q"}]
                )
            assert err.value.status_code == 502 and f"could not connect to the upstream {dead} " in str(err.value)
            gpt = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
            assert gpt.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}]).choices


@pytest.mark.slow
def test_the_cli_with_workers_routes_each_provider_to_its_upstream(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    port = free_port()
    with Upstream().serve() as ant, Upstream().serve() as oai:
        cmd = [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), "proxy", "--port", str(port),
               "--anthropic-upstream", ant.url, "--openai-upstream", oai.url + "/v1", "--workers", "2"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        try:
            wait_listening(port, proc, 60, "the proxy")
            base = f"http://127.0.0.1:{port}"
            claude = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
            claude.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "a"}])
            gpt = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
            gpt.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "o"}])
        finally:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [s.path for s in ant.seen] == ["/v1/messages"]
    assert [s.path for s in oai.seen] == ["/v1/chat/completions"]  # the /v1 given was not doubled
    assert f"-> anthropic {ant.url}, openai {oai.url}," in out
    assert f"--openai-upstream {oai.url}/v1 ends in /v1" in err
    listed = subprocess.run(
        [sys.executable, "-m", "ctxwright.cli.main", "--db", str(db), "proxy", "--list", "--json"],
        capture_output=True, text=True, env=ENV, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert sorted((r["api"], r["upstream"]) for r in rows) == [
        ("anthropic_messages", ant.url),
        ("openai_chat", oai.url),
    ]
