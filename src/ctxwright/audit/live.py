"""The audit inside a live session: turning each rendered request into an
:class:`~ctxwright.audit.compare.AuditRequest`, and rebuilding the audit of a resumed session.

Why separate from ``audit/compare.py``: that module compares requests from any agent; this module
knows ctxwright's own request, usage and event types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ctxwright.audit.compare import AuditRequest, AuditRow, segment_hash
from ctxwright.audit.logs import WireCache, sent_options
from ctxwright.cache.expiry import Price, cache_state, expiry_cost, price_of
from ctxwright.cache.prices import Pricing
from ctxwright.cache.reported import Reported, reported
from ctxwright.cache.verdict import ByteEvidence, Facts, fuse
from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.messages import Message, Usage
from ctxwright.core.records import CallRecord
from ctxwright.core.render import replay_calls
from ctxwright.core.request import ChatRequest, RequestOptions, ToolSpec
from ctxwright.core.session import Session
from ctxwright.core.usage import raw_cache_usage

#: The conversation of every request a live session audits: one auditor audits one session, so
#: its requests are never split into conversations by the log rules of ``audit/compare.py``.
LIVE_CONVERSATION = "live session"


def audit_request(
    request: ChatRequest,
    usage: Usage | None,
    marker: str | None = None,
    model: str | None = None,
    backend: str | None = None,
) -> AuditRequest:
    u = usage or Usage()
    msgs = request.messages
    if msgs and msgs[0].role == "system":
        system, rest = msgs[0].content or "", msgs[1:]
    else:
        system, rest = "", msgs
    return AuditRequest(
        system=system,
        tools=[t.to_wire() for t in request.tools],
        messages=[m.to_wire() for m in rest],
        cached_tokens=u.cached_tokens,
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        marker=marker,
        reusable_tokens_hint=_hint(u),
        message_bytes=[m.canonical_utf8 for m in rest],
        options=sent_options(RequestOptions.of(request, model), request.tools, backend),
        conversation=LIVE_CONVERSATION,
        **_priced_by(u, model),
    )


class LiveRequests:
    """:func:`audit_request` for the requests of one live session, one after another, at a cost
    that does not grow with the session: each message's wire form, canonical bytes and segment
    hash are made once, kept per message for the messages the next request shares with this one
    (``core/incremental.py``; a compaction or a replaced status makes them from its first change
    on), and the tool list's wire form once per tool list. The request equals
    :func:`audit_request`'s (tested); handing the auditor the hashes and the same tool list
    object lets it skip its own hashing and serialising of them too."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._wire: list[dict[str, Any]] = []
        self._bytes: list[bytes] = []
        self._hashes: list[bytes] = []
        self._tools: tuple[tuple[ToolSpec, ...], list[dict[str, Any]]] | None = None
        self._options: tuple[tuple[ToolSpec, ...], RequestOptions, dict[str, Any]] | None = None

    def audit_request(
        self,
        request: ChatRequest,
        usage: Usage | None,
        marker: str | None = None,
        model: str | None = None,
        backend: str | None = None,
    ) -> AuditRequest:
        u = usage or Usage()
        msgs = request.messages
        if msgs and msgs[0].role == "system":
            system, rest = msgs[0].content or "", msgs[1:]
        else:
            system, rest = "", msgs
        k = common_prefix_len(self._messages, rest)
        del self._messages[k:], self._wire[k:], self._bytes[k:], self._hashes[k:]
        for m in rest[k:]:
            raw = m.canonical_utf8
            self._messages.append(m)
            self._wire.append(m.to_wire())
            self._bytes.append(raw)
            self._hashes.append(segment_hash(raw))
        tools = self._tools
        if tools is None or tools[0] is not request.tools:
            tools = self._tools = (request.tools, [t.to_wire() for t in request.tools])
        sent = RequestOptions.of(request, model)
        opts = self._options
        if opts is None or opts[0] is not request.tools or opts[1] != sent:  # made once per change
            opts = self._options = (request.tools, sent, sent_options(sent, request.tools, backend))
        return AuditRequest(
            system=system,
            tools=tools[1],
            messages=list(self._wire),
            cached_tokens=u.cached_tokens,
            prompt_tokens=u.prompt_tokens,
            completion_tokens=u.completion_tokens,
            marker=marker,
            reusable_tokens_hint=_hint(u),
            message_bytes=list(self._bytes),
            message_hashes=list(self._hashes),
            options=opts[2],
            conversation=LIVE_CONVERSATION,
            **_priced_by(u, model),
        )


def audit_record(row: AuditRow) -> dict[str, Any]:
    """What is stored with the call: the audit row plus a readable divergence."""
    rec = row.to_json()
    d = row.first_divergence
    if d is not None:
        rec["role"] = d.role
        rec["where"] = d.where
        rec["context"] = {"before": d.before, "after": d.after}
    return rec


def byte_evidence(row: AuditRow) -> ByteEvidence:
    """The byte audit's part of the cache verdict (``cache/verdict.py``)."""
    d = row.first_divergence
    return ByteEvidence(
        cause=row.cause,
        reusable_prefix_tokens=row.reusable_prefix_tokens,
        where=d.where if d is not None else "",
        offset=d.byte_offset if d is not None else None,
        message_index=d.message_index if d is not None else None,
        field=d.field if d is not None else None,
        options=row.options_changed,
    )


def stored_evidence(record: Mapping[str, Any]) -> ByteEvidence:
    """:func:`byte_evidence` read back from the record :func:`audit_record` stored (a call's
    ``audit``, a proxy exchange's ``audit_json``): the same evidence, for a reader that has
    the stored call rather than its row (``telemetry/``: the segment a divergence falls in)."""
    d = record.get("first_divergence")
    d = d if isinstance(d, Mapping) else {}
    offset, index, where = d.get("byte_offset"), d.get("message_index"), record.get("where")
    reusable = record.get("reusable_prefix_tokens")
    return ByteEvidence(
        cause=str(record.get("cause") or ""),
        reusable_prefix_tokens=reusable if isinstance(reusable, int) else 0,
        where=where if isinstance(where, str) else "",
        offset=offset if isinstance(offset, int) else None,
        message_index=index if isinstance(index, int) else None,
        field=d.get("field") if isinstance(d.get("field"), str) else None,
        options=tuple(str(o) for o in record.get("options_changed") or ()),
    )


def cache_record(
    row: AuditRow,
    raw: Mapping[str, Any] | None,
    history: Sequence[Reported],
    *,
    model: str | None = None,
    price: Price | None = None,
    pricing: Pricing | None = None,
) -> dict[str, Any] | None:
    """The fused cache verdict stored with a call (``audit["cache"]``): ``cause``,
    ``evidence``, ``agree``, the cache's ``age_s`` and ``ttl_s`` when the call was sent, and
    for an expiry its ``expiry_cost`` (the re-write against the read it replaced, priced by
    ``price``, else by ``pricing`` -- the session's, a ``--prices`` file included -- else the
    built-in table; only its ``tokens`` when the model has no price).

    ``history`` is the earlier calls' reports, oldest first, keep-warm refreshes included (a
    refresh renews the entry). ``None`` for a call whose backend does not report the
    provider's cache layout (chat completions, llama.cpp): the byte audit is all there is."""
    now = reported(raw)
    if not now.known:
        return None
    prev = next((r for r in reversed(history) if r.known), None)
    byte = byte_evidence(row)
    verdict = fuse(byte, now, prev)
    rec = verdict.to_json()
    state = cache_state(history, now.sent_at) if now.sent_at is not None else None
    rec["age_s"] = round(state.age_s, 3) if state is not None else None
    rec["ttl_s"] = now.ttl_s
    rec["expiry_cost"] = None
    if verdict.cause == "ttl_expired":
        expected = Facts(byte, now, prev).expected
        written = now.tokens.cache_write
        tokens = min(expected, written) if written else expected
        p = price if price is not None else price_of(now.provider, model, pricing)
        ttl = prev.ttl if prev is not None else now.ttl
        rec["expiry_cost"] = expiry_cost(tokens, ttl, p).to_json() if p is not None else {"tokens": tokens}
    return rec


def cache_history(records: Sequence[Mapping[str, Any]]) -> list[Reported]:
    """The reports of stored calls (their ``usage`` objects), oldest first: the history a
    resumed session's next verdict reads."""
    return [reported(u.get("raw") if isinstance(u, Mapping) else None) for u in records]


def past_requests(session: Session) -> Iterator[AuditRequest]:
    """The requests a resumed session already sent, rebuilt from its stored events.

    Rebuilding them lets the audit of the next call compare against the best earlier
    request, as if the session had never stopped. Rendered by the one renderer
    (``core/render.py``) with the session's recorded settings -- the code and settings
    that rendered them live -- so an unchanged history is audited as ``append``; and with the
    options each call recorded (:func:`sent_options`), so a ``tool_choice`` that changes at the
    resume is ``options_changed``, as the live audit and the audit of the export say.
    """
    if not session.events or session.store is None:
        return
    calls = {c.call_index: c for c in session.store.calls(session.id)}
    prefix = session.prefix
    system = prefix.system_prompt
    tools = [t.to_wire() for t in prefix.tools]
    last: list[tuple[RequestOptions, dict[str, Any]]] = []  # the previous call's: most calls repeat them
    wire = WireCache()
    for rc in replay_calls(session.events, session.settings(), tools_in_use=bool(prefix.tools)):
        call = calls.get(rc.reply.call_index) if rc.reply.call_index is not None else None
        u = Usage.from_dict(dict(call.usage) if call is not None else {})
        yield AuditRequest(
            system=system,
            tools=tools,
            messages=[wire(m) for m in rc.messages],
            cached_tokens=call.cached_tokens if call is not None else None,
            prompt_tokens=call.prompt_tokens if call is not None else None,
            completion_tokens=call.completion_tokens if call is not None else None,
            marker=rc.marker,
            reusable_tokens_hint=_hint(u),
            message_bytes=[m.canonical_utf8 for m in rc.messages],
            options=_recorded_options(call, prefix.tools, last, session.backend),
            conversation=LIVE_CONVERSATION,
            **_priced_by(u, call.model if call is not None else None),
        )


def _recorded_options(
    call: CallRecord | None,
    tools: Sequence[ToolSpec],
    last: list[tuple[RequestOptions, dict[str, Any]]],
    backend: str | None,
) -> dict[str, Any] | None:
    """:func:`sent_options` of a stored call (``None``, not compared, for a reply with no call
    record); ``last`` holds the previous call's, reused while they do not change."""
    if call is None:
        return None
    opts = call.options
    if not last or last[0][0] != opts:
        last[:] = [(opts, sent_options(opts, tools, backend))]
    return last[0][1]


def _priced_by(u: Usage, model: str | None) -> dict[str, Any]:
    """The request fields the cost is priced by: the provider's own split of the prompt from
    the call's ``Usage.raw`` (``core/usage.py``), its usage shape and the model."""
    found = raw_cache_usage(u.raw)
    return {
        "usage_split": found[1] if found else None,
        "provider": found[0] if found else None,
        "model": model,
    }


def _hint(u: Usage) -> int | None:
    hint = u.raw.get("reusable_tokens") if isinstance(u.raw, dict) else None
    return hint if isinstance(hint, int) and not isinstance(hint, bool) else None
