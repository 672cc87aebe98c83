"""What a session keeps about itself, typed: its stored row, the record of each model call,
and the store protocol the session writes through.

Why in ``core``: the session (``core/session.py``) records every event and call the moment it
happens, and the persistence that does it (``store/``) sits above ``core`` -- it reads the
model (events, prefix, the renderer) to migrate and export. So ``core`` says what it needs
(:class:`SessionStore`, :class:`RecoveryWriter`) and ``store.sessions.Store`` implements it;
``core`` never imports ``store``.

A call record is read by the report, ``ctxwright show``, the live audit on resume and the
export. Each reader used to probe a dict (``c.get("audit") or {}``) and decide for itself
what a missing part meant; :class:`CallRecord` decodes a stored row once, and
:meth:`CallRecord.to_dict` gives back exactly the JSON object ``ctxwright show --json`` has
always printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxwright.core.events import Event
from ctxwright.core.request import RequestOptions


@dataclass(frozen=True)
class SessionRow:
    id: str
    parent_id: str | None
    created_at: float
    prefix: dict[str, Any]
    prefix_sha256: str
    backend: str | None
    model: str | None
    meta: dict[str, Any]


@dataclass(frozen=True)
class CallAudit:
    """The live audit stored with one call (``audit/live.py: audit_record``), typed.

    A call that failed, or was stored before the audit existed, has none: every field is then
    empty (``cause`` ``""``, the numbers ``None``). ``raw`` is the stored object itself, kept
    so an export prints it unchanged."""

    raw: Mapping[str, Any] = field(default_factory=dict)
    #: what the request did to the provider's cache: ``first``, ``append``, ``compaction``, ...
    cause: str = ""
    index: int | None = None
    prompt_tokens: int | None = None
    #: tokens of the longest prefix an earlier request of the session already sent
    reusable_prefix_tokens: int | None = None
    #: where the request first diverged from that earlier one (``msg#3 content @120``), or ``""``
    where: str = ""
    #: the text either side of the divergence, when one was found
    context: tuple[str, str] | None = None
    options_changed: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> CallAudit:
        raw = dict(raw or {})
        ctx = raw.get("context")
        return cls(
            raw=raw,
            cause=str(raw.get("cause") or ""),
            index=raw.get("index"),
            prompt_tokens=raw.get("prompt_tokens"),
            reusable_prefix_tokens=raw.get("reusable_prefix_tokens"),
            where=str(raw.get("where") or ""),
            context=(str(ctx.get("before") or ""), str(ctx.get("after") or ""))
            if isinstance(ctx, Mapping) and ctx
            else None,
            options_changed=tuple(raw.get("options_changed") or ()),
        )

    @property
    def cache(self) -> Mapping[str, Any] | None:
        """The provider's cache verdict (``audit/live.py: cache_record``): ``cause``,
        ``evidence``, ``agree``, ``age_s``, ``ttl_s``, ``expiry_cost``; ``None`` for a call of a
        backend that does not report the provider's cache."""
        v = self.raw.get("cache")
        return v if isinstance(v, Mapping) else None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.raw)


#: The scalar parts of a call record, in the order the store's columns and the export list them.
CALL_COLUMNS = (
    "request_sha256",
    "request_bytes",
    "prefix_sha256",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "prefill_ms",
    "decode_ms",
    "error",
    "model",
    "tool_choice",
    "max_tokens",
    "temperature",
    "event_count",
    "wall_ms",
)
#: The parts stored as JSON, in that order too.
CALL_JSON_COLUMNS = ("usage", "ledger", "audit", "extra", "options_unknown")


@dataclass(frozen=True)
class CallRecord:
    """One model call as recorded: the request's hash and size, the options it was sent with,
    how many events it was rendered from, the usage the server reported, the context ledger
    (``core/tokens.py``: tokens by part, ``total``, a ``mismatch`` with the reported count),
    the live audit, the error of a failed call and the wall time around the backend call.

    Calls stored before schema 2 have no recorded options: those are ``None`` and named in
    ``options_unknown``; before schema 3 no wall time (``None``)."""

    session_id: str
    call_index: int
    request_sha256: str
    request_bytes: int
    prefix_sha256: str
    #: when it was recorded (0.0: let the store stamp it)
    created_at: float = 0.0
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    prefill_ms: float | None = None
    decode_ms: float | None = None
    error: str | None = None
    model: str | None = None
    tool_choice: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    event_count: int | None = None
    wall_ms: float | None = None
    usage: Mapping[str, Any] = field(default_factory=dict)
    ledger: Mapping[str, Any] = field(default_factory=dict)
    audit: CallAudit = field(default_factory=CallAudit)
    extra: Mapping[str, Any] = field(default_factory=dict)
    options_unknown: tuple[str, ...] = ()

    @property
    def options(self) -> RequestOptions:
        """The request options it was sent with (``ctxwright export --requests`` rebuilds the body)."""
        return RequestOptions(
            model=self.model,
            tool_choice=self.tool_choice,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            extra=dict(self.extra),
            unknown=self.options_unknown,
        )

    @property
    def elapsed_ms(self) -> float | None:
        """Its wall time (store m003); prefill + decode for a call recorded before it was measured."""
        if self.wall_ms is not None:
            return self.wall_ms
        if self.prefill_ms is None and self.decode_ms is None:
            return None
        return (self.prefill_ms or 0.0) + (self.decode_ms or 0.0)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CallRecord:
        """From :meth:`to_dict`'s object (a stored row decoded, an export's ``calls`` entry)."""
        scalars: dict[str, Any] = {c: d.get(c) for c in CALL_COLUMNS}
        return cls(
            session_id=str(d.get("session_id") or ""),
            call_index=int(d["call_index"]),
            created_at=float(d.get("created_at") or 0.0),
            **scalars,
            usage=dict(d.get("usage") or {}),
            ledger=dict(d.get("ledger") or {}),
            audit=CallAudit.from_dict(d.get("audit")),
            extra=dict(d.get("extra") or {}),
            options_unknown=tuple(d.get("options_unknown") or ()),
        )

    def to_dict(self) -> dict[str, Any]:
        """The call as plain JSON: ``session_id``, ``call_index``, ``created_at``, the columns,
        then the JSON parts (what ``ctxwright show --json`` prints)."""
        out: dict[str, Any] = {"session_id": self.session_id, "call_index": self.call_index}
        out["created_at"] = self.created_at
        out.update({c: getattr(self, c) for c in CALL_COLUMNS})
        out.update(self.json_parts())
        return out

    def json_parts(self) -> dict[str, Any]:
        """The parts stored as JSON (:data:`CALL_JSON_COLUMNS`), as plain values."""
        return {
            "usage": dict(self.usage),
            "ledger": dict(self.ledger),
            "audit": self.audit.to_dict(),
            "extra": dict(self.extra),
            "options_unknown": list(self.options_unknown),
        }


class RecoveryWriter(Protocol):
    """The private file a session writes to once the store refused a write (``store/recovery.py``)."""

    @property
    def path(self) -> Path | None: ...

    def save_event(self, session_id: str, event: Event) -> Path: ...

    def save_call(self, record: CallRecord) -> Path: ...

    def how_to_import(self) -> str: ...


class SessionStore(Protocol):
    """What a session needs from its store: create and read its row, append events, record
    calls, update its record, and a recovery file for writes the store refuses. Each write
    raises :class:`~ctxwright.errors.StoreUnusable` when the database refuses it."""

    def create_session(
        self,
        prefix: dict[str, Any],
        prefix_sha256: str,
        *,
        backend: str | None = None,
        model: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> str: ...

    def get_session(self, session_id: str) -> SessionRow: ...

    def events(self, session_id: str) -> list[Event]: ...

    def calls(self, session_id: str) -> list[CallRecord]: ...

    def append_event(self, session_id: str, event: Event) -> None: ...

    def record_call(self, record: CallRecord) -> None: ...

    def update_meta(self, session_id: str, meta: dict[str, Any]) -> None: ...

    def recovery_log(self, session_id: str) -> RecoveryWriter: ...


__all__ = [
    "CALL_COLUMNS",
    "CALL_JSON_COLUMNS",
    "CallAudit",
    "CallRecord",
    "RecoveryWriter",
    "SessionRow",
    "SessionStore",
]
