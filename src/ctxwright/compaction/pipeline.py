"""The compaction layers as an ordered list of tiers, and the one step that applies a tier's plan.

A *tier* is one layer seen from :meth:`ContextManager.before_call
<ctxwright.compaction.manager.ContextManager.before_call>`: when it wants to run (the request's
size, the trigger, the breaker) and what it would change (a :class:`Plan`: contents replaced,
events dropped, a note where they were). The rule itself stays in its own module
(``noise.py``, ``archival.py``, ``clearing.py``, ``full.py``, ``trim.py``, ``strategies.py``);
a tier only feeds it the session and turns its answer into a plan.

Every plan then goes through the same :func:`apply`: check the view it would produce, record
one ``compaction`` event, measure the request again, report. The check comes *before* the
event is stored, because a stored compaction is replayed on every later render and every
resume (``core/compaction_view.py``): a plan that broke an invariant -- a tool result without
its call (``pairing.py``), half a parallel batch (``batches.py``), a reasoning loop cut apart
(``reasoning_loops.py``), the task or a skills catalog gone (``pinned.py``) -- would otherwise make
every later request of the session one the provider rejects; and a plan that would hide an
activated skill's instructions without re-attaching or naming them (``skills.py``) would leave
the model working without the rules it loaded.

:func:`tiers_for` builds the list from :class:`CompactionConfig`, cheapest first; the order is
the one place to read it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ctxwright.compaction import archival, background, full, hooks, ledger, pins, skills, survival
from ctxwright.compaction.check import violations
from ctxwright.compaction.clearing import clear_old_results
from ctxwright.compaction.config import CompactionConfig
from ctxwright.compaction.noise import unused_results
from ctxwright.compaction.pinned import catalog_messages
from ctxwright.compaction.planner import Decision
from ctxwright.compaction.strategies import COMPRESSED, NewResult, compress_one
from ctxwright.compaction.trim import note_text, plan_trim
from ctxwright.core.events import AssistantEvent, CompactionEvent, CompactionNote, ToolEvent, UserEvent
from ctxwright.core.messages import Message
from ctxwright.core.progress import TO_DICT, CompactionAhead
from ctxwright.core.render import render

if TYPE_CHECKING:
    from ctxwright.compaction.breaker import CircuitBreaker
    from ctxwright.compaction.hooks import CompactionHooks
    from ctxwright.compaction.ledger import ItemCache, Ledger
    from ctxwright.compaction.strategies import StrategyContext
    from ctxwright.compaction.summarizer import Summarizer
    from ctxwright.core.progress import EventSink
    from ctxwright.core.session import Session
    from ctxwright.core.tokens import TokenCounter


@dataclass
class CompactionReport:
    """One layer's effect before one call: what it changed and what the request shrank by."""

    layer: str
    messages_changed: int
    tokens_before: int
    tokens_after: int
    event_seq: int
    #: policy ``cost``: the planner's decision that ran this tier (``planner.py``)
    decision: Decision | None = None
    #: the recorded event's layer (``full`` for both stages of ``full_stage1``/``full_stage2``)
    kind: str = ""
    #: when the tier started planning and when its event was recorded (``time.time()``): the
    #: reports reach ``on_event`` after every tier ran, and a trace places each in time
    started_at: float | None = None
    ended_at: float | None = None
    #: what the compaction hid and which of its identifiers are still in view (``ledger.py``,
    #: read from the recorded event); what an ``after_compaction`` hook reads (``hooks.py``)
    ledger: Ledger | None = field(default=None, metadata={TO_DICT: False})


@dataclass
class Plan:
    """What one tier wants the view to show from now on, by event seq; nothing recorded yet.

    The fields are those of :meth:`Session.add_compaction <ctxwright.core.session.Session.add_compaction>`;
    ``info`` goes into the event's payload as well, ``changed`` into the report."""

    changed: int
    replace: dict[int, str] = field(default_factory=dict)
    drop: list[int] = field(default_factory=list)
    note: tuple[int, str] | None = None
    note_replaces_all: bool = False
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def replacing(cls, replace: dict[int, str]) -> Plan | None:
        """A plan that only swaps contents (every call stays answered); ``None`` when empty."""
        return cls(len(replace), replace=replace) if replace else None

    def event(self, layer: str, seq: int) -> CompactionEvent:
        """The ``compaction`` event this plan would record as event ``seq`` (what the renderer reads)."""
        note = CompactionNote(*self.note, self.note_replaces_all) if self.note is not None else None
        return CompactionEvent(
            seq=seq, layer=layer, replace=dict(self.replace), drop=tuple(sorted(self.drop)), note=note
        )


class Compactor(Protocol):
    """What the tiers read and use of the compaction manager (``manager.py: ContextManager``,
    which runs them): declared here so the manager imports the tiers and never the other way
    round -- a tier that needs more of the manager says so in this one list."""

    config: CompactionConfig
    counter: TokenCounter
    summarizer: Summarizer | None
    breaker: CircuitBreaker
    known: list[str]
    last_compaction_call: int
    ledger_items: ItemCache

    @property
    def on_event(self) -> EventSink: ...

    @property
    def hooks(self) -> CompactionHooks | None: ...

    @property
    def effective_window(self) -> int: ...

    def tokens_of(self, m: Message) -> int: ...

    def request_tokens(self, session: Session) -> int: ...

    def original_text(self, session: Session, seq: int) -> str: ...

    def ledger_text(self, session: Session, seq: int) -> str | None: ...

    def strategy_context(self, session: Session, call_index: int) -> StrategyContext: ...

    def summarize(
        self, session: Session, call_index: int, text: str, instruction: str, max_chars: int, query: str | None = None
    ) -> str | None: ...


@dataclass
class PassState:
    """One pass of the tiers before one model call."""

    manager: Compactor
    session: Session
    call_index: int
    #: the request's size now; :func:`apply` measures it again after each recorded plan
    tokens: int
    #: whether the last compaction is at least ``min_calls_between`` calls back (as the pass began)
    spaced: bool
    #: policy ``cost``: the planner's decision (``planner.py``) -- whether the tiers run and how
    #: deep; ``None``: policy ``eager``, the trigger below
    decision: Decision | None = None
    _triggered: bool | None = field(default=None, init=False)
    #: the plan the last notice was sent for (``notify``): one notice per compaction
    _noticed: frozenset[int] | None = field(default=None, init=False)
    #: payload every event of this pass records besides its own (``background.py``:
    #: ``overflow_retry`` on the compaction forced by the server's context-length error)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self) -> CompactionConfig:
        return self.manager.config

    @property
    def window(self) -> int:
        return self.manager.effective_window

    @property
    def trigger(self) -> float:
        return self.config.trigger_ratio * self.window

    def over_trigger(self) -> bool:
        """Whether a tier still has work: over the trigger (eager) or over the planner's depth (cost)."""
        if self.decision is not None:
            return self.tokens > self.decision.target
        return self.tokens > self.trigger

    def triggered(self) -> bool:
        """Whether the tiers behind the trigger run in this pass: the request is over the
        trigger and the last compaction far enough back (batches, never every turn: each one
        re-prefills what follows it), or it is over the window itself (no choice). Decided
        once, when the first such tier is reached, so a pass that began over the window runs
        on to the trigger even once an early tier has brought it under the window."""
        if self._triggered is None:
            if self.decision is not None:
                self._triggered = self.decision.compact
            else:
                self._triggered = (self.over_trigger() and self.spaced) or self.tokens > self.window
        return self._triggered

    def llm_available(self) -> bool:
        """A summarizer is configured and the circuit breaker lets a summary through."""
        return self.manager.summarizer is not None and self.manager.breaker.allow(self.call_index)


class Tier(Protocol):
    """One layer as the pipeline runs it: when it wants to, and what it would change."""

    @property
    def name(self) -> str:
        """The name in :class:`CompactionReport`."""
        ...

    @property
    def layer(self) -> str:
        """The ``layer`` of the recorded ``compaction`` event."""
        ...

    @property
    def after_trigger(self) -> bool:
        """Runs only when :meth:`PassState.triggered` (every tier but ``adaptive``, which has its own threshold)."""
        ...

    def wants(self, state: PassState) -> bool:
        """Whether to plan now (besides the trigger), from the request's size and the breaker."""
        ...

    def plan(self, state: PassState) -> Plan | None:
        """What to change; ``None``: nothing to do (or a summary failed)."""
        ...


# -- the view helpers the tiers share ------------------------------------------------------
def replaced_already(session: Session) -> set[int]:
    """Event seqs whose content a recorded compaction replaced: no tier replaces them twice."""
    done: set[int] = set()
    for ev in session.events:
        if isinstance(ev, CompactionEvent):
            done.update(ev.replace)
    return done


def unanswered_results(session: Session) -> set[int]:
    """Results the model has not answered yet (after the last assistant turn) stay as they are."""
    out: set[int] = set()
    for ev in reversed(session.events):
        if isinstance(ev, AssistantEvent):
            break
        if isinstance(ev, ToolEvent):
            out.add(ev.seq)
    return out


def exempt(session: Session) -> set[int]:
    """Results no tier rewrites: those the model has not answered yet, every activated
    skill's instructions (``skills.py``: the model follows them for the rest of the task)
    and every pinned event (``pins.py``)."""
    return unanswered_results(session) | skills.body_seqs(session.events) | pins.pinned_seqs(session.events)


def tool_events(session: Session) -> dict[int, ToolEvent]:
    """Tool event seq -> the event (tool name, ok, result id, tokens)."""
    return {ev.seq: ev for ev in session.events if isinstance(ev, ToolEvent)}


# -- the tiers, cheapest first ---------------------------------------------------------------
@dataclass
class Adaptive:
    """Strategy ``adaptive`` (strategies.py): once the request passes ``adaptive_ratio`` of the
    window, every result not compressed yet is compressed once and marked [COMPRESSED]."""

    name: str = "adaptive"
    layer: str = "adaptive"
    after_trigger: bool = False

    def wants(self, state: PassState) -> bool:
        return state.llm_available() and state.tokens > state.config.adaptive_ratio * state.window

    def plan(self, state: PassState) -> Plan | None:
        m, session = state.manager, state.session
        ctx = m.strategy_context(session, state.call_index)
        done = replaced_already(session) | skills.body_seqs(session.events) | pins.pinned_seqs(session.events)
        out: dict[int, str] = {}
        for seq, msg in session.base_entries():
            if msg.role != "tool" or seq is None or seq in done or (msg.content or "").startswith(COMPRESSED):
                continue
            ev = session.events[seq]
            tev = ev if isinstance(ev, ToolEvent) else None
            r = NewResult(
                (tev.tool_name if tev else None) or "tool",
                (tev.result_id if tev else None) or msg.tool_call_id or str(seq),
                m.original_text(session, seq),
                msg.content or "",
                tev.ok if tev else True,
            )
            new = compress_one("adaptive", r, ctx)
            if new is not None:
                out[seq] = new
                m.known.append(new)
            elif not state.llm_available():
                break
        return Plan.replacing(out)


@dataclass
class Noise:
    """Layer 2 (noise.py): results no later step used become one-line markers."""

    name: str = "noise"
    layer: str = "noise"
    after_trigger: bool = True

    def wants(self, state: PassState) -> bool:
        return True

    def plan(self, state: PassState) -> Plan | None:
        s = state.session
        skip = replaced_already(s) | exempt(s)
        return Plan.replacing(unused_results(s.base_entries(), tool_events(s), state.config.unused_after_turns, skip))


@dataclass
class Archival:
    """Layer 4 (archival.py): each old tool round gets one LLM summary instead of a bare placeholder,
    so it runs before clearing would blank those rounds."""

    name: str = "archival"
    layer: str = "archival"
    after_trigger: bool = True

    def wants(self, state: PassState) -> bool:
        return state.over_trigger() and state.llm_available()

    def plan(self, state: PassState) -> Plan | None:
        m, s = state.manager, state.session
        return Plan.replacing(
            archival.archive(
                s.base_entries(),
                state.config.keep_recent_results,
                replaced_already(s) | exempt(s),
                lambda text: m.summarize(s, state.call_index, text, archival.INSTRUCTION, 600),
            )
        )


@dataclass
class Clearing:
    """Layer 3 (clearing.py): results older than the newest K become placeholders."""

    name: str = "clearing"
    layer: str = "clearing"
    after_trigger: bool = True

    def wants(self, state: PassState) -> bool:
        return state.over_trigger()

    def plan(self, state: PassState) -> Plan | None:
        cfg, s = state.config, state.session
        return Plan.replacing(
            clear_old_results(
                s.base_entries(),
                tool_events(s),
                cfg.keep_recent_results,
                cfg.min_clear_tokens,
                state.manager.counter.count,
                replaced_already(s) | exempt(s),
                int(cfg.keep_recent_share * state.window),
            )
        )


@dataclass
class FullCompaction:
    """Layer 5 (full.py): one LLM summary note for the older trajectory; stage 1 the older half,
    stage 2 (only if still over the trigger -- the planner's depth under policy cost) everything
    before the newest turn."""

    stage: int
    layer: str = "full"
    after_trigger: bool = True

    @property
    def name(self) -> str:
        return f"full_stage{self.stage}"

    def wants(self, state: PassState) -> bool:
        return state.over_trigger() and state.llm_available()

    def plan(self, state: PassState) -> Plan | None:
        m, s = state.manager, state.session
        picked = full_span(state, self.stage)
        seqs = [seq for seq, _ in picked if seq is not None]
        if not seqs:
            return None
        notify(state, self.layer, seqs, self.stage)  # before the summary is written
        text = full.render([msg for _, msg in picked])
        summary = m.summarize(s, state.call_index, text, full.INSTRUCTION, 2_000)
        if summary is None:
            return None
        return full_plan(state, self.stage, seqs, len(picked), summary)


def full_span(state: PassState, stage: int) -> list[tuple[int | None, Message]]:
    """The entries full compaction's ``stage`` summarises now (``full.plan_span``); the tier and
    a summary prepared ahead (``background.py``) pick the same."""
    s = state.session
    entries = s.base_entries()
    idx = full.plan_span(
        entries, stage, state.manager.tokens_of, catalog_messages(s.events), pins.pinned_messages(s.events)
    )
    return [entries[i] for i in idx]


def full_plan(state: PassState, stage: int, seqs: list[int], n: int, summary: str) -> Plan:
    """The plan of a full compaction: ``seqs`` (``n`` entries with the notes among them) become
    one note with ``summary``, skill instructions re-attached; one builder for the tier and for
    a summary prepared ahead (``background.py``), so both record the same event."""
    plan = Plan(
        n,
        drop=seqs,
        note=(min(seqs), full.note(summary, n, stage)),
        note_replaces_all=True,
        info={"stage": stage},
    )
    return carry_skills(state, "full", plan)[0]


@dataclass
class Trim:
    """Last resort (trim.py): drop the oldest whole turns, down to ``trim_target_ratio`` of the
    window (the planner's depth under policy cost) -- well below the trigger, so the next compaction is many turns away."""

    name: str = "trim"
    layer: str = "trim"
    after_trigger: bool = True

    def wants(self, state: PassState) -> bool:
        return state.over_trigger()

    def plan(self, state: PassState) -> Plan | None:
        s = state.session
        target = (
            state.decision.target if state.decision is not None else int(state.config.trim_target_ratio * state.window)
        )
        users = {ev.seq for ev in s.events if isinstance(ev, UserEvent)}
        catalogs, pinned = catalog_messages(s.events), pins.pinned_messages(s.events)
        excess = state.tokens - target
        plan: Plan | None = None
        for _ in range(2):  # once more when the re-attached skills take back part of what was freed
            drop, first = plan_trim(s.base_entries(), state.manager.tokens_of, excess, users, catalogs, pinned)
            if not drop or first is None:
                return plan
            total = len(drop) + sum(len(ev.drop) for ev in s.events if isinstance(ev, CompactionEvent))
            plan, added = carry_skills(state, self.layer, Plan(len(drop), drop=drop, note=(first, note_text(total))))
            if not added:
                break
            excess += added
        return plan


def tiers_for(config: CompactionConfig) -> list[Tier]:
    """The tiers ``config`` turns on, in the order they run: cheapest first, each only while the
    request is still too big. The LLM tiers are listed whenever configured; whether a summarizer
    is there and the breaker lets it through is asked when they would run."""
    tiers: list[Tier] = []
    if config.strategy == "adaptive":
        tiers.append(Adaptive())
    if config.drop_unused:
        tiers.append(Noise())
    if config.archival_summaries:
        tiers.append(Archival())
    tiers.append(Clearing())
    if config.full_compaction:
        tiers += [FullCompaction(1), FullCompaction(2)]
    tiers.append(Trim())
    return tiers


# -- the one shared step -------------------------------------------------------------------
def carry_skills(state: PassState, layer: str, plan: Plan) -> tuple[Plan, int]:
    """``plan`` with the skill instructions its drops would hide re-attached at the end of its
    note, newest first, within the skill budget (``skills.py``), and the tokens that adds.
    Bodies an earlier note carried count as hidden when this note supersedes that one."""
    s = state.session
    bodies = skills.active_bodies(s.events)
    if not bodies or not plan.drop:
        return plan, 0
    shown = skills.shown_skills(s.events, preview(s, layer, plan))
    missing = [(name, content) for name, content in bodies if name not in shown]
    count = state.manager.counter.count
    text, _ = skills.carry_text(missing, state.config.skill_budget(state.window), count)
    if not text:
        return plan, 0
    before, note = plan.note if plan.note is not None else (min(plan.drop), "")
    return dc_replace(plan, note=(before, f"{note}\n\n{text}" if note else text)), count(text)


def preview(session: Session, layer: str, plan: Plan) -> list[Message]:
    """The trajectory the session would send with ``plan`` recorded: the one renderer
    (``core/render.py``) over the events plus the compaction event the plan would add, so the
    check runs on exactly what every later render and resume will send."""
    events = [*session.events, plan.event(layer, len(session.events))]
    return render(session.prefix, events, session.settings())[1:]


#: a compaction that hides at least this many events is "deep": a notice goes out before it
DEEP_EVENTS = 8


def notify(state: PassState, layer: str, hidden: list[int], stage: int = 0) -> None:
    """Tell ``on_event`` (``CompactionAhead``) what a compaction is about to hide and what it
    will cost the cache: the tokens after its cut that stay and must be prefilled again."""
    key = frozenset(hidden)
    if not key or key == state._noticed:
        return
    state._noticed = key
    tokens_of = state.manager.tokens_of
    entries = state.session.base_entries()
    first = next((i for i, (seq, _) in enumerate(entries) if seq in key), len(entries))
    after = entries[first:]
    hidden_tokens = sum(tokens_of(m) for seq, m in after if seq in key)
    reprefill = sum(tokens_of(m) for seq, m in after if seq not in key)
    state.manager.on_event(
        CompactionAhead(
            layer=layer,
            stage=stage,
            call_index=state.call_index,
            events=len(key),
            hidden_tokens=hidden_tokens,
            tokens_before=state.tokens,
            reprefill_tokens=reprefill,
        )
    )


def check(state: PassState, layer: str, plan: Plan) -> tuple[list[Message], list[str]]:
    """The view ``plan`` would produce and what is wrong with it (empty: a valid request)."""
    s = state.session
    view = preview(s, layer, plan)
    bad = violations(
        [m for _, m in s.recorded_messages()], view, catalog_messages(s.events), pins.pinned_messages(s.events)
    )
    lost = skills.lost_skills(s.events, s.trajectory(), view)
    if lost:
        bad.append(
            f"the instructions of skill(s) {', '.join(lost)} would be dropped without being re-attached or named"
        )
    return view, bad


def apply(state: PassState, tier: Tier, plan: Plan) -> CompactionReport | None:
    """The user's ``before_compaction`` hook, then check, record, measure, report, and the
    ``after_compaction`` hook: the end of every tier. ``None``: the hook vetoed the plan
    (``hooks.py`` recorded that; nothing else is).

    A plan whose view breaks an invariant is a bug in ctxwright: it raises before anything is
    recorded (the session stays as it was, resumable) and before any request is sent."""
    reviewed = hooks.run_before(state, tier, plan, partial(check, state, tier.layer))
    if reviewed is None:
        return None
    plan, s = reviewed, state.session
    view, bad = check(state, tier.layer, plan)
    if bad:
        raise AssertionError(
            f"ctxwright compaction tier {tier.name!r} would produce an invalid context (nothing recorded): "
            + "; ".join(bad)
        )
    hidden = sorted(set(plan.replace) | set(plan.drop))
    if len(hidden) >= DEEP_EVENTS or plan.note_replaces_all:
        notify(state, tier.layer, hidden, int(plan.info.get("stage") or 0))
    ev = s.add_compaction(
        tier.layer,
        replace=plan.replace,
        drop=plan.drop,
        note=plan.note,
        note_replaces_all=plan.note_replaces_all,
        call_index=state.call_index,
        tokens_before=state.tokens,
        ledger=loss_ledger(state, plan, view),
        **plan.info,
        **({"planner": state.decision.to_dict()} if state.decision is not None else {}),
    )
    after = state.manager.request_tokens(s)
    report = CompactionReport(
        tier.name,
        plan.changed,
        state.tokens,
        after,
        ev.seq,
        state.decision,
        kind=tier.layer,
        ended_at=time.time(),
        ledger=ledger.read(ev),
    )
    state.manager.last_compaction_call = state.call_index
    state.tokens = after
    hooks.run_after(state, tier, report)
    return report


def loss_ledger(state: PassState, plan: Plan, view: list[Message]) -> dict[str, Any]:
    """What ``plan`` hides and which of its identifiers ``view`` (and the system prompt) still
    shows (``ledger.py``); hidden results are read from their offload files."""
    s = state.session
    hidden = set(plan.replace) | set(plan.drop)

    cache = state.manager.ledger_items
    seen = ledger.Seen([s.prefix.system_prompt, *ledger.visible_parts(view)], cache.words_of)
    out = ledger.build(s.events, hidden, seen, partial(state.manager.ledger_text, s), cache)
    out.update(pins.ledger_fields(s.events))  # what the pins kept whole through this compaction
    out.update(  # the declared items it hid (CompactionConfig.keep): still in view or lost
        survival.ledger_fields(
            state.config.keep, s.events, hidden, seen, plan.note, plan.replace, s.prefix.system_prompt, cache
        )
    )
    return out


def run(tiers: list[Tier], state: PassState) -> list[CompactionReport]:
    """Each tier in order: plan when it wants to, apply what it plans."""
    reports: list[CompactionReport] = []
    for tier in tiers:
        if tier.after_trigger and not state.triggered():
            continue
        if not tier.wants(state):
            continue
        started, waited = time.time(), time.monotonic()
        plan = tier.plan(state)
        if plan is not None:
            background.stamp(state, plan, waited)  # stall_ms: the loop waited on this one
            report = apply(state, tier, plan)
            if report is not None:  # None: vetoed by the user's hook (hooks.py)
                report.started_at = started  # planning included: an LLM summary is written there
                reports.append(report)
    return reports
