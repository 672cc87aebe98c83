"""The one renderer: the prefix plus the recorded events, as the messages that are sent.

Why one: the provider API is stateless, so a request rebuilt later -- on ``--resume``, by
the audit of a session export, by ``ctxwright export --requests`` -- is only evidence of
what was sent if it is rendered by exactly the code that rendered the live request. When
"what was sent" was rendered twice (live, and again offline), the two drifted: the offline
replay left the reasoning policy out, so a resumed ``strip`` session's first call was
audited as ``history_edited`` instead of ``append``. Here it is rendered once, from
recorded state only:

1. **compactions** (``core/compaction_view.py``): replaced contents, dropped events, notes;
2. **the status view**: a status recorded in ``replace`` mode hides the status before it
   (the previous one is invalidated once, instead of every stale status staying in the
   context -- ``status/bar.py`` weighs the two modes);
3. **the reasoning policy** (``core/reasoning.py``) recorded in the session's meta: whether
   each assistant turn's thinking is sent back, stripped, or kept for the current turn only;
4. **the wire form of an assistant turn without text** (a tool-call turn), recorded in the
   session's meta under :data:`NULL_CONTENT_KEY` when the session starts, as the backend
   asks (``Backend.null_content``): ``empty`` sends ``"content": ""``, ``omit`` sends no
   ``content`` key on a turn with tool calls (``""`` on one without: a server needs it
   there), ``null`` sends ``"content": null`` (sessions recorded before the rule). Why:
   llama-cpp-python's server answers ``null`` with HTTP 500 (its request model refuses it)
   and a missing key with HTTP 500 (its template reads ``message.content``); ``""`` is
   accepted there and by OpenAI, vLLM and llama.cpp's own server, so it is the default.
   OpenAI takes the key absent on a turn with tool calls, and there ``omit`` is cheaper for
   the client: the ``openai`` SDK checks every key of every message against every message
   type on every call, so a key left out is work saved per message per call
   (``benchmarks/per_turn.py`` measures it). The form is fixed per session:
   switching would change bytes the provider already cached, and its resume, audit and
   export must rebuild exactly what it sent.

:func:`render` is the pure function. :class:`Renderer` is its incremental form for the live
session (a long session renders on every call; re-decoding every event each time would be
quadratic): it is fed events one at a time, and ``render(prefix, events, settings)`` *is*
``Renderer`` fed all of them -- the same code, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any, Literal, cast

from ctxwright.core.compaction_view import CompactionView
from ctxwright.core.events import AssistantEvent, CompactionEvent, Event, MessageEvent, StatusEvent
from ctxwright.core.incremental import common_prefix_len
from ctxwright.core.markers import next_marker
from ctxwright.core.messages import Message
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import META_KEY, ReasoningMode, ReasoningPolicy

#: Session meta key: how an assistant message without text is sent (see the module docstring).
NULL_CONTENT_KEY = "null_content"
NullContent = Literal["null", "empty", "omit"]
#: Every form a session may record.
NULL_CONTENT_FORMS: tuple[NullContent, ...] = ("null", "empty", "omit")
#: The form recorded with a session started without one (``Session.start``): every server
#: takes it (the module docstring).
CURRENT_NULL_CONTENT: NullContent = "empty"


@dataclass(frozen=True)
class RenderSettings:
    """What the renderer needs besides the events, read from the session record (its meta),
    never from live objects: a resumed session and an offline reader get the same settings.

    ``reasoning`` is ``None`` when no policy was recorded: reasoning goes back as recorded.
    ``null_content`` is ``"null"`` when no form was recorded (a session from before the rule).
    """

    reasoning: ReasoningMode | None = None
    null_content: NullContent = "null"

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> RenderSettings:
        meta = meta or {}
        form = meta.get(NULL_CONTENT_KEY, "null")
        if form not in NULL_CONTENT_FORMS:
            raise ValueError(f"session meta {NULL_CONTENT_KEY}={form!r}: expected 'null', 'empty' or 'omit'")
        mode = meta.get(META_KEY)
        reasoning = ReasoningPolicy(mode).mode if mode is not None else None  # an unknown mode raises
        return cls(reasoning=reasoning, null_content=cast(NullContent, form))

    @property
    def policy(self) -> ReasoningPolicy | None:
        return ReasoningPolicy(self.reasoning) if self.reasoning is not None else None


def replace_content(m: Message, content: str) -> Message:
    """``m`` with new content; every pairing field (role, ids, tool calls) kept."""
    return dc_replace(m, content=content)


def _note(text: str) -> Message:
    return Message(role="user", content=text)


Entry = tuple[int | None, Message]


class Renderer:
    """The incremental renderer: feed events in order, read the trajectory at any point.

    Invariant (what makes it provably the pure function): every cache below is either the
    value a full recomputation would give, or ``None`` and recomputed. A message event is
    appended to a cached view only when the compaction rule would place it last anyway (not
    dropped, not replaced, no note waiting behind it); anything else drops the cache.
    """

    def __init__(self, settings: RenderSettings | None = None, *, tools_in_use: bool) -> None:
        self.settings = settings or RenderSettings()
        self.tools_in_use = tools_in_use
        self._policy = self.settings.policy
        #: events fed so far
        self.count = 0
        self._view = CompactionView()
        self._entries: list[tuple[int, Message]] = []  # every message event, as recorded
        self._statuses: list[int] = []  # seqs of status events, in order
        self._hidden: set[int] = set()  # status seqs a later replace-mode status hides
        self._compacted: list[Entry] | None = []  # compaction view, every status kept
        self._shown: list[Entry] | None = []  # ... minus hidden statuses
        self._out: list[Message] | None = None  # ... with the reasoning policy applied
        self._memo: dict[int, tuple[Message, Message]] = {}  # id(message) -> (message, as rendered)
        self._wired: dict[int, tuple[Message, Message]] = {}  # the same for the empty-content form
        # the last trajectory rendered one message at a time (a per-message policy), and the
        # shown entries it was rendered from: the next one renders only the entries after the
        # ones the two share (core/incremental.py), not the whole history again
        self._rendered_from: list[Entry] = []
        self._rendered: list[Message] = []

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, event: Event) -> None:
        self.count += 1
        self._out = None
        if isinstance(event, CompactionEvent):
            self._view.add(event)
            self._compacted = self._shown = None
            return
        if not isinstance(event, MessageEvent):
            return
        entry = (event.seq, event.message)
        last = self._entries[-1][0] if self._entries else -1
        self._entries.append(entry)
        if isinstance(event, StatusEvent):
            if event.mode == "replace" and self._statuses:
                hidden = self._statuses[-1]
                self._hidden.add(hidden)
                if self._shown is not None:  # the previous status, near the end: taken out there
                    _remove_last(self._shown, hidden)
            self._statuses.append(event.seq)
        seq, view = event.seq, self._view
        at_end = (
            seq > last
            and seq not in view.drop
            and seq not in view.replace
            and seq not in self._hidden
            and all(before <= seq for before in view.notes)
        )
        if not at_end:
            self._compacted = self._shown = None
            return
        if self._compacted is not None:
            self._compacted.append(entry)
        if self._shown is not None:
            self._shown.append(entry)

    def feed_all(self, events: Iterable[Event]) -> Renderer:
        for ev in events:
            self.feed(ev)
        return self

    # -- reading -----------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """``(event seq, message)`` of the message events with every compaction applied, every
        status kept (what the compaction layers plan on); ``None`` seq for an inserted note."""
        if self._compacted is None:
            self._compacted = self._view.apply(self._entries, _note, replace_content)
        return list(self._compacted)

    def shown_entries(self) -> list[Entry]:
        """:meth:`entries` minus the statuses a later ``replace``-mode status hides."""
        if self._shown is None:
            hidden = self._hidden
            self._shown = [e for e in self.entries() if e[0] is None or e[0] not in hidden]
        return list(self._shown)

    def trajectory(self) -> list[Message]:
        """The messages after the system prompt, as sent."""
        if self._out is None:
            if self._policy is None or self._policy.per_message:
                self._out = self._render_new()
            else:
                out = self._reasoned([m for _, m in self.shown_entries()])
                self._out = self._empty_content(out) if self.settings.null_content != "null" else out
        return list(self._out)

    def _render_new(self) -> list[Message]:
        """The trajectory when each message renders on its own (no policy, or a per-message
        one): the rendered messages of the last call are kept for the entries this one shares
        with it, and only the rest go through the policy and the wire form -- by the same
        memoized steps as the whole-list path, so each message is the same object every call."""
        if self._shown is None:
            self.shown_entries()
        shown = self._shown
        assert shown is not None
        k = common_prefix_len(self._rendered_from, shown)
        del self._rendered_from[k:], self._rendered[k:]
        policy, empty = self._policy, self.settings.null_content != "null"
        for entry in shown[k:]:
            m = entry[1]
            if policy is not None:
                m = self._reasoned_one(m, policy.apply_one(m))
            if empty:
                m = self._empty_content([m])[0]
            self._rendered_from.append(entry)
            self._rendered.append(m)
        return list(self._rendered)

    def _reasoned_one(self, before: Message, after: Message) -> Message:
        """:meth:`_reasoned`'s memo for one message."""
        if before is after:
            return after
        hit = self._memo.get(id(before))
        if hit is not None and hit[0] is before and hit[1] == after:
            return hit[1]
        self._memo[id(before)] = (before, after)
        return after

    def _empty_content(self, msgs: list[Message]) -> list[Message]:
        """Assistant messages without text in the session's wire form: ``content=""``, or for
        ``omit`` no content key when the turn has tool calls; the same object every call
        (memoized by identity, like :meth:`_reasoned`)."""
        memo = self._wired
        omit = self.settings.null_content == "omit"
        out = list(msgs)
        for i, m in enumerate(msgs):
            if m.role != "assistant" or m.content is not None:
                continue
            hit = memo.get(id(m))
            if hit is None or hit[0] is not m:
                wired = dc_replace(m, omit_content=True) if omit and m.tool_calls else dc_replace(m, content="")
                hit = memo[id(m)] = (m, wired)
            out[i] = hit[1]
        return out

    def _reasoned(self, msgs: list[Message]) -> list[Message]:
        """The reasoning policy over the shown messages. A message the policy rewrites is
        rewritten to the same object on every call (memoized by identity), so its canonical
        bytes are computed once, not once per request."""
        if self._policy is None:
            return msgs
        out = self._policy.apply(msgs, tools_in_use=self.tools_in_use, index_offset=1)
        memo = self._memo
        for i, (before, after) in enumerate(zip(msgs, out, strict=True)):
            if before is after:
                continue
            hit = memo.get(id(before))
            if hit is not None and hit[0] is before and hit[1] == after:
                out[i] = hit[1]
            else:
                memo[id(before)] = (before, after)
        return out


def _remove_last(entries: list[Entry], seq: int) -> None:
    """Take the entry of event ``seq`` out of ``entries`` (each event has at most one), looking
    from the end."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i][0] == seq:
            del entries[i]
            return


def render(prefix: Prefix, events: Iterable[Event], settings: RenderSettings | None = None) -> list[Message]:
    """The messages of the request made of ``prefix`` and ``events``: system prompt first."""
    r = Renderer(settings, tools_in_use=bool(prefix.tools)).feed_all(events)
    return [prefix.system_message(), *r.trajectory()]


def render_at(
    prefix: Prefix, events: Sequence[Event], settings: RenderSettings | None, counts: Iterable[int]
) -> dict[int, list[Message]]:
    """``render(prefix, events[:n], settings)`` for every ``n`` in ``counts``, in one pass."""
    r = Renderer(settings, tools_in_use=bool(prefix.tools))
    system = prefix.system_message()
    out: dict[int, list[Message]] = {}
    for n in sorted(set(counts)):
        r.feed_all(events[r.count : n])
        out[n] = [system, *r.trajectory()]
    return out


@dataclass(frozen=True)
class RenderedCall:
    """One model call rebuilt from the events: the reply that answered it, the change marker
    of its request (``core/markers.py``) and its messages after the system prompt."""

    reply: AssistantEvent
    marker: str | None
    messages: list[Message]


def replay_calls(
    events: Iterable[Event], settings: RenderSettings | None = None, *, tools_in_use: bool
) -> Iterator[RenderedCall]:
    """Every model call of a session, in order: the assistant event with ``call_index`` k
    answered the request rendered from every event before it."""
    r = Renderer(settings, tools_in_use=tools_in_use)
    marker: str | None = None
    status_before = False
    for ev in events:
        if isinstance(ev, AssistantEvent):
            if ev.call_index is not None:
                yield RenderedCall(ev, marker, r.trajectory())
            marker = None
        else:
            marker = next_marker(marker, ev, status_before)
            status_before = status_before or isinstance(ev, StatusEvent)
        r.feed(ev)
