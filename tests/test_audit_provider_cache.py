"""``ctxwright audit LOG`` and ``ctxwright show`` with the providers' own cache reports: each
call's fused cause next to the byte diff, the expiries listed and priced. The log lines are
built by hand in the providers' documented shapes (Anthropic Messages request bodies with
``cache_control`` blocks and ``usage``/``diagnostics`` responses; Responses bodies with
``prompt_cache_key`` and ``input_tokens_details.cached_tokens``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxwright.audit.provider_log import provider_raw, sent_at
from ctxwright.cli.main import main

sys.path.insert(0, str(Path(__file__).parent))

SYSTEM = [{"type": "text", "text": "You are a careful assistant. " * 300, "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read", "description": "read a file", "input_schema": {"type": "object", "properties": {}}}]


def anthropic_line(
    turns: int, t: float, *, read: int, write: int, tools: list[Any] | None = None, reason: str | None = None
) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"question {i}"}]})
        if i < turns - 1:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    response: dict[str, Any] = {
        "id": f"msg_{turns}",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": f"answer {turns - 1}"}],
        "usage": {
            "input_tokens": 8,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 4,
        },
    }
    if reason is not None:
        response["diagnostics"] = {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": write}}
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 512,
        "system": SYSTEM,
        "tools": tools or TOOLS,
        "messages": messages,
    }
    return {"request": body, "response": response, "proxy": {"started_at": t}}


def _log(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    p = tmp_path / "log.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


def test_the_provider_layout_is_read_from_a_logged_exchange() -> None:
    line = anthropic_line(2, 1000.0, read=1800, write=20)
    raw = provider_raw(line, line["request"])
    assert raw is not None and raw["provider"] == "anthropic"
    assert raw["cache"]["ttl"] == "5m" and raw["cache"]["sent_at"] == 1000.0
    assert [b["block"] for b in raw["cache"]["breakpoints"]] == [1, 4]  # system block, the last message block
    assert sent_at({"timestamp": "2026-01-01T00:00:00Z"}) == 1767225600.0
    chat: dict[str, Any] = {"request": {"messages": []}, "response": {"usage": {"prompt_tokens": 3}}}
    assert provider_raw(chat, chat["request"]) is None


def test_audit_of_a_log_lists_expiries_and_fused_causes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    changed_tools = [*TOOLS, {"name": "write", "description": "write", "input_schema": {"type": "object"}}]
    log = _log(
        tmp_path,
        [
            anthropic_line(1, 1000.0, read=0, write=1900),
            anthropic_line(2, 1060.0, read=1900, write=20),
            anthropic_line(3, 1060.0 + 400, read=0, write=1950),  # idle 6m40s: expired
            anthropic_line(4, 1500.0, read=0, write=2000, tools=changed_tools, reason="tools_changed"),
        ],
    )
    assert main(["audit", str(log)]) == 0
    out = capsys.readouterr().out
    assert "provider cache: ttl_expired: bytes identical; idle 6m40s" in out
    assert "longer than its TTL of 5m00s" in out
    assert "provider cache: byte_change: tools_changed: the tools changed" in out
    assert "provider says tools_changed (agrees)" in out
    assert "expiries: 1 (" in out and "request 2: ttl_expired" in out

    assert main(["audit", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    causes = [r["cache"]["cause"] for r in doc["requests"]]
    assert causes == ["first", "hit", "ttl_expired", "byte_change"]
    assert doc["requests"][3]["cache"]["agree"] is True
    assert doc["expiries"]["calls"][0]["index"] == 2
    assert doc["expiries"]["tokens"] > 0


def test_a_log_without_timestamps_gets_no_expiry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [anthropic_line(1, 1000.0, read=0, write=1900), anthropic_line(2, 1400.0, read=0, write=1950)]
    for x in lines:
        del x["proxy"]
    assert main(["audit", str(_log(tmp_path, lines)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["requests"][1]["cache"]["cause"] == "provider_reported"
    assert doc["expiries"]["calls"] == []


def test_responses_routing_key_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def line(n: int, key: str, cached: int, t: float) -> dict[str, Any]:
        body = {
            "model": "gpt-5",
            "instructions": "Be brief. " * 400,
            "prompt_cache_key": key,
            "input": [{"role": "user", "content": f"q{i}"} for i in range(n)],
        }
        resp = {
            "id": f"resp_{n}",
            "object": "response",
            "usage": {"input_tokens": 2100, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": 3},
        }
        return {"request": body, "response": resp, "proxy": {"started_at": t}}

    log = _log(tmp_path, [line(1, "a", 0, 10.0), line(2, "a", 2048, 20.0), line(3, "b", 0, 30.0)])
    assert main(["audit", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["cache"]["cause"] for r in doc["requests"]] == ["first", "hit", "routing_key_changed"]


def test_a_proxy_session_shows_the_same_causes_live(tmp_path: Path) -> None:
    """The live proxy's per-session audits (``proxy/session_audit.py``) fuse each Anthropic
    exchange's report as ``ctxwright audit`` does, and its printed line says the cause."""
    from ctxwright.audit.compare import AuditRequest
    from ctxwright.audit.logs import RecordReader
    from ctxwright.core.tokens import TokenCounter
    from ctxwright.proxy.recorder import format_line
    from ctxwright.proxy.server import Exchange
    from ctxwright.proxy.session_audit import LiveAudits
    from ctxwright.store.sessions import Store

    store = Store(tmp_path / "p.db")
    try:
        audits = LiveAudits(store, TokenCounter())
        reader = RecordReader()
        causes = []
        for i, line in enumerate(
            [
                anthropic_line(1, 1000.0, read=0, write=1900),
                anthropic_line(2, 1060.0, read=1900, write=20),
                anthropic_line(3, 1460.0, read=0, write=1950),
            ]
        ):
            (req,) = list(reader.read_record(line, i + 1))
            assert isinstance(req, AuditRequest)
            row = audits.add("sess", req, new=i == 0)
            assert audits.cache is not None
            causes.append(audits.cache["cause"])
        assert causes == ["first", "hit", "ttl_expired"]
        fields = {f: None for f in Exchange.__dataclass_fields__}
        ex = Exchange(**{**fields, "status": 200, "total_ms": 12.0, "outcome": "complete"})  # type: ignore[arg-type]
        printed = format_line("sess", 2, ex, row, None, audits.cache)
        assert "provider cache: ttl_expired: bytes identical; idle 6m40s" in printed
    finally:
        store.close()
