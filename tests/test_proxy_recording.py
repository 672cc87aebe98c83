"""What ``ctxwright proxy`` writes, probed as an attacker and as a full disk would: a key in the
query string never reaches the database file, a failed write is kept in a recovery file (without
the key) and recorded in its place once the store takes it again, said on stderr rather than among
the per-call lines, and the line printed per call says what ``ctxwright audit --proxy-session`` says of that call.

Real parts: the official ``openai`` SDK as the client, the relay on uvicorn, the loopback
upstream (``tests/proxy_upstream.py``), a real SQLite file (the full disk is SQLite's own
``database or disk is full``, from ``PRAGMA max_page_count``).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ctxwright.cli.main import main
from ctxwright.core.redact import redact_query
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.report.data import from_proxy
from ctxwright.store.sessions import Store

sys.path.insert(0, str(Path(__file__).parent))

KEY = "sk-proj-NEVERSTORE-0123456789abcdef"
#: ``session #call status time  cause  cached C ÷ reusable R tok`` (recorder.format_line)
LINE = re.compile(
    r"^(?P<sid>px-\w+) #(?P<k>\d+)\s.*?ms\s+(?P<cause>\w+)\s+cached (?P<cached>\S+) ÷ reusable (?P<reusable>[\d,]+) tok"
)


def _db_bytes(store: Store) -> bytes:
    return b"".join(Path(f"{store.path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{store.path}{s}").exists())


def _idle(proxy: RecordingProxy, n: int) -> None:
    """Wait until ``n`` exchanges in all were handled (recorded, spooled or lost)."""
    assert proxy.recorder.wait_idle(60, at_least=n), (proxy.recorder.recorded, proxy.recorder.summary())


# -- a key in the query string -----------------------------------------------------------------

#: hostile spellings of a key in a query: each must be relayed as sent and stored masked
QUERY_SECRETS = {
    "key": "QSECRET-key-1",
    "api-key": "QSECRET-apikey-2",
    "API_KEY": "QSECRET-upper-3",
    "access_token": "QSECRET-access-4",
    "apikey": "QSECRET-plain-5",
    "x-api-key": "QSECRET-xapi-6",
    "token": "QSECRET-token-7",
    "k%65y": "QSECRET-encoded-8",  # the server decodes the name: it is a "key"
}


def test_a_key_in_the_query_string_is_relayed_but_never_stored(upstream, tmp_path):
    store = Store(tmp_path / "q.db")
    lines: list[str] = []
    with RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=lines.append) as proxy:
        # Google's OpenAI-compatible endpoint takes the key as ?key=: the SDK's default_query sends it so
        client = openai.OpenAI(
            base_url=proxy.url + "/v1", api_key=KEY, default_query={"key": "QSECRET-sdk-0"}, max_retries=0
        )
        msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
        client.chat.completions.create(model="m", messages=msgs)
        query = "&".join(f"{name}={value}" for name, value in QUERY_SECRETS.items())
        stray = "a=1?key=QSECRET-stray-9;session=QSECRET-semi-10"  # a second "?" and a ";" separator
        body = json.dumps({"model": "m", "messages": msgs}).encode()
        auth = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
        before = len(upstream.seen)
        for target in (f"/v1/chat/completions?{query}", f"/v1/chat/completions?{stray}", f"/v1/models?{query}"):
            method = "GET" if "models" in target else "POST"
            r = httpx.request(method, proxy.url + target, content=b"" if method == "GET" else body, headers=auth)
            assert r.status_code == 200, r.text
        _idle(proxy, 4)
        seen = [s.path for s in upstream.seen[before:]]
    # relayed exactly as sent
    assert all(value in seen[0] for value in QUERY_SECRETS.values()) and "QSECRET-stray-9" in seen[1]
    # stored and printed nowhere
    on_disk = _db_bytes(store)
    assert b"QSECRET" not in on_disk, re.findall(rb"QSECRET[\w-]*", on_disk)
    assert not any("QSECRET" in line for line in lines)
    # what is stored still says which parameters were sent
    paths = [r["proxy"]["path"] for s in proxy_sessions(store) for r in proxy_session_requests(store, s["id"])]
    assert "/v1/chat/completions?key=***" in paths
    assert any(p.startswith("/v1/chat/completions?key=***&api-key=***&API_KEY=***&access_token=***") for p in paths)


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/v1/messages", "/v1/messages"),
        ("/v1/x?api-version=2024-10-21&api-key=AZ", "/v1/x?api-version=2024-10-21&api-key=***"),
        ("/v1/x?key=", "/v1/x?key="),  # nothing to hide
        ('/v1/x?key=SEC"RET x&b=2', "/v1/x?key=***&b=2"),  # a quote or a space does not end the value
        ("/v1/x?Key=A;b=1#token=B", "/v1/x?Key=***;b=1#token=***"),
        ("/v1/x?key=***", "/v1/x?key=***"),  # idempotent
    ],
)
def test_redact_query(path: str, expected: str) -> None:
    assert redact_query(path) == expected


# -- a failed write ----------------------------------------------------------------------------


def test_a_failed_write_is_kept_and_recorded_in_order_once_the_store_takes_it(upstream, tmp_path):
    store = Store(tmp_path / "full.db")
    lines: list[str] = []
    warned: list[str] = []
    header = {"X-Ctxwright-Session": "disk"}
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]
    config = ProxyConfig(upstream=upstream.url)
    with RecordingProxy.start(config, store, printer=lines.append, warn=warned.append) as proxy:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
        client.chat.completions.create(model="m", messages=msgs, extra_headers=header)
        _idle(proxy, 1)
        # the disk is full: SQLite refuses to grow the file past the pages it has
        store.db.execute("PRAGMA max_page_count = 1")
        big = [*msgs, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "x" * 400_000}]
        keyed = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0, default_query={"key": "QKEY-9"})
        keyed.chat.completions.create(model="m", messages=big, extra_headers=header)  # relayed all the same
        _idle(proxy, 2)
        assert (proxy.recorder.recorded, proxy.recorder.spooled, proxy.recorder.lost) == (1, 1, 0)
        (spooled,) = (tmp_path / "ctxwright-recovery").glob("proxy-*.jsonl")
        assert "QKEY-9" not in spooled.read_text() and "key=***" in spooled.read_text()
        store.db.execute("PRAGMA max_page_count = 1073741823")  # space again
        last = [*big, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "after"}]
        client.chat.completions.create(model="m", messages=last, extra_headers=header)
        _idle(proxy, 3)
        deadline = time.monotonic() + 60  # the store is tried again 1 s after it failed
        while proxy.recorder.recorded < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [w for w in warned if "could not record" in w and "database or disk is full" in w], warned
    assert not any("could not record" in line for line in lines)  # not among the per-call lines
    assert proxy.recorder.unrecorded == 0 and not spooled.exists(), (warned, proxy.recorder.summary())
    (session,) = proxy_sessions(store)
    records = proxy_session_requests(store, session["id"])
    assert [r["proxy"]["call_index"] for r in records] == [0, 1, 2]  # the kept call in its place
    assert [len(r["request"]["messages"]) for r in records] == [2, 4, 6]
    assert records[1]["proxy"]["path"] == "/v1/chat/completions?key=***"
    assert [m["k"] for m in map(LINE.match, lines) if m] == ["0", "1", "2"]
    # the live audit is the offline one, the kept call included
    assert [r["proxy"]["audit"]["cause"] for r in records] == ["first", "append", "append"]


# -- the live line and the offline audit -------------------------------------------------------


def _live(lines: list[str]) -> dict[tuple[str, int], tuple[str, str, int]]:
    out = {}
    for line in lines:
        m = LINE.match(line)
        if m:
            out[m["sid"], int(m["k"])] = (m["cause"], m["cached"], int(m["reusable"].replace(",", "")))
    return out


def _offline(store: Store, sid: str, capsys: pytest.CaptureFixture[str]) -> dict[tuple[str, int], tuple[str, str, int]]:
    capsys.readouterr()
    assert main(["audit", "--proxy-session", sid, "--json", "--db", str(store.path)]) == 0
    rows = json.loads(capsys.readouterr().out)["requests"]
    calls = [r["proxy"]["call_index"] for r in proxy_session_requests(store, sid)]
    assert len(rows) == len(calls)
    return {
        (sid, k): (
            r["cause"],
            "?" if r["cached_tokens"] is None else f"{r['cached_tokens']:,}",
            r["reusable_prefix_tokens"],
        )
        for k, r in zip(calls, rows, strict=True)
    }


def test_the_live_line_and_the_offline_audit_agree_on_every_call(upstream, tmp_path, capsys):
    """Hostile probe: two sessions opening with the same system prompt, changed options, usage
    without a cached count, a stream without usage, a restart of the proxy, and a proxy that
    keeps one session's audit in memory at a time. Each call's cause, cached and reusable
    tokens, as printed live, stored with the call, shown by the report and given by
    ``ctxwright audit --proxy-session``, are the same."""
    store = Store(tmp_path / "agree.db")
    system = "You are a careful assistant who answers in one short sentence. " * 12
    hist = {n: [{"role": "system", "content": system}, {"role": "user", "content": f"task {n}"}] for n in "ab"}
    lines: list[str] = []
    handled = 0

    def call(proxy: RecordingProxy, n: str, behaviour: str = "", stream: bool = False, **options: Any) -> None:
        nonlocal handled
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=KEY, max_retries=0)
        headers = {"X-Ctxwright-Session": n, **({"x-test-behaviour": behaviour} if behaviour else {})}
        answer = client.chat.completions.create(
            model="m", messages=hist[n], extra_headers=headers, stream=stream, **options
        )
        if stream:
            for _chunk in answer:
                pass
        hist[n] = [*hist[n], {"role": "assistant", "content": upstream.text}, {"role": "user", "content": "next"}]
        handled += 1
        _idle(proxy, handled)

    def start() -> RecordingProxy:
        nonlocal handled
        handled = 0
        return RecordingProxy.start(ProxyConfig(upstream=upstream.url), store, printer=lines.append)

    with start() as proxy:
        call(proxy, "a")
        call(proxy, "b")  # first of its session; its system prompt was sent by session a
        call(proxy, "a", temperature=0.5, response_format={"type": "json_object"})  # options changed
        call(proxy, "a", behaviour="no-cached")  # usage without a cached-token count
        call(proxy, "b", stream=True)  # a stream without usage: every token counted here
    with start() as proxy:  # a restart: the proxy's memory is gone, the store is not
        call(proxy, "a")
        proxy.recorder.audits.max_sessions = 1  # each session's audit is rebuilt from the store in turn
        call(proxy, "b")
        call(proxy, "a", tool_choice="none")
        call(proxy, "b", behaviour="no-cached")
        rebuilt = proxy.recorder.audits.rebuilt
    assert rebuilt >= 4  # a after the restart, then every switch between the sessions

    live = _live(lines)
    assert len(live) == 9
    offline: dict[tuple[str, int], tuple[str, str, int]] = {}
    sids = {s["group_key"]: s["id"] for s in proxy_sessions(store)}
    for sid in sids.values():
        offline.update(_offline(store, sid, capsys))
    assert live == offline
    a, b = sids["a"], sids["b"]
    # the cases the two used to disagree on
    assert offline[b, 0][0] == "first" and offline[b, 0][2] == 0
    assert offline[a, 3][0] == "append" and offline[a, 3][2] > 0  # the first call after the restart
    assert offline[a, 1][0] == "options_changed" and offline[a, 2][1] == "?" and offline[b, 1][1] == "?"
    for sid in (a, b):
        stored = [r["proxy"]["audit"] for r in proxy_session_requests(store, sid)]
        assert [(s["cause"], s["reusable_prefix_tokens"]) for s in stored] == [
            (v[0], v[2]) for k, v in sorted(offline.items()) if k[0] == sid
        ]
        (page,) = from_proxy(store, sid).sessions
        assert [c.reusable_tokens for c in page.calls] == [v[2] for k, v in sorted(offline.items()) if k[0] == sid]
