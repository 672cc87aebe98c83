"""The fused cache verdict (``cache/verdict.py``): one cause per call from the byte audit and
the provider's report, in the providers' documented usage shapes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwright.cache.reported import reported
from ctxwright.cache.verdict import CAUSES, LOOKBACK_BLOCKS, ByteEvidence, fuse


def anthropic_raw(
    *,
    read: int,
    write: int = 0,
    uncached: int = 10,
    sent_at: float = 1000.0,
    ttl_s: float = 300.0,
    reason: str | None = None,
    diagnosed: bool = False,
    breakpoints: list[tuple[int, int]] | None = None,
    minimum: int | None = 1024,
) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "provider": "anthropic",
        "response_id": "msg_1",
        "usage": {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
            "output_tokens": 5,
        },
        "cache": {
            "ttl": "5m",
            "ttl_s": ttl_s,
            "breakpoints": [
                {"block": b, "tokens": t} for b, t in ([(1, 2000), (5, 3000)] if breakpoints is None else breakpoints)
            ],
            "minimum_tokens": minimum,
            "routing_key": None,
            "prefix_tokens": 2000,
            "sent_at": sent_at,
        },
    }
    if reason is not None:
        raw["diagnostics"] = {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": 3000}}
    elif diagnosed:
        raw["diagnostics"] = {"cache_miss_reason": None}
    return raw


def responses_raw(*, cached: int, total: int = 4000, key: str = "k1", sent_at: float = 1000.0) -> dict[str, Any]:
    return {
        "provider": "openai-responses",
        "response_id": "resp_1",
        "usage": {"input_tokens": total, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": 5},
        "cache": {
            "ttl": "in_memory",
            "ttl_s": 600.0,
            "breakpoints": [],
            "minimum_tokens": 1024,
            "routing_key": key,
            "prefix_tokens": 2000,
            "sent_at": sent_at,
        },
    }


APPEND = ByteEvidence("append", reusable_prefix_tokens=3000)
PREV = reported(anthropic_raw(read=0, write=3000, sent_at=1000.0))

CASES: list[tuple[str, ByteEvidence, dict[str, Any], dict[str, Any] | None, str, bool | None]] = [
    ("first", ByteEvidence("first", 0), anthropic_raw(read=0, write=3000), None, "first", None),
    ("hit", APPEND, anthropic_raw(read=3000, sent_at=1060.0), anthropic_raw(read=0, write=3000), "hit", None),
    (
        "tools changed, provider agrees",
        ByteEvidence("tools_changed", 3000, where="tools tools @42", offset=42),
        anthropic_raw(read=0, write=3000, reason="tools_changed", sent_at=1060.0),
        anthropic_raw(read=0, write=3000),
        "byte_change",
        True,
    ),
    (
        "system changed, provider says messages",
        ByteEvidence("system_changed", 3000, where="msg#0 content @7", offset=7, message_index=0, field="content"),
        anthropic_raw(read=0, write=3000, reason="messages_changed", sent_at=1060.0),
        anthropic_raw(read=0, write=3000),
        "byte_change",
        False,
    ),
    (
        "history edited, provider silent",
        ByteEvidence("history_edited", 2000, where="msg#3 content @5", offset=5, message_index=3, field="content"),
        anthropic_raw(read=2000, write=1000, sent_at=1060.0),
        anthropic_raw(read=0, write=3000),
        "byte_change",
        None,
    ),
    (
        "expired",
        APPEND,
        anthropic_raw(read=0, write=3000, sent_at=1000.0 + 360),
        anthropic_raw(read=0, write=3000),
        "ttl_expired",
        None,
    ),
    (
        "expired, provider says messages changed",
        APPEND,
        anthropic_raw(read=0, write=3000, sent_at=1000.0 + 4000, reason="messages_changed"),
        anthropic_raw(read=0, write=3000),
        "ttl_expired",
        False,
    ),
    (
        "below minimum",
        ByteEvidence("append", 900),
        anthropic_raw(read=0, write=0, uncached=900, sent_at=1010.0, breakpoints=[(1, 900)], minimum=1024),
        anthropic_raw(read=0, write=0, uncached=900, breakpoints=[(1, 900)], minimum=1024),
        "below_minimum",
        None,
    ),
    (
        "lookback",
        ByteEvidence("append", 3000),
        anthropic_raw(read=0, write=3000, sent_at=1010.0, breakpoints=[(1, 100), (5 + LOOKBACK_BLOCKS + 1, 4000)]),
        anthropic_raw(read=0, write=3000, breakpoints=[(1, 100), (5, 3000)]),
        "lookback_exceeded",
        None,
    ),
    (
        "no breakpoint",
        APPEND,
        anthropic_raw(read=0, write=0, uncached=3010, sent_at=1010.0, breakpoints=[]),
        anthropic_raw(read=0, write=0, uncached=3000, breakpoints=[]),
        "no_breakpoint",
        None,
    ),
    (
        "routing key",
        ByteEvidence("append", 3000),
        responses_raw(cached=0, key="k2", sent_at=1010.0),
        responses_raw(cached=0, key="k1"),
        "routing_key_changed",
        None,
    ),
    (
        "provider reported",
        APPEND,
        anthropic_raw(read=0, write=3000, sent_at=1010.0, reason="messages_changed"),
        anthropic_raw(read=0, write=3000),
        "provider_reported",
        False,
    ),
    (
        "provider read less, no reason",
        APPEND,
        responses_raw(cached=0, sent_at=1010.0),
        responses_raw(cached=0),
        "provider_reported",
        None,
    ),
    (
        "responses hit in 128-token steps",
        ByteEvidence("append", 3050),
        responses_raw(cached=2944, sent_at=1010.0),
        responses_raw(cached=0),
        "hit",
        None,
    ),
]


@pytest.mark.parametrize(("name", "byte", "now", "prev", "cause", "agree"), CASES, ids=[c[0] for c in CASES])
def test_each_cause(
    name: str, byte: ByteEvidence, now: dict[str, Any], prev: dict[str, Any] | None, cause: str, agree: bool | None
) -> None:
    v = fuse(byte, reported(now), reported(prev) if prev is not None else None)
    assert v.cause == cause, v
    assert v.agree is agree, v
    assert v.cause in CAUSES
    assert v.evidence


def test_evidence_names_the_gap_and_the_ttl_and_the_segment() -> None:
    v = fuse(APPEND, reported(anthropic_raw(read=0, write=3000, sent_at=1360.0)), PREV)
    assert v.details["gap_s"] == 360.0 and v.details["ttl_s"] == 300.0
    assert "6m00s" in v.evidence and "5m00s" in v.evidence
    b = ByteEvidence("tools_changed", 3000, where="tools tools @42", offset=42)
    v = fuse(b, reported(anthropic_raw(read=0, write=3000, reason="tools_changed")), PREV)
    assert v.details["segment"] == "tools" and v.details["offset"] == 42
    assert "tools @42" in v.evidence and "(agrees)" in v.evidence


def test_a_call_without_the_provider_layout_is_judged_on_bytes_alone() -> None:
    assert fuse(APPEND, reported({}), reported({})).cause == "hit"
    assert fuse(ByteEvidence("compaction", 10, where="msg#2 content @0"), reported({}), None).cause == "byte_change"


@given(
    read=st.integers(0, 5000),
    reusable=st.integers(0, 5000),
    gap=st.floats(0, 10_000, allow_nan=False),
    ttl=st.sampled_from([300.0, 3600.0]),
)
def test_identical_bytes_with_a_full_read_are_never_blamed(read: int, reusable: int, gap: float, ttl: float) -> None:
    """A call that read what it could is a hit, whatever the gap; one that read nothing after
    a gap longer than the TTL is ``ttl_expired`` (the rule the expiry report prices)."""
    prev = reported(anthropic_raw(read=0, write=reusable, breakpoints=[(3, reusable)], minimum=0, ttl_s=ttl))
    now = reported(
        anthropic_raw(read=read, write=0, sent_at=1000.0 + gap, breakpoints=[(3, reusable)], minimum=0, ttl_s=ttl)
    )
    v = fuse(ByteEvidence("append", reusable), now, prev)
    if read + max(128, reusable * 0.05) >= reusable:
        assert v.cause == "hit"
    elif gap > ttl:
        assert v.cause == "ttl_expired"
    else:
        assert v.cause == "provider_reported"


@given(seg=st.sampled_from(["system", "tools", "messages"]), said=st.sampled_from(["system", "tools", "messages"]))
def test_agreement_is_segment_equality(seg: str, said: str) -> None:
    cause = {"system": "system_changed", "tools": "tools_changed", "messages": "history_edited"}[seg]
    byte = ByteEvidence(cause, 100, where="x", offset=1, message_index=None if seg == "tools" else 2)
    v = fuse(byte, reported(anthropic_raw(read=0, write=100, reason=f"{said}_changed")), PREV)
    assert v.cause == "byte_change"
    assert v.agree is (seg == said)
