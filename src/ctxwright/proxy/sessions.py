"""Which session a proxied request belongs to.

A proxy sees requests, not sessions, and the audit compares each request with the previous
one *of its session*; so each request is placed by the strongest evidence it carries:

1. the ``X-Ctxwright-Session`` header (the user said so);
2. the body's own cache key or caller id: ``prompt_cache_key`` (OpenAI routes the prompt
   cache by it; Codex sends its conversation id there), ``user``, Anthropic's
   ``metadata.user_id`` (Claude Code puts its session there);
3. a Responses API ``previous_response_id`` that names a response this proxy relayed;
4. prefix continuity: the request's system prompt, tools and messages extend the latest
   request of a session (an agent loop re-sends its history plus what is new);
5. else a new session.

Keys of kind 1 and 2 are looked up in the store too, so a restarted proxy keeps adding to
the same session. Continuity and response ids are remembered for the latest
:data:`REMEMBERED` requests only (a conversation idle longer than that starts anew).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.core.messages import canonical_json
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store

REMEMBERED = 10_000


@dataclass(frozen=True)
class Placement:
    session_id: str
    grouped_by: str
    new: bool


def _chain(req: AuditRequest, fixed: bytes) -> list[bytes]:
    """Hash chain over the request's parts in prompt order: element k covers the system
    prompt and tools (``fixed``, their hash) and the first k messages. Built from the
    message hashes the log reader already computed (``audit/logs.py``), so a long history
    is not serialized again."""
    hashes = req.message_hashes
    if hashes is None:
        hashes = [hashlib.sha256(canonical_json(m).encode("utf-8", "surrogatepass")).digest() for m in req.messages]
    out = [fixed]
    for h in hashes:
        out.append(hashlib.sha256(out[-1] + h).digest())
    return out


def _key(body: dict[str, Any] | None) -> tuple[str, str] | None:
    if not isinstance(body, dict):
        return None
    for name in ("prompt_cache_key", "user"):
        value = body.get(name)
        if isinstance(value, str) and value:
            return name, value
    meta = body.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("user_id"), str) and meta["user_id"]:
        return "metadata.user_id", meta["user_id"]
    return None


class SessionPlacer:
    """Places each model call in a proxy session (see the module docstring). Used from one
    thread (the recorder's)."""

    def __init__(self, store: Store, upstream: str) -> None:
        self.log = ProxyLog(store)
        self.upstream = upstream
        self._keyed: dict[tuple[str, str], str] = {}
        self._latest: OrderedDict[bytes, str] = OrderedDict()  # full chain hash of a latest request -> session
        self._tail: dict[str, bytes] = {}  # session -> its entry in _latest
        self._responses: OrderedDict[str, str] = OrderedDict()  # response id -> session
        self._fixed_of: tuple[Any, str, bytes] | None = None

    def _fixed(self, req: AuditRequest) -> bytes:
        """The hash of the system prompt and tools; the reader hands back the same tools
        object while they stay equal, so it is serialized once per change."""
        if self._fixed_of is None or self._fixed_of[0] is not req.tools or self._fixed_of[1] != req.system:
            text = canonical_json([req.system, list(req.tools)]).encode("utf-8", "surrogatepass")
            self._fixed_of = (req.tools, req.system, hashlib.sha256(text).digest())
        return self._fixed_of[2]

    def place(
        self, header: str | None, body: dict[str, Any] | None, api: str | None, req: AuditRequest | None = None
    ) -> Placement:
        """The session of one call; ``req`` is its body as the log reader read it (``None``
        when it could not be read: it is then placed by header or key only, or alone)."""
        chain = _chain(req, self._fixed(req)) if req is not None else []
        placement = self._find(header, body, chain, api)
        if chain:  # this request is now its session's latest
            old = self._tail.pop(placement.session_id, None)
            if old is not None:
                self._latest.pop(old, None)
            self._latest[chain[-1]] = placement.session_id
            self._tail[placement.session_id] = chain[-1]
            while len(self._latest) > REMEMBERED:
                _, sid = self._latest.popitem(last=False)
                self._tail.pop(sid, None)
        return placement

    def _find(self, header: str | None, body: dict[str, Any] | None, chain: list[bytes], api: str | None) -> Placement:
        key = ("header", header) if header else _key(body)
        if key is not None:
            sid = self._keyed.get(key) or self.log.find_session(*key)
            new = sid is None
            if sid is None:
                sid = self.log.create_session(grouped_by=key[0], group_key=key[1], api=api, upstream=self.upstream)
            self._keyed[key] = sid
            return Placement(sid, key[0], new)
        prev = body.get("previous_response_id") if isinstance(body, dict) else None
        if isinstance(prev, str) and prev in self._responses:
            return Placement(self._responses[prev], "previous_response_id", False)
        for h in reversed(chain[1:]):  # the longest earlier request this one extends
            sid = self._latest.get(h)
            if sid is not None:
                return Placement(sid, "continuity", False)
        sid = self.log.create_session(grouped_by="continuity", group_key=None, api=api, upstream=self.upstream)
        return Placement(sid, "continuity", True)

    def answered(self, session_id: str, response_id: str | None) -> None:
        """Remember that ``response_id`` answered a call of ``session_id`` (Responses API)."""
        if response_id:
            self._responses[response_id] = session_id
            while len(self._responses) > REMEMBERED:
                self._responses.popitem(last=False)
