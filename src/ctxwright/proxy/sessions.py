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
5. repeated messages: the request's messages alone extend an earlier request's messages -- the
   same first user message, the same assistant turns and tool-call ids -- while its system
   prompt or tools differ. That is the case the proxy exists to catch: a client that puts the
   time in its system prompt changes its first bytes on every call, and placing by those bytes
   would file each call as a new conversation (``first, first, first``) and never name the
   break. Placed by what it repeats, the call stays in its session and the audit names
   ``system_changed`` (or ``tools_changed``) with the byte. Only a strictly shorter earlier
   request counts: a request that repeats another's messages exactly, under another system
   prompt, is a new run of the same task (the same question asked twice), not its continuation;
6. else a new session.

What these rules need is kept in the store, not in one process's memory (``proxy/store.py``):
the sessions of keys, the hash chain end of every request, the session of every Responses
answer. So a restarted proxy keeps adding to its sessions, and several proxy processes
recording into one database (``ctxwright proxy --workers N``, or proxies on several hosts
sharing a PostgreSQL store) place each request as one process would. Continuity looks at every
earlier request, not only each session's latest: with several processes, the requests of one
conversation may be recorded out of order (the next one, sent on a new connection, can reach
another process and be recorded before the previous one is), and each still finds the
request it extends.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.core.messages import canonical_json
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store


@dataclass(frozen=True)
class Placement:
    session_id: str
    grouped_by: str
    new: bool
    #: the hash chain ends later requests find this one's session by, to be stored in the
    #: transaction that writes the call (``ProxyLog.record_call``), then :meth:`SessionPlacer.remember`
    heads: tuple[str, ...] = ()


#: chain ends this process keeps in memory (the latest ones): where to start asking the store
#: (:meth:`SessionPlacer._head_session`); about 3 MB at most
HEADS_KEPT = 16384


#: the start of the messages-only chain: a constant no system-and-tools hash can equal, so the
#: two chains share the heads table without ever matching each other
_MESSAGES_ONLY = hashlib.sha256(b"ctxwright proxy: the messages alone").digest()


def _chains(req: AuditRequest, fixed: bytes) -> tuple[list[bytes], list[bytes]]:
    """Two hash chains over the request's messages in prompt order. Element k of the first
    covers the system prompt and tools (``fixed``, their hash) and the first k messages (rule
    4); element k of the second covers the first k messages alone (rule 5). Built from the
    message hashes the log reader already computed (``audit/logs.py``), so a long history is
    not serialized again."""
    hashes = req.message_hashes
    if hashes is None:
        hashes = [hashlib.sha256(canonical_json(m).encode("utf-8", "surrogatepass")).digest() for m in req.messages]
    full, alone = [fixed], [_MESSAGES_ONLY]
    for h in hashes:
        full.append(hashlib.sha256(full[-1] + h).digest())
        alone.append(hashlib.sha256(alone[-1] + h).digest())
    return full, alone


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
    thread (the recorder's); other processes may place calls in the same store at once."""

    def __init__(self, store: Store, upstream: str) -> None:
        self.log = ProxyLog(store)
        self.upstream = upstream
        self._keyed: dict[tuple[str, str], str] = {}  # a key's session never changes once made
        self._fixed_of: tuple[Any, str, bytes] | None = None
        self._heads: dict[str, None] = {}  # the chain ends this process stored, oldest first

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
        when it could not be read: it is then placed by header or key only, or alone).

        The chain ends that let later calls find this session (``Placement.heads``: later
        requests that extend this one, and later ones that repeat its messages under another
        prefix) are not written here: the recorder stores them with the call, in one
        transaction (``ProxyLog.record_call``), then calls :meth:`remember`."""
        chain: list[str] = []
        repeated: list[str] = []
        if req is not None:
            full, alone = _chains(req, self._fixed(req))
            chain, repeated = [h.hex() for h in full], [h.hex() for h in alone]
        placement = self._find(header, body, chain, repeated, api)
        heads = ([chain[-1]] if chain else []) + ([repeated[-1]] if len(repeated) > 1 else [])
        return Placement(placement.session_id, placement.grouped_by, placement.new, tuple(heads))

    def remember(self, placement: Placement) -> None:
        """``placement``'s chain ends are stored: keep them in memory (the latest
        :data:`HEADS_KEPT`) as where the next lookups start."""
        for head in placement.heads:
            self._heads.pop(head, None)
            self._heads[head] = None
        while len(self._heads) > HEADS_KEPT:
            del self._heads[next(iter(self._heads))]

    def _head_session(self, chain: list[str]) -> str | None:
        """``ProxyLog.head_session(chain)`` -- the session of the longest stored chain end in
        ``chain`` -- asking the store about a few hashes instead of one per message.

        Why: an agent's request extends its previous one, whose chain end this process stored
        and remembers (:meth:`remember`), so the answer is at that end or past it. The store is
        asked about the hashes from the longest remembered one on (another process may have
        stored a longer one, or the same one for another session since); only when it has none
        of them -- the session was deleted -- are the shorter ones asked too. So the answer is
        the store's, whatever the memory holds, and a long history costs one lookup of two or
        three hashes instead of a lookup per message."""
        known = self._heads
        start = next((i for i in range(len(chain) - 1, -1, -1) if chain[i] in known), None)
        if start is None:
            return self.log.head_session(chain)
        found = self.log.head_session(chain[start:])
        if found is None and start:
            found = self.log.head_session(chain[:start])
        return found

    def _find(
        self, header: str | None, body: dict[str, Any] | None, chain: list[str], repeated: list[str], api: str | None
    ) -> Placement:
        key = ("header", header) if header else _key(body)
        if key is not None:
            known = self._keyed.get(key)
            if known is not None:
                return Placement(known, key[0], False)
            sid, new = self.log.keyed_session(key[0], key[1], api=api, upstream=self.upstream)
            self._keyed[key] = sid
            return Placement(sid, key[0], new)
        prev = body.get("previous_response_id") if isinstance(body, dict) else None
        if isinstance(prev, str) and prev:
            answered = self.log.response_session(prev)
            if answered is not None:
                return Placement(answered, "previous_response_id", False)
        found = self._head_session(chain[1:])  # the longest earlier request this one extends
        if found is not None:
            return Placement(found, "continuity", False)
        found = self._head_session(repeated[1:-1])  # the longest strictly shorter run of the same messages
        if found is not None:
            return Placement(found, "repeated_messages", False)
        sid = self.log.create_session(grouped_by="continuity", group_key=None, api=api, upstream=self.upstream)
        return Placement(sid, "continuity", True)

    def answered(self, session_id: str, response_id: str | None) -> None:
        """Remember that ``response_id`` answered a call of ``session_id`` (Responses API)."""
        if response_id:
            self.log.add_response(response_id, session_id)
