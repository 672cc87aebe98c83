"""The user's compaction hooks: ``before_compaction(plan)`` and ``after_compaction(report)``.

Why: compaction decides alone what the model stops seeing, and the most repeated complaint
about agent context is that it hid what mattered (an instruction, a path, a constraint) and
nobody could see or stop it. A hook lets the application that runs the agent look at each
plan before it is recorded and veto it, take events out of it (they stay in view) or add a
line to its note, and read each compaction's loss ledger afterwards.

The rules, each because of what the provider or the loop would otherwise do:

* A hook runs in a worker thread and is given ``timeout_s`` (default 5 s): a hook that
  raises, hangs or returns something else never stops the loop; the compaction goes on by
  the default rule (the plan as the tier made it) and the failure is recorded and reported.
  A hung hook's thread cannot be killed; it is left behind as a daemon, and while
  :data:`MAX_HUNG` such threads still run the hook is not called again (``skipped``), so
  threads stay bounded whatever the hook does.
* An edited plan goes through the same invariant check as every plan (``pipeline.check``:
  pairing, parallel batches, reasoning loops, the task, skills): keeping a tool result while
  its call is dropped would make every later request one the provider rejects, so such an
  edit is ``refused`` and the plan applies as the tier made it.
* A veto (or an edit) is honoured only while the request fits the effective window. Over
  it, the provider would refuse the next call whatever the hook wants, so the plan applies
  as made and the event says ``overridden``; a veto therefore postpones a compaction, never
  past the point where the request stops fitting.
* The hooks are callables and are never stored: the session records what they did
  (``core/events.py: HookEvent``, kind ``compaction_hook``), not what they are; a resumed
  session is given its hooks again (``compaction_hooks=``).

The hooks see read-only values (:class:`PlanView`, the report): they run in another thread
while the loop waits, and must not touch the session.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import Field, dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from ctxwright.core.events import HookEvent, MessageEvent
from ctxwright.core.progress import EventSink, ProgressEvent
from ctxwright.core.redact import redact
from ctxwright.errors import Veto

if TYPE_CHECKING:
    from ctxwright.core.messages import Message
    from ctxwright.core.session import Session
    from ctxwright.core.tokens import TokenCounter

__all__ = [
    "MAX_HUNG",
    "CompactionHookWarning",
    "CompactionHooks",
    "PlanEdit",
    "PlanView",
    "Veto",
    "run_after",
    "run_before",
]

#: Hook threads that did not return within their timeout and still run: while this many
#: are alive, the hook is not called again (each would leave one more thread behind).
MAX_HUNG = 2
#: Characters of an error or a veto reason kept in the event.
REASON_CHARS = 500


@dataclass(frozen=True)
class PlanEdit:
    """``before_compaction``'s change to a plan: ``keep`` the events of these seqs as they are
    (taken out of the plan's replacements and drops), ``note`` a text added at the end of the
    compaction note (of a plan without a note: at the end of the first replaced content)."""

    keep: Iterable[int] = ()
    note: str | None = None

    def __post_init__(self) -> None:
        keep = frozenset(self.keep)
        if not all(isinstance(s, int) and not isinstance(s, bool) for s in keep):
            raise TypeError("PlanEdit.keep takes event seqs (whole numbers)")
        if self.note is not None and not isinstance(self.note, str):
            raise TypeError(f"PlanEdit.note is {type(self.note).__name__}, not a string")
        object.__setattr__(self, "keep", keep)


@dataclass(frozen=True)
class PlanView:
    """What a tier is about to apply, read-only: in session ``session_id`` (a sub-agent's
    own, ``delegate``: it runs its parent's hooks) before call ``call_index``, ``tier`` (its
    name, e.g. ``clearing``, ``full_stage1``) and ``layer`` (the recorded event's), the
    events it would ``replace`` (seq -> new content) and ``drop``, their ``messages`` as
    recorded, the compaction ``note`` it would show, and the request's tokens now and
    (estimated) after it, against the effective ``window``."""

    session_id: str
    tier: str
    layer: str
    call_index: int
    replace: Mapping[int, str]
    drop: tuple[int, ...]
    note: str | None
    messages: Mapping[int, Message]
    tokens_before: int
    tokens_after: int
    window: int

    @property
    def seqs(self) -> tuple[int, ...]:
        """Every event seq the plan hides or rewrites, in order."""
        return tuple(sorted({*self.replace, *self.drop}))


#: ``before_compaction(plan)``: ``None`` (go on), a :class:`Veto` or a :class:`PlanEdit`.
BeforeHook = Callable[[PlanView], "Veto | PlanEdit | None"]
#: ``after_compaction(report)``: the ``CompactionReport``, its ``ledger`` included; the return is ignored.
AfterHook = Callable[[Any], object]


@dataclass
class CompactionHooks:
    """The hooks of one agent: ``Harness(..., compaction_hooks=CompactionHooks(before=..., after=...))``.

    ``timeout_s``: how long the loop waits for one hook call before it goes on without it."""

    before: BeforeHook | None = None
    after: AfterHook | None = None
    timeout_s: float = 5.0
    #: threads of calls that did not return in time and still run (:data:`MAX_HUNG`)
    _hung: list[threading.Thread] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("before", "after"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise TypeError(f"CompactionHooks.{name} must be a function, not {type(fn).__name__}")
        if not isinstance(self.timeout_s, (int, float)) or isinstance(self.timeout_s, bool) or self.timeout_s <= 0:
            raise ValueError(f"CompactionHooks.timeout_s must be a positive number of seconds, not {self.timeout_s!r}")


@dataclass(frozen=True, kw_only=True)
class CompactionHookWarning(ProgressEvent):
    """A compaction hook did not get its way: it raised, timed out, was skipped, or its veto
    or edit was refused or overridden; the compaction went on by the default rule."""

    kind: ClassVar[str] = "compaction_hook_warning"
    hook: str
    tier: str
    decision: str
    message: str


# -- what the hooks need of the pipeline (declared here: pipeline.py calls in, never the reverse)
class _Manager(Protocol):
    counter: TokenCounter

    @property
    def hooks(self) -> CompactionHooks | None: ...

    @property
    def on_event(self) -> EventSink: ...

    @property
    def effective_window(self) -> int: ...

    def tokens_of(self, m: Message) -> int: ...


class _State(Protocol):
    session: Session
    call_index: int
    tokens: int

    @property
    def manager(self) -> _Manager: ...


class _Tier(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def layer(self) -> str: ...


class _Plan(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
    changed: int
    replace: dict[int, str]
    drop: list[int]
    note: tuple[int, str] | None


class _Report(Protocol):
    event_seq: int


P = TypeVar("P", bound=_Plan)
#: ``check(plan)``: the view the plan would produce and what is wrong with it (``pipeline.check``)
Check = Callable[[P], "tuple[list[Message], list[str]]"]


# -- running one hook call, bounded --------------------------------------------------------
@dataclass
class _Outcome:
    status: str  # "returned", "raised", "timeout", "skipped"
    value: Any = None
    error: BaseException | None = None
    ms: float = 0.0


def _call(hooks: CompactionHooks, fn: Callable[[Any], Any], arg: Any) -> _Outcome:
    """``fn(arg)`` in a daemon thread, waited for ``hooks.timeout_s`` at most."""
    hooks._hung[:] = [t for t in hooks._hung if t.is_alive()]
    if len(hooks._hung) >= MAX_HUNG:
        return _Outcome("skipped")
    box: list[_Outcome] = []

    def work() -> None:
        try:
            box.append(_Outcome("returned", value=fn(arg)))
        except BaseException as exc:  # a hook's failure is reported, whatever it is
            box.append(_Outcome("raised", error=exc))

    t = threading.Thread(target=work, name="ctxwright-compaction-hook", daemon=True)
    start = time.perf_counter()
    t.start()
    t.join(hooks.timeout_s)
    ms = (time.perf_counter() - start) * 1000
    if t.is_alive() or not box:
        hooks._hung.append(t)
        return _Outcome("timeout", ms=ms)
    out = box[0]
    out.ms = ms
    return out


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return _short(text)


def _short(text: str) -> str:
    text = redact(text)
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."


def _record(state: _State, tier: _Tier, hook: str, decision: str, ms: float, **fields: Any) -> None:
    """One ``compaction_hook`` event, and one warning line when the hook did not get its way."""
    ev = state.session.append(
        HookEvent(
            hook=hook,
            tier=tier.name,
            layer=tier.layer,
            decision=decision,
            call_index=state.call_index,
            duration_ms=round(ms, 3),
            **fields,
        )
    )
    if decision in ("failed", "timeout", "skipped", "refused", "overridden"):
        msg = f"{hook} for {tier.name} before call {state.call_index}: {decision}"
        if ev.reason:
            msg += f" ({ev.reason})"
        state.manager.on_event(CompactionHookWarning(hook=hook, tier=tier.name, decision=decision, message=msg))


def _not_run(outcome: _Outcome, hooks: CompactionHooks) -> tuple[str, str]:
    """The decision and reason of a call that gave no answer."""
    if outcome.status == "timeout":
        return "timeout", f"no answer within {hooks.timeout_s:g} s; its thread is left running"
    if outcome.status == "skipped":
        return "skipped", f"not called: {MAX_HUNG} earlier calls have still not returned"
    assert outcome.error is not None
    return "failed", _error_text(outcome.error)


# -- before_compaction ------------------------------------------------------------------------
def _view(state: _State, tier: _Tier, plan: _Plan, view: list[Message]) -> PlanView:
    m, s = state.manager, state.session
    hidden = {*plan.replace, *plan.drop}
    events = [s.events[seq] for seq in sorted(hidden)]
    messages = {ev.seq: ev.message for ev in events if isinstance(ev, MessageEvent)}
    return PlanView(
        session_id=s.id,
        tier=tier.name,
        layer=tier.layer,
        call_index=state.call_index,
        replace=MappingProxyType(dict(plan.replace)),
        drop=tuple(sorted(plan.drop)),
        note=plan.note[1] if plan.note is not None else None,
        messages=MappingProxyType(messages),
        tokens_before=state.tokens,
        tokens_after=_tokens_after(state, view),
        window=m.effective_window,
    )


def edited(plan: P, keep: frozenset[int], note: str | None) -> P:
    """``plan`` without the events of ``keep`` and with ``note`` added to its note (a plan
    without one: to its first replaced content, so no message is inserted between a call
    and its result). A note that stood before a kept event moves to the first event still
    dropped."""
    kept = keep & {*plan.replace, *plan.drop}
    replace = {seq: text for seq, text in plan.replace.items() if seq not in kept}
    drop = [seq for seq in plan.drop if seq not in kept]
    new_note = plan.note
    if new_note is not None and new_note[0] in kept and drop:
        new_note = (min(drop), new_note[1])
    if note:
        if new_note is not None:
            new_note = (new_note[0], f"{new_note[1]}\n\n{note}" if new_note[1] else note)
        elif replace:
            first = min(replace)
            replace[first] = f"{replace[first]}\n\n{note}"
    return dataclasses.replace(
        plan, changed=max(0, plan.changed - len(kept)), replace=replace, drop=drop, note=new_note
    )


def run_before(state: _State, tier: _Tier, plan: P, check: Check[P]) -> P | None:
    """``plan`` as the ``before_compaction`` hook leaves it: the same plan (no hook, ``ok``, a
    failure, or a veto or edit not honoured), an edited one, or ``None`` (vetoed: nothing to
    record). Every call is recorded as a ``compaction_hook`` event."""
    hooks = state.manager.hooks
    if hooks is None or hooks.before is None:
        return plan
    view, _ = check(plan)
    outcome = _call(hooks, hooks.before, _view(state, tier, plan, view))
    hook, ms = "before_compaction", outcome.ms
    value = outcome.error if isinstance(outcome.error, Veto) else outcome.value
    if outcome.status in ("timeout", "skipped") or (outcome.status == "raised" and not isinstance(value, Veto)):
        decision, reason = _not_run(outcome, hooks)
        _record(state, tier, hook, decision, ms, reason=reason)
        return plan
    if value is None:
        _record(state, tier, hook, "ok", ms)
        return plan
    window = state.manager.effective_window
    over = f"the request ({state.tokens:,} tokens) is over the window ({window:,}): the provider would refuse it"
    if isinstance(value, Veto):
        reason = _short(value.reason)
        if state.tokens > window:
            _record(state, tier, hook, "overridden", ms, reason=f"vetoed ({reason or 'no reason given'}), but {over}")
            return plan
        _record(state, tier, hook, "vetoed", ms, reason=reason)
        return None
    if not isinstance(value, PlanEdit):
        got = f"returned {type(value).__name__}; expected None, a Veto or a PlanEdit"
        _record(state, tier, hook, "failed", ms, reason=got)
        return plan
    keep = frozenset(value.keep) & {*plan.replace, *plan.drop}
    note = value.note or None
    if not keep and note is None:
        _record(state, tier, hook, "ok", ms)
        return plan
    new = edited(plan, frozenset(keep), note)
    decision = "edited" if keep else "noted"
    fields: dict[str, Any] = {"kept": tuple(sorted(keep)), "note": note}
    view, bad = check(new)
    if bad:
        reason = "the edited plan would produce an invalid context: " + "; ".join(bad)
        _record(state, tier, hook, "refused", ms, reason=_short(reason), **fields)
        return plan
    if state.tokens > window and _tokens_after(state, view) > window:
        _record(state, tier, hook, "overridden", ms, reason=f"{decision}, but {over} even after it", **fields)
        return plan
    _record(state, tier, hook, decision, ms, **fields)
    if not new.replace and not new.drop:
        return None  # the hook kept everything the plan hid: nothing left to record
    return new


def _tokens_after(state: _State, view: list[Message]) -> int:
    m = state.manager
    return state.tokens - sum(m.tokens_of(msg) for msg in state.session.trajectory()) + sum(map(m.tokens_of, view))


# -- after_compaction -------------------------------------------------------------------------
def run_after(state: _State, tier: _Tier, report: _Report) -> None:
    """Show the ``after_compaction`` hook the recorded compaction's report (with its ledger)."""
    hooks = state.manager.hooks
    if hooks is None or hooks.after is None:
        return
    outcome = _call(hooks, hooks.after, copy.copy(report))  # the loop's own report stays as it is
    hook = "after_compaction"
    if outcome.status == "returned":
        _record(state, tier, hook, "ok", outcome.ms, compaction_seq=report.event_seq)
        return
    decision, reason = _not_run(outcome, hooks)
    _record(state, tier, hook, decision, outcome.ms, reason=reason, compaction_seq=report.event_seq)
