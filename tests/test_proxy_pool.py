"""The proxy's upstream pool and the session placer's lookups under many clients.

The pool (``proxy/server.py``: ``_UpstreamPool``) hands each request an idle connection to
its upstream without scanning the others; these tests hold that it keeps and reuses its
connections (httpcore's default cap of 10 once closed every connection past the tenth, and
each later request dialled again). The placer (``proxy/sessions.py``) asks the store about
the hashes from the longest chain end it remembers on; a longer end stored by another process
must still win.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from tests.proxy_upstream import Upstream

from ctxwright.audit.compare import AuditRequest
from ctxwright.audit.logs import RecordReader
from ctxwright.proxy import server
from ctxwright.proxy.sessions import SessionPlacer
from ctxwright.proxy.store import ProxyLog


def test_concurrent_clients_reuse_one_connection_each(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    create = server._UpstreamPool.create_connection

    def counted(self: server._UpstreamPool, origin: Any) -> Any:
        made.append(origin)
        return create(self, origin)

    monkeypatch.setattr(server._UpstreamPool, "create_connection", counted)
    clients, calls = 16, 4

    def done(ex: server.Exchange) -> None:
        ex.written.set_result(None)

    async def one(url: str, n: int) -> list[int]:
        body = {"model": "m", "messages": [{"role": "user", "content": f"client {n}"}]}
        headers = {"authorization": "Bearer sk-test"}
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            return [
                (await c.post("/v1/chat/completions", json=body, headers=headers)).status_code for _ in range(calls)
            ]

    async def all_clients(url: str) -> list[list[int]]:
        return await asyncio.gather(*(one(url, n) for n in range(clients)))

    with Upstream().serve() as up:
        app = server.build_app(server.ProxyConfig(upstream=up.url), done)
        with server.ProxyThread(app) as proxy:
            statuses = asyncio.run(all_clients(proxy.url))
            statuses += asyncio.run(all_clients(proxy.url))  # new clients: the upstream connections stay
    assert statuses == [[200] * calls] * (2 * clients)
    # one connection per request in flight at most, kept alive and reused by every later request
    assert 1 <= len(made) <= clients


def _request(reader: RecordReader, messages: list[dict[str, str]]) -> tuple[dict[str, Any], AuditRequest]:
    body = {"model": "m", "messages": messages}
    req = next(i for i in reader.read_record({"request": body, "response": None}, 1) if isinstance(i, AuditRequest))
    return body, req


def _record(placer: SessionPlacer, log: ProxyLog, header: str | None, body: dict[str, Any], req: AuditRequest) -> str:
    placement = placer.place(header, body, "openai_chat", req)
    row = {
        "session_id": placement.session_id,
        **{"method": "POST", "path": "/v1/chat/completions", "started_at": 1.0, "outcome": "complete"},
        **{"request_bytes": 0, "request_sha256": "", "response_bytes": 0, "response_sha256": ""},
        **{"streamed": 0, "request_parsed": 1, "response_parsed": 0},
    }
    log.record_call(row, placement.heads)
    placer.remember(placement)
    return placement.session_id


def test_a_longer_chain_end_stored_by_another_process_wins_over_the_remembered_one(store: Any) -> None:
    reader = RecordReader()
    log = ProxyLog(store)
    here, other = SessionPlacer(store, "http://up"), SessionPlacer(store, "http://up")
    asked: list[int] = []
    head_session = log.head_session

    def spy(chain: Any) -> str | None:
        asked.append(len(chain))
        return head_session(chain)

    here.log.head_session = spy  # type: ignore[method-assign]
    turns = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "step 0"}]
    first = _record(here, log, None, *_request(reader, turns))
    for t in range(1, 6):  # a conversation this process records: each call extends the previous one
        turns += [{"role": "assistant", "content": f"ok {t}"}, {"role": "user", "content": f"step {t}"}]
        asked.clear()
        assert _record(here, log, None, *_request(reader, turns)) == first
        assert sum(asked) <= 3  # the store is asked from the remembered end on, not once per message
    # another process records a longer request under its own key: its chain end names its session
    longer = [*turns, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    theirs = _record(other, log, "theirs", *_request(reader, longer))
    assert theirs != first
    # the next request extends that one: this process remembers only the shorter end, of its
    # own session, and must still find the other's
    nxt = [*longer, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "again"}]
    assert _record(here, log, None, *_request(reader, nxt)) == theirs
