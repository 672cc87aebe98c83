"""The audit of a log recorded against a real OpenAI-compatible server: llama-cpp-python's
own ``python -m llama_cpp.server`` with the bundled SmolLM2-135M, two conversations
interleaved in one log, and a tool_choice switch -- the log a new user brings."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from ctxwright.cli.main import main
from llamaserver import LlamaServer

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed (make test installs it)"
)
pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city today.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python -m llama_cpp.server`` with the chat format that renders tools (``tests/llamaserver.py``)."""
    with LlamaServer(tmp_path_factory.mktemp("server") / "server.log") as srv:
        yield srv.url


def chat(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return dict(json.loads(r.read()))


def test_audit_of_a_real_server_log(server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    a_sys = {"role": "system", "content": "You answer weather questions with the get_weather tool."}
    b_sys = {"role": "system", "content": "You are a terse counting assistant."}
    a_user, b_user = {"role": "user", "content": "Weather in Oslo?"}, {"role": "user", "content": "Count to three."}
    a_more = [{"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "And tomorrow?"}]
    b_more = [{"role": "assistant", "content": "1 2 3"}, {"role": "user", "content": "Again."}]
    common = {"model": LlamaServer.model, "max_tokens": 4, "temperature": 0}
    bodies = [
        {**common, "messages": [a_sys, a_user], "tools": [WEATHER], "tool_choice": "auto"},
        {**common, "messages": [b_sys, b_user]},
        {**common, "messages": [a_sys, a_user, *a_more], "tools": [WEATHER], "tool_choice": "none"},
        {**common, "messages": [b_sys, b_user, *b_more]},
        {**common, "messages": [a_sys, a_user, *a_more, *a_more], "tools": [WEATHER], "tool_choice": "none"},
    ]
    log = tmp_path / "server.jsonl"
    responses = []
    with log.open("w") as f:
        for body in bodies:
            responses.append(chat(server, body))
            f.write(json.dumps({"request": body, "response": responses[-1]}) + "\n")

    # the server renders tool_choice into the prompt: the first request's messages again with
    # tool_choice "none" instead of "auto", and the tool list is gone from its system message.
    # (Only one "auto" call: llama.cpp samples it under a grammar, about 30 s on 2 cores.)
    again = chat(server, {**bodies[0], "tool_choice": "none"})
    assert again["usage"]["prompt_tokens"] < responses[0]["usage"]["prompt_tokens"]
    # and it reports usage without a cached-token count
    assert "prompt_tokens_details" not in responses[0]["usage"]

    assert main(["audit", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["requests"]
    assert [r["cause"] for r in rows] == ["first", "first", "options_changed", "append", "append"]
    assert [r["conversation"] for r in rows] == [0, 1, 0, 1, 0]
    assert rows[2]["options_changed"] == ["tool_choice"]
    assert [r["prompt_tokens"] for r in rows] == [r["usage"]["prompt_tokens"] for r in responses]
    s = doc["summary"]
    assert (s["conversations"], s["usage_known"], s["cached_known"], s["cached_tokens"]) == (2, 5, 0, None)
    assert [c["requests"] for c in doc["conversations"]] == [3, 2]

    assert main(["audit", str(log)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the summary lines wrap at the console's width
    assert "no usage" not in out and "the usage of 5 request(s) has no cached-token count" in out
    assert "options: tool_choice" in out and '"auto" → "none"' in out
    assert "5 request(s) in 2 conversations" in out
