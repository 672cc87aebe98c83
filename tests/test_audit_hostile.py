"""``ctxwright audit`` of logged Anthropic and Responses exchanges whose every field may be
hostile: deep nesting, numbers past float range (``1e400``), NaN, a wrong type for every field
(diagnostics, cache_control, ttl ``"999999h"``, usage), a negative or far-future ``sent_at``,
ids of 10 MB. Each bad record is one clear line, every other record is still audited, and
the audit never tracebacks."""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxwright.cli.main import main

sys.path.insert(0, str(Path(__file__).parent))
from test_audit_provider_cache import anthropic_line

HOSTILE_VALUES: list[Any] = [
    None,
    -1,
    10**30,
    1.5,
    True,
    "999999h",
    "",
    [],
    [1, "x", None],
    {},
    {"type": 7},
    "NaN",  # replaced by a bare NaN token below
    "INF",  # replaced by 1e400 below
]


def responses_line(t: float) -> dict[str, Any]:
    body = {
        "model": "gpt-5.4",
        "input": [{"type": "message", "role": "system", "content": [{"type": "input_text", "text": "sys " * 400}]}],
        "prompt_cache_key": "cw-abc",
        "prompt_cache_retention": "24h",
    }
    response = {
        "id": "resp_1",
        "output": [],
        "usage": {"input_tokens": 2000, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 1024}},
        "prompt_cache_diagnostics": {"reason": "system_changed"},
    }
    return {"request": body, "response": response, "proxy": {"started_at": t}}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a field of ``value`` (dict keys and list indexes), depth first."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    holder = doc
    for p in path[:-1]:
        holder = holder[p]
    holder[path[-1]] = value
    return doc


def _dump(doc: Any) -> str:
    text = json.dumps(doc, allow_nan=True)
    return text.replace('"NaN"', "NaN").replace('"INF"', "1e400")


def _variants() -> Iterator[str]:
    base_a = anthropic_line(1, 1000.0, read=0, write=1900)
    base_a["request"]["system"] = [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    base_r = responses_line(1000.0)
    for base in (base_a, base_r):
        for path in _paths(base):
            for v in HOSTILE_VALUES:
                yield _dump(_set(base, path, v))


def _audit(tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[str]) -> tuple[int, str, str]:
    """The JSON audit (returned) and the text audit (must not traceback either) of ``lines``."""
    log = tmp_path / "log.jsonl"
    log.write_text("".join(line + "\n" for line in lines))
    rc_text = main(["audit", str(log)])
    cap = capsys.readouterr()
    assert rc_text in (0, 1) and "Traceback" not in cap.out + cap.err and "unexpected" not in cap.err, cap.err[-2000:]
    rc = main(["audit", str(log), "--json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_every_field_of_every_record_hostile_never_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = json.dumps(anthropic_line(1, 1000.0, read=0, write=1900))
    variants = list(_variants())
    assert len(variants) > 300
    failures: list[str] = []
    for i in range(0, len(variants), 50):
        chunk = variants[i : i + 50]
        rc, out, err = _audit(tmp_path, capsys, [good, *chunk, good])
        if rc not in (0, 1) or "Traceback" in out + err:
            failures.append(f"rc={rc} {err[-800:]}")
            continue
        doc = json.loads(out)
        assert len(doc["requests"]) >= 2  # the good records are audited whatever lies around them
    assert not failures, failures[:3]


@pytest.mark.parametrize(
    "where",
    ["sent_at_inf", "sent_at_negative", "sent_at_future", "sent_at_nan", "iso_far"],
)
def test_hostile_send_times(tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    a = anthropic_line(1, 1000.0, read=0, write=1900)
    b = anthropic_line(2, 1000.0, read=0, write=1900)
    value: Any = {
        "sent_at_inf": "INF",
        "sent_at_negative": -1e18,
        "sent_at_future": 1e300,
        "sent_at_nan": "NaN",
        "iso_far": "9999-12-31T23:59:59+14:00",
    }[where]
    b["proxy"] = {"started_at": value}
    rc, out, err = _audit(tmp_path, capsys, [_dump(a), _dump(b)])
    assert rc in (0, 1) and "Traceback" not in out + err, err
    assert len(json.loads(out)["requests"]) == 2
    assert not re.search(r"\d{16}", out), "an absurd idle gap was computed from a time that is none"


def test_deep_nesting_and_huge_ids_stay_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(anthropic_line(1, 1000.0, read=0, write=1900))
    deep = '{"request": {"model": "m", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    deep_response = (
        json.dumps(anthropic_line(1, 1000.0, read=0, write=1900))[:-1]
        + ', "x": '
        + '{"a": ' * 50_000
        + "1"
        + "}" * 50_000
        + "}"
    )
    big = anthropic_line(2, 1001.0, read=1900, write=10)
    big["response"]["id"] = "m" * (10 * 1024 * 1024)
    big["response"]["diagnostics"] = {"cache_miss_reason": {"type": "x" * (1024 * 1024)}}
    started = time.monotonic()
    rc, out, err = _audit(tmp_path, capsys, [good, deep, deep_response, json.dumps(big), good])
    assert rc in (0, 1) and "Traceback" not in out + err, err[-2000:]
    doc = json.loads(out)
    assert len(doc["requests"]) >= 2
    assert len(out) < 8 * 1024 * 1024  # a 10 MB id is not copied into the report whole
    assert time.monotonic() - started < 30
