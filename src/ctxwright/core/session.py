"""The session: a frozen prefix plus an append-only event log, from which every request
is rendered.

Provider rule protected: the API is stateless, so the harness owns the message list
and must send the same bytes again for everything it already sent (that is what the
provider cached). Events are therefore only ever *appended*; an older part of the
trajectory can be shown differently only by a later event that says so (a compaction,
added by later layers), never by editing the event in place. Every event goes to the
store the moment it is appended, so a crash loses nothing already recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxwright.core.messages import Message, Usage, sha256_text
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest, ToolChoice
from ctxwright.core.store import Store
from ctxwright.errors import PrefixFrozenError

#: Event kinds that carry one chat message in ``payload["message"]``. A ``status`` event
#: is the status bar's user message; the status view decides which of them are shown.
MESSAGE_KINDS = frozenset({"user", "assistant", "tool", "status"})


@dataclass(frozen=True)
class Event:
    """One thing that happened in a session, in order. ``seq`` starts at 0."""

    seq: int
    kind: str
    payload: dict[str, Any]
    created_at: float = field(default_factory=time.time)

    @property
    def message(self) -> Message | None:
        m = self.payload.get("message")
        return Message.from_wire(m) if m is not None else None


#: A view transform: given the events so far and the messages rendered so far, return the
#: messages to send. Later layers (status bar, compaction) register these; each must keep
#: the result a valid trajectory.
ViewTransform = Callable[["Session", list[Message]], list[Message]]


class Session:
    """Prefix + event log. Create with :meth:`start` or :meth:`resume`."""

    def __init__(
        self,
        prefix: Prefix,
        *,
        session_id: str,
        store: Store | None = None,
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
        self.view_transforms: list[ViewTransform] = []
        self.call_count = 0
        self._append_lock = threading.Lock()
        self._message_cache: list[Message] = []
        self._message_seqs: list[int] = []
        self._cached_upto = 0

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
        store: Store | None = None,
        backend: str | None = None,
        model: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Session:
        import uuid

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
    def resume(cls, store: Store, session_id: str) -> Session:
        """Load a session from the store; its next request starts with identical prefix bytes."""
        row = store.get_session(session_id)
        prefix = Prefix.from_dict(row.prefix)
        if prefix.sha256 != row.prefix_sha256:
            raise ValueError(
                f"session {row.id}: the stored prefix no longer hashes to {row.prefix_sha256[:12]}; "
                "the database was edited or is damaged. Start a new session."
            )
        events = [Event(e.seq, e.kind, e.payload, e.created_at) for e in store.events(row.id)]
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
    def append(self, kind: str, payload: dict[str, Any]) -> Event:
        """Append one event and persist it immediately."""
        with self._append_lock:  # tools running in parallel threads may record events too
            ev = Event(seq=len(self.events), kind=kind, payload=payload)
            if self.store is not None:
                self.store.append_event(self.id, ev.seq, ev.kind, ev.payload, ev.created_at)
            self.events.append(ev)
        return ev

    def add_user(self, text: str, **extra: Any) -> Event:
        return self.append("user", {"message": Message(role="user", content=text).to_wire(), **extra})

    def add_assistant(self, message: Message, usage: Usage | None = None, **extra: Any) -> Event:
        payload: dict[str, Any] = {"message": message.to_wire(), **extra}
        if usage is not None:
            payload["usage"] = usage.to_dict()
        return self.append("assistant", payload)

    def add_tool_result(
        self,
        tool_call_id: str,
        content: str,
        *,
        tool_name: str,
        ok: bool = True,
        elapsed_ms: float | None = None,
        **extra: Any,
    ) -> Event:
        msg = Message(role="tool", content=content, tool_call_id=tool_call_id)
        return self.append(
            "tool", {"message": msg.to_wire(), "tool_name": tool_name, "ok": ok, "elapsed_ms": elapsed_ms, **extra}
        )

    # -- rendering ---------------------------------------------------------------------
    def base_messages(self) -> list[Message]:
        """The trajectory as recorded, with every recorded ``compaction`` event applied.

        A compaction event never edits an earlier event; it says how the view shows them
        from now on: ``replace`` (event seq -> new content), ``drop`` (event seqs removed
        whole) and ``note`` (a user message inserted where the dropped span began). Applying
        the same stored events always gives the same bytes, so a resumed session renders
        exactly what it sent before. Decoded incrementally; a compaction rebuilds the view.
        """
        new = self.events[self._cached_upto :]
        if any(ev.kind == "compaction" for ev in new):
            self._message_cache, self._message_seqs = _render_events(self.events)
        else:
            for ev in new:
                if ev.kind in MESSAGE_KINDS:
                    self._message_cache.append(Message.from_wire(ev.payload["message"]))
                    self._message_seqs.append(ev.seq)
        self._cached_upto = len(self.events)
        return list(self._message_cache)

    def base_entries(self) -> list[tuple[int | None, Message]]:
        """``(event seq, message)`` pairs of :meth:`base_messages`; ``None`` for an inserted note."""
        msgs = self.base_messages()
        return list(zip(self._message_seqs, msgs, strict=False))

    def recorded_messages(self) -> list[tuple[int, Message]]:
        """Every message event as recorded, no compaction applied: what the store keeps."""
        return [(ev.seq, Message.from_wire(ev.payload["message"])) for ev in self.events if ev.kind in MESSAGE_KINDS]

    def trajectory(self) -> list[Message]:
        """The trajectory as it will be sent: base messages with every view transform applied."""
        msgs = self.base_messages()
        for transform in self.view_transforms:
            msgs = transform(self, msgs)
        return msgs

    def messages(self) -> list[Message]:
        return [self._prefix.system_message(), *self.trajectory()]

    def build_request(self, tool_choice: ToolChoice = "auto", **kw: Any) -> ChatRequest:
        return ChatRequest(messages=tuple(self.messages()), tools=self._prefix.tools, tool_choice=tool_choice, **kw)

    def marker_since_last_call(self) -> str | None:
        """``compaction`` or ``status_replaced`` if such an event was recorded since the last
        model reply (the rule: ``audit.next_marker``)."""
        from ctxwright.core.markers import next_marker

        start = next((j + 1 for j in range(len(self.events) - 1, -1, -1) if self.events[j].kind == "assistant"), 0)
        status_before = any(ev.kind == "status" for ev in self.events[:start])
        marker = None
        for ev in self.events[start:]:
            marker = next_marker(marker, ev.kind, ev.payload, status_before)
            status_before = status_before or ev.kind == "status"
        return marker

    def add_compaction(
        self,
        layer: str,
        *,
        replace: dict[int, str] | None = None,
        drop: Iterable[int] = (),
        note: tuple[int, str] | None = None,
        note_replaces_all: bool = False,
        **info: Any,
    ) -> Event:
        """Record one compaction: how the view shows earlier events from now on."""
        payload: dict[str, Any] = {
            "layer": layer,
            "replace": {str(k): v for k, v in (replace or {}).items()},
            "drop": sorted(drop),
            **info,
        }
        if note is not None:
            payload["note"] = {"before_seq": note[0], "text": note[1]}
            if note_replaces_all:
                payload["note"]["replaces"] = "all"
        return self.append("compaction", payload)

    # -- calls -------------------------------------------------------------------------
    def record_call(
        self,
        request: ChatRequest,
        usage: Usage | None,
        *,
        ledger: dict[str, Any] | None = None,
        audit: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> int:
        """Persist one model call's request hash and usage; returns its index."""
        idx = self.call_count
        self.call_count += 1
        if self.store is not None:
            raw = request.canonical_bytes()
            u = usage or Usage()
            self.store.record_call(
                self.id,
                idx,
                {
                    "request_sha256": sha256_text(raw.decode("utf-8")),
                    "request_bytes": len(raw),
                    "prefix_sha256": self._prefix.sha256,
                    "prompt_tokens": u.prompt_tokens,
                    "cached_tokens": u.cached_tokens,
                    "completion_tokens": u.completion_tokens,
                    "prefill_ms": u.prefill_ms,
                    "decode_ms": u.decode_ms,
                    "usage": u.to_dict(),
                    "ledger": ledger,
                    "audit": audit,
                    "error": error,
                },
            )
        return idx


def _render_events(events: list[Event]) -> tuple[list[Message], list[int | None]]:
    """Message events with every compaction applied, in order (the rule: ``compaction/view.py``)."""
    from ctxwright.core.compaction_view import CompactionView

    view = CompactionView()
    for ev in events:
        if ev.kind == "compaction":
            view.add(ev.payload)
    shown = view.apply(
        ((ev.seq, Message.from_wire(ev.payload["message"])) for ev in events if ev.kind in MESSAGE_KINDS),
        lambda text: Message(role="user", content=text),
        replace_content,
    )
    return [m for _, m in shown], [seq for seq, _ in shown]


def replace_content(m: Message, content: str) -> Message:
    """``m`` with new content; every pairing field (role, ids, tool calls) kept."""
    from dataclasses import replace as dc_replace

    return dc_replace(m, content=content)
