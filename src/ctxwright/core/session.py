"""The session: a frozen prefix plus an append-only event log, from which every request
is rendered.

Provider rule protected: the API is stateless, so the harness owns the message list
and must send the same bytes again for everything it already sent (that is what the
provider cached). Events are therefore only ever *appended*; an older part of the
trajectory can be shown differently only by a later event that says so (a compaction,
added by later layers), never by editing the event in place. Every event goes to the
store the moment it is appended, so a crash loses nothing already recorded; an event the
store refuses (locked too long, read-only, full) goes to a private recovery file that
resuming imports (``store/recovery.py``), so a reply already received is never lost. The
session writes through what it needs from a store (``core/records.py: SessionStore``), which
``store/`` implements; ``core`` never imports ``store``.

Events are typed (``core/events.py``); every request is rendered from them by the one
renderer (``core/render.py``) that resume, the offline audit and ``ctxwright export``
use too, with settings read from the session's record, so what is rebuilt later is what
was sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace as dc_replace
from itertools import islice
from typing import Any, TypeVar, overload

from ctxwright.core.events import (
    INFER_SKILL,
    AssistantEvent,
    BudgetRecord,
    CompactionEvent,
    CompactionNote,
    Event,
    MessageEvent,
    Sanitization,
    StatusEvent,
    ToolEvent,
    UserEvent,
    _Infer,
    event_from_row,
)
from ctxwright.core.messages import Message, Usage
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import META_KEY as REASONING_META_KEY
from ctxwright.core.records import CallAudit, CallRecord, RecoveryWriter, SessionStore
from ctxwright.core.render import CURRENT_NULL_CONTENT, NULL_CONTENT_KEY, Renderer, RenderSettings
from ctxwright.core.request import ChatRequest, RequestHasher, RequestOptions, ToolChoice
from ctxwright.core.results import ResultDraft
from ctxwright.errors import CtxwrightError, PrefixFrozenError, StoreUnusable, StoreWriteFailed

E = TypeVar("E", bound=Event)


def _with_seq(event: E, seq: int) -> E:
    """``dataclasses.replace(event, seq=seq)``, by copying its fields as they are: an event has
    no ``__post_init__`` and no field outside ``__init__``, and ``replace`` -- every field
    passed through ``__init__`` again -- is a good part of what appending an event costs."""
    fields = getattr(event, "__dict__", None)
    if fields is None:  # an event class of slots
        return dc_replace(event, seq=seq)
    ev = object.__new__(type(event))
    ev.__dict__.update(fields)
    object.__setattr__(ev, "seq", seq)
    return ev


class Session:
    """Prefix + event log. Create with :meth:`start` or :meth:`resume`."""

    def __init__(
        self,
        prefix: Prefix,
        *,
        session_id: str,
        store: SessionStore | None = None,
        events: Iterable[Event] = (),
        parent_id: str | None = None,
        backend: str | None = None,
        model: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self._prefix = prefix
        self.id = session_id
        self.store = store
        self.parent_id = parent_id
        self.backend = backend
        self.model = model
        self.meta: dict[str, Any] = dict(meta or {})
        self.events: list[Event] = list(events)
        self.call_count = 0
        self._append_lock = threading.Lock()
        self._renderer: Renderer | None = None
        self._settings: tuple[tuple[Any, Any], RenderSettings] | None = None  # settings(), by its meta values
        self._built: tuple[ChatRequest, int] | None = None  # the last request built, from how many events
        self._hasher = RequestHasher()  # each call's request hash, from the messages new since the last
        #: set once the store refused a write: from then on every write goes to the recovery file
        self.recovery: RecoveryWriter | None = None
        self._store_problem: StoreUnusable | None = None

    def lineage_root(self) -> str:
        """The id of the first session of this one's lineage: itself, or its parent's root
        (a sub-agent's parent, and so on, read from the store). Without a store, or past a
        parent the store no longer has, the oldest parent known. What a routing key is made
        from (``cache/routing.py``), so a sub-agent keeps its parent's key."""
        sid, parent = self.id, self.parent_id
        seen = {sid}
        while parent is not None and parent not in seen:
            seen.add(parent)
            if self.store is None:
                return parent
            try:
                row = self.store.get_session(parent)
            except CtxwrightError:  # deleted since: the parent is the oldest known
                return parent
            sid, parent = row.id, row.parent_id
        return sid

    # The prefix has no setter: replacing it mid-session is the cache-breaking mistake.
    @property
    def prefix(self) -> Prefix:
        return self._prefix

    @prefix.setter
    def prefix(self, value: Prefix) -> None:
        raise PrefixFrozenError(
            "a session's prefix is fixed when the session starts; changing it would invalidate the "
            "provider's prompt cache for every later call. Start a new session with the new prefix."
        )

    # -- construction ------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        prefix: Prefix,
        *,
        store: SessionStore | None = None,
        backend: str | None = None,
        model: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        import uuid

        # every new session records the wire form of a tool-call turn it sends (core/render.py)
        meta = {NULL_CONTENT_KEY: CURRENT_NULL_CONTENT, **(meta or {})}
        sid = uuid.uuid4().hex[:12]
        if store is not None:
            sid = store.create_session(
                prefix.to_dict(),
                prefix.sha256,
                backend=backend,
                model=model,
                parent_id=parent_id,
                meta=meta,
                session_id=sid,
            )
        return cls(prefix, session_id=sid, store=store, parent_id=parent_id, backend=backend, model=model, meta=meta)

    @classmethod
    def resume(cls, store: SessionStore, session_id: str) -> Session:
        """Load a session from the store; its next request starts with identical prefix bytes."""
        row = store.get_session(session_id)
        prefix = Prefix.from_dict(row.prefix)
        if prefix.sha256 != row.prefix_sha256:
            raise ValueError(
                f"session {row.id}: the stored prefix no longer hashes to {row.prefix_sha256[:12]}; "
                "the database was edited or is damaged. Start a new session."
            )
        events = store.events(row.id)
        s = cls(
            prefix,
            session_id=row.id,
            store=store,
            events=events,
            parent_id=row.parent_id,
            backend=row.backend,
            model=row.model,
            meta=row.meta,
        )
        s.call_count = len(store.calls(row.id))
        return s

    # -- appending ---------------------------------------------------------------------
    @overload
    def append(self, event: E) -> E: ...
    @overload
    def append(self, event: str, payload: Mapping[str, Any]) -> Event: ...
    def append(self, event: Event | str, payload: Mapping[str, Any] | None = None) -> Event:
        """Append one event and persist it immediately; returns it with its ``seq``.

        ``append(kind, payload)`` -- the form before typed events -- is still accepted and
        parsed by ``core/events.py`` exactly as a stored row would be.
        """
        if isinstance(event, str):
            event = event_from_row(-1, event, time.time(), dict(payload or {}))
        with self._append_lock:  # tools running in parallel threads may record events too
            ev = _with_seq(event, len(self.events))
            problem: StoreUnusable | None = None
            if self.store is not None:
                if self.recovery is None:
                    try:
                        self.store.append_event(self.id, ev)
                    except StoreUnusable as exc:
                        problem = exc
                if self.recovery is not None or problem is not None:
                    self._recover(lambda log: log.save_event(self.id, ev), problem, what=f"{ev.kind} event {ev.seq}")
            self.events.append(ev)
        if self.recovery is not None:  # the event is safe on disk, but the run cannot go on
            raise self._write_failed(f"{ev.kind} event {ev.seq}", problem)
        return ev

    def _recover(self, save: Callable[[RecoveryWriter], object], problem: StoreUnusable | None, *, what: str) -> None:
        """Write to the recovery file (``store/recovery.py``); once the store failed, every
        later write goes there too, in order."""
        assert self.store is not None
        if self.recovery is None:
            self.recovery = self.store.recovery_log(self.id)
            self._store_problem = problem
        try:
            save(self.recovery)
        except OSError as exc:
            reason = problem.reason if problem is not None else "the database refused an earlier write"
            raise StoreWriteFailed(
                f"could not store {what} of session {self.id} ({reason}), nor write a recovery file ({exc}); "
                "it is lost. Fix the database or its folder before running again."
            ) from exc

    def _write_failed(self, what: str, problem: StoreUnusable | None) -> StoreWriteFailed:
        assert self.recovery is not None
        problem = problem or self._store_problem
        reason = problem.reason.rstrip(".") if problem is not None else "the database refused an earlier write"
        return StoreWriteFailed(
            f"could not store {what} of session {self.id}: {reason}. Nothing is lost: it is "
            f"{self.recovery.how_to_import()} once the database is usable again.",
            recovery_path=str(self.recovery.path) if self.recovery.path else None,
        )

    def add_user(self, text: str, **extra: Any) -> UserEvent:
        return self.append(UserEvent(message=Message(role="user", content=text), extra=extra))

    def add_assistant(self, message: Message, usage: Usage | None = None, **extra: Any) -> AssistantEvent:
        return self.append(AssistantEvent.build(message, usage, **extra))

    def add_tool_result(
        self,
        tool_call_id: str,
        content: str,
        *,
        tool_name: str,
        ok: bool = True,
        elapsed_ms: float | None = None,
        error_type: str | None = None,
        budget: BudgetRecord | None = None,
        external: bool = False,
        sanitized: Sanitization | None = None,
        interrupted: bool = False,
        skill: str | _Infer | None = INFER_SKILL,
    ) -> ToolEvent:
        """One tool result, with what the budget layer and the defences recorded about it;
        ``skill`` names the skill whose full body it is (left out: read from the text)."""
        msg = Message(role="tool", content=content, tool_call_id=tool_call_id)
        return self.append(
            ToolEvent.build(
                msg,
                tool_name=tool_name,
                ok=ok,
                elapsed_ms=elapsed_ms,
                error_type=error_type,
                budget=budget,
                external=external,
                sanitized=sanitized,
                interrupted=interrupted,
                skill=skill,
            )
        )

    def add_result(self, draft: ResultDraft) -> ToolEvent:
        """A result that went through the steps of ``core/results.py``, recorded under the
        tool called (its time to the microsecond)."""
        return self.add_tool_result(
            draft.call.id,
            draft.text,
            tool_name=draft.call.name,
            ok=draft.ok,
            elapsed_ms=round(draft.elapsed_ms, 3) if draft.elapsed_ms is not None else None,
            error_type=draft.error_type,
            budget=draft.budget,
            external=draft.external,
            sanitized=draft.sanitized,
            skill=draft.skill,
        )

    def add_compaction(
        self,
        layer: str,
        *,
        replace: dict[int, str] | None = None,
        drop: Iterable[int] = (),
        note: tuple[int, str] | None = None,
        note_replaces_all: bool = False,
        **info: Any,
    ) -> CompactionEvent:
        """Record one compaction: how the view shows earlier events from now on."""
        return self.append(
            CompactionEvent(
                layer=layer,
                replace=dict(replace or {}),
                drop=tuple(sorted(drop)),
                note=CompactionNote(note[0], note[1], note_replaces_all) if note is not None else None,
                call_index=info.pop("call_index", None),
                tokens_before=info.pop("tokens_before", None),
                stage=info.pop("stage", None),
                ledger=info.pop("ledger", None),
                extra=info,
            )
        )

    # -- rendering (core/render.py) -------------------------------------------------------
    def settings(self) -> RenderSettings:
        """How this session renders, from its record (meta), as every offline reader reads it.
        Read again only when the two meta values it is made from change (it is asked for
        several times a call)."""
        meta = self.meta or {}
        key = (meta.get(NULL_CONTENT_KEY), meta.get(REASONING_META_KEY))
        cached = self._settings
        if cached is not None and cached[0] == key:
            return cached[1]
        settings = RenderSettings.from_meta(meta)
        if all(v is None or type(v) is str for v in key):  # values that cannot change in place
            self._settings = (key, settings)
        return settings

    def _rendered(self) -> Renderer:
        """The incremental renderer, fed every event so far. A change of settings (a policy
        installed) starts a fresh one: the result is always ``render(prefix, events, settings)``."""
        settings = self.settings()
        r = self._renderer
        if r is None or r.settings != settings:
            r = self._renderer = Renderer(settings, tools_in_use=bool(self._prefix.tools))
        n = len(self.events)
        if r.count < n:
            r.feed_all(self.events[r.count : n])
        return r

    def base_entries(self) -> list[tuple[int | None, Message]]:
        """``(event seq, message)`` of the message events with every recorded compaction
        applied (every status kept): what the compaction layers plan on. ``None`` seq for an
        inserted note."""
        return self._rendered().entries()

    def base_messages(self) -> list[Message]:
        return [m for _, m in self.base_entries()]

    def recorded_messages(self) -> list[tuple[int, Message]]:
        """Every message event as recorded, no compaction applied: what the store keeps."""
        return [(ev.seq, ev.message) for ev in self.events if isinstance(ev, MessageEvent)]

    def trajectory(self) -> list[Message]:
        """The messages after the system prompt, as they will be sent."""
        return self._rendered().trajectory()

    def messages(self) -> list[Message]:
        return [self._prefix.system_message(), *self.trajectory()]

    def build_request(self, tool_choice: ToolChoice = "auto", **kw: Any) -> ChatRequest:
        count = self._rendered().count
        req = ChatRequest(messages=tuple(self.messages()), tools=self._prefix.tools, tool_choice=tool_choice, **kw)
        self._built = (req, count)
        return req

    def marker_since_last_call(self) -> str | None:
        """``compaction`` or ``status_replaced`` if such an event was recorded since the last
        model reply (the rule: ``core/markers.py``)."""
        from ctxwright.core.markers import next_marker

        start = next(
            (j + 1 for j in range(len(self.events) - 1, -1, -1) if isinstance(self.events[j], AssistantEvent)), 0
        )
        status_before = any(isinstance(ev, StatusEvent) for ev in islice(self.events, start))  # no copy
        marker = None
        for ev in self.events[start:]:
            marker = next_marker(marker, ev, status_before)
            status_before = status_before or isinstance(ev, StatusEvent)
        return marker

    # -- calls -------------------------------------------------------------------------
    def record_call(
        self,
        request: ChatRequest,
        usage: Usage | None,
        *,
        ledger: dict[str, Any] | None = None,
        audit: dict[str, Any] | None = None,
        error: str | None = None,
        model: str | None = None,
        wall_ms: float | None = None,
    ) -> int:
        """Persist one model call: its request hash, the options it was sent with (``model``:
        the name the backend sent, default the session's), how many events it was rendered
        from, its usage and its wall time (``wall_ms``, measured around the backend call).
        Returns its index."""
        idx = self.call_count
        self.call_count += 1
        if self.store is not None:
            sha, nbytes = self._hasher.digest(request)  # == sha256(request.canonical_bytes()), its length
            u = usage or Usage()
            built = self._built
            events = built[1] if built is not None and built[0] is request else len(self.events)
            opts = RequestOptions.of(request, model if model is not None else self.model)
            record = CallRecord(
                session_id=self.id,
                call_index=idx,
                request_sha256=sha,
                request_bytes=nbytes,
                prefix_sha256=self._prefix.sha256,
                created_at=time.time(),
                prompt_tokens=u.prompt_tokens,
                cached_tokens=u.cached_tokens,
                completion_tokens=u.completion_tokens,
                prefill_ms=u.prefill_ms,
                decode_ms=u.decode_ms,
                error=error,
                model=opts.model,
                tool_choice=opts.tool_choice,
                max_tokens=opts.max_tokens,
                temperature=opts.temperature,
                event_count=events,
                wall_ms=wall_ms,
                usage=u.to_dict(),
                ledger=ledger or {},
                audit=CallAudit.from_dict(audit),
                extra=dict(opts.extra),
            )
            # never raises for the store: the reply this call returned must still be recorded
            # (Session.append raises once it is safe in the recovery file)
            problem: StoreUnusable | None = None
            with self._append_lock:
                if self.recovery is None:
                    try:
                        self.store.record_call(record)
                    except StoreUnusable as exc:
                        problem = exc
                if self.recovery is not None or problem is not None:
                    self._recover(lambda log: log.save_call(record), problem, what=f"model call {idx}")
        return idx
