"""The context: the layer under the Harness that any agent loop can drive.

A loop calls the model; ctxwright decides what the model sees and records what came back:

    ctx.add_user(text)                      # the user's message (and what components append first)
    body = ctx.request()                    # status bar, compaction, render: messages, tools, ...
    step = ctx.record(reply)                # assistant turn, usage, live audit of this call
    ctx.run_tools(step)                     # registry, budget/offload, defence, results appended

Why a separate layer: people who need prefix discipline, compaction, the audit or tool search
already have a loop (an ``openai`` client loop, an agent framework). The rules that keep a
provider's prompt cache warm live here, not in the loop: every request is rendered from the
session's events by the one renderer (``core/render.py``), so it is append-only relative to
the last one except where a compaction was recorded; the prefix (system prompt + tools) is
frozen when the session starts; tool results pass the same steps (sanitize, budget/offload,
mark) whoever runs the loop. ``Harness`` is this plus a backend and ``agent/loop.py``.

Rules enforced on every call, each from a failure the book describes:

* every tool call has an id unique in the session before the reply is recorded
  (``core/tool_ids.py``) -- some servers send none, and a result cannot be paired without;
* parallel tool calls from one reply run concurrently, each with its own timeout -- one
  hung tool must not stall the batch;
* every failure (unknown tool, arguments that are not JSON, a schema mismatch, a tool that
  raises or hangs) becomes a structured ``tool`` message answering that call -- the model can
  correct itself only if it sees what went wrong;
* the same tool called with the same arguments more than ``max_repeats`` times in a row gets
  a note on its result (``core/repeats.py``), and the next identical call is answered without
  running (:attr:`Step.blocked`);
* a call to a tool that writes or acts outside passes the confirmation gate first
  (``defence/gate.py``), after lookup and validation, so a call through ``call_tool`` is
  checked as the tool it runs;
* the server's prompt tokens are checked against the ledger (``core/tokens.py``): a server that
  drops the tools or cuts the prompt is warned about (``ledger_mismatch``), once per kind.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ctxwright.agent.assemble import Assembly
from ctxwright.agent.provider_cache import ProviderCache, wants_auto_ttl
from ctxwright.agent.results import drafts_of, result_steps
from ctxwright.audit.compare import Auditor, AuditSummary
from ctxwright.audit.live import LiveRequests, audit_record, past_requests
from ctxwright.backends.base import Backend
from ctxwright.cache.prices import Pricing
from ctxwright.compaction import CompactionConfig, CompactionReport, ContextManager, pins
from ctxwright.compaction.hooks import CompactionHooks
from ctxwright.compaction.ledger import event_text, hidden_seqs
from ctxwright.compaction.provider import events_of as provider_events
from ctxwright.compaction.recall import RECALL_TOOL, Recall
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import AssistantEvent, Event, MessageEvent, PinEvent, StatusEvent, ToolEvent
from ctxwright.core.interrupted import close_open_rounds
from ctxwright.core.messages import Message, ToolCall, canonical_json
from ctxwright.core.progress import (
    EventSink,
    LedgerWarning,
    RepeatedCall,
    RequestSent,
    StatusShown,
    ToolDone,
    ToolStart,
    UserInput,
    ignore,
)
from ctxwright.core.repeats import RepeatTracker, repeat_note
from ctxwright.core.request import ChatRequest, Completion, ToolChoice
from ctxwright.core.results import run_steps
from ctxwright.core.session import Session
from ctxwright.core.tokens import Ledger, LedgerBuilder, TokenCounter, check_reported
from ctxwright.core.tool_ids import assign_ids, ids_in
from ctxwright.defence.gate import Gate
from ctxwright.defence.levels import Features, features
from ctxwright.defence.provenance import ProvenanceIndex
from ctxwright.errors import ConfigError, CtxwrightError
from ctxwright.progress import AssistantReply, CallReport, Compacted, GateDecided
from ctxwright.recipe import MAX_RESULT_CHARS, default, harness_doc, harness_parameters
from ctxwright.status.bar import StatusBar
from ctxwright.tools.registry import BoundCall, Tool, ToolOutcome, ToolRegistry, error_outcome
from ctxwright.tools.workers import WORKERS, Done

if TYPE_CHECKING:
    from ctxwright.agent.wiring import Wired

__all__ = ["CallReport", "Context", "ContextConfig", "Step"]


@dataclass
class ContextConfig:
    """How requests are built and results recorded.

    ``max_tool_rounds`` bounds how many rounds of tool calls the model may make before the
    loop asks for an answer (``tool_choice="none"``) -- a tool budget, for models that cannot
    tell when to stop; ``None`` means no bound other than ``max_iterations``.
    ``tool_choice_first`` lets a weak model be forced to act once.
    """

    # the defaults are the declared ones (recipe/options.py): one value per option
    max_iterations: int = cast(int, default("max_iterations"))
    max_tool_rounds: int | None = None
    tool_timeout_s: float = cast(float, default("tool_timeout"))
    max_result_chars: int = MAX_RESULT_CHARS
    #: identical tool calls in a row before the model is told (``core/repeats.py``); the
    #: next one is not run. ``None`` or 0: no limit
    max_repeats: int | None = cast(int, default("max_repeats"))
    tool_choice_first: ToolChoice = "auto"
    max_tokens: int | None = cast(int, default("max_tokens"))
    temperature: float | None = 0.0
    #: side-channel timestamps: "[YYYY-MM-DD HH:MM:SS] " before user and tool contents
    timestamps: bool = cast(bool, default("timestamps"))
    #: refresh the provider's cache before it expires between runs (``cache/expiry.py``)
    keep_warm: bool = cast(bool, default("keep_warm"))
    #: how calls, expiries and the ``--cache-ttl auto`` choice are priced (``cache/prices.py``:
    #: the built-in table, a ``--prices`` file over it); ``None``: the built-in table
    pricing: Pricing | None = None
    #: the compaction layers (budget, noise, clearing, trim); ``None`` or ``enabled=False``
    #: sends the trajectory as recorded, with only the plain ``max_result_chars`` cap
    compaction: CompactionConfig | None = field(default_factory=CompactionConfig)
    #: the user's compaction hooks (``compaction/hooks.py``): callables, so never recorded
    compaction_hooks: CompactionHooks | None = None
    #: the defence level's features (``defence/levels.py``): marking and the sanitizer are
    #: applied to untrusted results where they are recorded (``defence/record.py``)
    defence: Features = field(default_factory=features)


@dataclass
class Pending:
    """A request built and not yet answered: what :meth:`Context.record` needs of it."""

    request: ChatRequest
    ledger: Ledger
    compactions: list[CompactionReport]
    pre_ms: float
    started: float


@dataclass
class Step:
    """One recorded model reply: its text, its tool calls, and the call's report."""

    message: Message
    report: CallReport
    finish_reason: str | None = None
    #: set by :meth:`Context.run_tools`: a call was not run because it repeated past the limit
    blocked: bool = False
    #: set by :meth:`Context.run_tools`: every call of this step is answered
    ran: bool = False

    @property
    def text(self) -> str:
        return self.message.content or ""

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls


class Context:
    """One session's prefix, event log, tools and components, driven call by call.

    Build one with the same options as :class:`~ctxwright.harness.Harness` (the options
    table: ``docs/options.md``) -- ``Context(system, tools, db="agent.db", status=True)`` --
    or continue a stored session with :meth:`resume`. ``backend`` is optional: without one
    the context counts tokens offline, and the options that need the model to run a call of
    their own (``delegate``, LLM summaries) are refused.
    """

    def __init__(
        self,
        system: str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | None = None,
        *,
        backend: Backend | None = None,
        db: Any = None,
        resume: str | None = None,
        take_over: bool = False,
        on_event: EventSink | None = None,
        **options: Any,
    ) -> None:
        from ctxwright.agent.wiring import wire

        wired = wire(
            {"system": system, "tools": tools, **options},
            backend=backend,
            db=db,
            resume=resume,
            take_over=take_over,
            on_event=on_event,
        )
        self._take(wired)

    @classmethod
    def resume(
        cls, session_id: str, tools: Iterable[Tool | Callable[..., Any]] | None = None, **options: Any
    ) -> Context:
        """Continue the stored session ``session_id`` (``db=`` names the database); every
        option not given is the one the session recorded."""
        return cls(tools=tools, resume=session_id, **options)

    @classmethod
    def of(cls, wired: Wired) -> Context:
        """The context over what :func:`~ctxwright.agent.wiring.wire` built (the ``Harness``
        wires with its own default backend, then takes the context from here)."""
        ctx = cls.__new__(cls)
        ctx._take(wired)
        return ctx

    def _take(self, wired: Wired) -> None:
        self.wired: Wired | None = wired
        self._init(
            wired.session,
            wired.backend,
            wired.assembly.tools,
            wired.config,
            on_event=wired.on_event,
            status=wired.status,
            assembly=wired.assembly,
            gate=wired.gate,
            summary_backend=wired.summary_backend,
        )

    @classmethod
    def over(
        cls,
        session: Session,
        backend: Backend,
        tools: ToolRegistry,
        config: ContextConfig | None = None,
        *,
        on_event: EventSink | None = None,
        counter: TokenCounter | None = None,
        status: StatusBar | None = None,
        summary_backend: Backend | None = None,
        assembly: Assembly | None = None,
        gate: Gate | None = None,
        gate_parents: tuple[Session, ...] = (),
    ) -> Context:
        """A context over parts already built (a session, a registry): what ``Agent`` and a
        sub-agent use; the public constructor assembles them from options instead."""
        ctx = cls.__new__(cls)
        ctx.wired = None
        ctx._init(
            session,
            backend,
            tools,
            config,
            on_event=on_event,
            counter=counter,
            status=status,
            summary_backend=summary_backend,
            assembly=assembly,
            gate=gate,
            gate_parents=gate_parents,
        )
        return ctx

    def _init(
        self,
        session: Session,
        backend: Backend,
        tools: ToolRegistry,
        config: ContextConfig | None,
        *,
        on_event: EventSink | None = None,
        counter: TokenCounter | None = None,
        status: StatusBar | None = None,
        summary_backend: Backend | None = None,
        assembly: Assembly | None = None,
        gate: Gate | None = None,
        gate_parents: tuple[Session, ...] = (),
    ) -> None:
        self.session = session
        self.backend = backend
        self.tools = tools
        self.config = config or ContextConfig()
        self.on_event: EventSink = on_event or ignore
        self.status = status
        #: the components that act during the session (``tools/component.py``); ``None`` for
        #: a context over bare parts
        self.assembly = assembly
        #: the confirmation gate (``defence/gate.py``); ``None``: every call runs
        self.gate = gate
        #: a sub-agent's parent sessions, oldest first: their sources are its provenance, and
        #: its own user message (the task the parent model wrote) is not trusted
        self.gate_parents = gate_parents
        self._provenance: ProvenanceIndex | None = None
        self.tokens_used = 0
        # the lineage the backend serves: its routing key is made from it, so a sub-agent's
        # requests keep its parent's key (cache/routing.py)
        backend.bind_lineage(session.lineage_root())
        self.counter = counter or backend.token_counter()
        self.auditor = Auditor(self.counter)
        for past in past_requests(session):  # a resumed session: audit against what it sent before
            self.auditor.add(past)
        self.compaction: ContextManager | None = None
        cfg = self.config.compaction
        if cfg is not None and cfg.enabled:
            self.compaction = ContextManager.for_backend(cfg, self.counter, backend, summary_backend)
            reader = _reader_in(tools)
            if reader is not None:  # the registry's read_result tool pages this session's results
                self.compaction.reader = reader
            self.compaction.on_event = self.on_event  # the notice before a deep compaction
            self.compaction.hooks = self.config.compaction_hooks
            recall = _recall_in(tools)
            if recall is not None:  # the registry's recall tool searches this session's hidden events
                self.compaction.recall = recall
            self.compaction.pins_call = tools.pins  # @tool(pin=True): no record-time strategy rewrites its results
            self.compaction.bind(session)
        self._carry_ms = 0.0  # overhead spent on tool results, charged to the next call
        self._tools_text = canonical_json([t.to_wire() for t in session.prefix.tools]) if session.prefix.tools else ""
        self._call_ids: set[str] | None = None  # every tool-call id the session holds, built on first use
        self._warned: set[str] = set()  # ledger mismatch kinds already reported
        # per-turn work kept incremental (core/incremental.py): only what is new since the last call
        self._ledger = LedgerBuilder()
        self._live = LiveRequests()
        #: the provider's cache as this session saw it: verdicts, --cache-ttl auto, keep-warm
        self.provider_cache = ProviderCache(
            session, backend, keep_warm=self.config.keep_warm, pricing=self.config.pricing
        )
        if wants_auto_ttl(backend):  # --cache-ttl auto: 5m or 1h per call, from the gaps seen
            backend.ttl_for_call = self.provider_cache.choose_ttl  # type: ignore[attr-defined]
        self._repeat_tracker = RepeatTracker()
        self._pending: Pending | None = None
        self._last: Step | None = None  # the last reply recorded: its tool calls must be answered next
        self._iteration = 0  # model calls since the last begin(), for the status bar
        self._rounds = 0  # rounds of tool calls since the last begin(), for max_tool_rounds
        self._closed = False

    # -- the user's side -----------------------------------------------------------------
    @property
    def session_id(self) -> str:
        return self.session.id

    def stamp(self, text: str) -> str:
        """``text`` with the side-channel timestamp when ``timestamps`` is on."""
        if not self.config.timestamps:
            return text
        return time.strftime("[%Y-%m-%d %H:%M:%S] ", time.localtime()) + text

    def begin(self) -> None:
        """Before a run: answer the calls a crash left open (``core/interrupted.py``), then let
        the components append what they announce (a skills catalog, MCP changes). It writes
        events, so it checks first that this process still holds the session (its lease)."""
        self._check_open()
        for call, ev in close_open_rounds(self.session, self.stamp):
            content = ev.message.content or ""
            self.on_event(ToolDone(call=call, content=content, ok=False, elapsed_ms=0.0))
        if self._last is not None:  # its calls, if any, were answered just above (as interrupted)
            self._last.ran = True
        if self.assembly is not None:
            self.assembly.before_run(self.session)
        self._iteration = self._rounds = 0

    def add_user(self, text: str) -> None:
        """Append the user's message (after whatever the components announce first). Tool
        calls of the last reply not run by then are answered as interrupted, as after a crash
        (``core/interrupted.py``): a provider rejects a request with an unanswered call."""
        self.begin()
        self.session.add_user(self.stamp(text))
        self.on_event(UserInput(content=text))

    # -- one model call ------------------------------------------------------------------
    def prepare(self, tool_choice: ToolChoice = "auto", iteration: int | None = None) -> ChatRequest:
        """Build the next request: the components' before-call messages, the status bar, the
        compaction layers (which may raise ``ContextWindowExceeded``: nothing fits, nothing is
        sent), then the render and the ledger. :meth:`record` takes its reply."""
        self._check_open()
        if self._calls_unanswered():
            raise CtxwrightError(
                "the model's last tool calls are not answered yet, and a provider rejects a request with an "
                "unanswered tool call: run them first (ctx.run_tools(step))"
            )
        s = self.session
        if iteration is None:
            self._iteration += 1
            iteration = self._iteration
        if self.assembly is not None:
            self.assembly.before_call(s)
        t0 = time.perf_counter()
        if self.status is not None:
            status_msg = self.status.record(
                s, iteration=iteration, tokens_used=self.tokens_used, count=self.counter.count
            )
            self.on_event(StatusShown(content=status_msg.content or ""))
        compactions: list[CompactionReport] = []
        if self.compaction is not None:
            compactions = self.compaction.before_call(s, s.call_count)
            for c in compactions:
                self.on_event(Compacted(report=c))
        request = s.build_request(
            tool_choice=tool_choice, max_tokens=self.config.max_tokens, temperature=self.config.temperature
        )
        ledger = self._ledger.build(
            self.counter, s.prefix.canonical(), request.messages[1:], self._tools_text, s.prefix.tools
        )
        self.on_event(RequestSent(index=s.call_count, messages=len(request.messages), request=request))
        now = time.perf_counter()
        self._pending = Pending(request, ledger, compactions, (now - t0) * 1000, now)
        return request

    def request(self, tool_choice: ToolChoice | None = None) -> dict[str, Any]:
        """The next request as keyword arguments of the OpenAI SDK's
        ``chat.completions.create`` (``messages``, ``tools``, ``tool_choice``, ``max_tokens``,
        ``temperature``): pass them with your ``model=``. The first call after a user message
        uses ``tool_choice_first``, calls past ``max_tool_rounds`` ``"none"``. Calling it again
        before :meth:`record` replaces the request waiting for its reply (it counts as not sent);
        a reply's tool calls must be run (:meth:`run_tools`) before the next request."""
        if tool_choice is None:
            tool_choice = self.config.tool_choice_first if self._iteration == 0 and self.tools.specs() else "auto"
            rounds = self.config.max_tool_rounds
            if rounds is not None and self._rounds >= rounds:
                tool_choice = "none"
        return self.prepare(tool_choice).openai_body(None)  # no model: the caller names it

    def compact_for_overflow(self, exc: BaseException) -> bool:
        """After the server refused the last request as over its context window: one forced
        compaction (every tier, down to half the request at most; each event records
        ``overflow_retry``). Returns whether anything was compacted -- whether a retry can fit.
        Without compaction, or with nothing left to remove, there is nothing to retry."""
        if self.compaction is None:
            return False
        s = self.session
        reports = self.compaction.before_call(s, s.call_count, overflow=True)
        for c in reports:
            self.on_event(Compacted(report=c))
        return bool(reports)

    def failed(self, exc: BaseException, wall_ms: float | None = None) -> None:
        """Record that the pending request got no reply (the call stays in the store)."""
        pending = self._take_pending()
        if wall_ms is None:
            wall_ms = round((time.perf_counter() - pending.started) * 1000, 3)
        self.session.record_call(
            pending.request,
            None,
            ledger=pending.ledger.to_dict(),
            error=f"{type(exc).__name__}: {exc}",
            model=self.backend.model,
            wall_ms=wall_ms,
        )

    def record(self, reply: Completion | Mapping[str, Any] | Any, *, wall_ms: float | None = None) -> Step:
        """Record the model's reply to the pending request: a :class:`Completion`, an OpenAI
        SDK ``ChatCompletion`` or its JSON as a dict. Tool calls get session-unique ids, the
        call is audited against the previous one and stored with its ledger."""
        if self._pending is None:
            raise CtxwrightError("no request is waiting for a reply: call ctx.request() before ctx.record(reply)")
        completion = completion_of(reply)  # a reply that cannot be read leaves the request waiting
        pending = self._take_pending()
        t1 = time.perf_counter()
        if wall_ms is None:
            wall_ms = round((t1 - pending.started) * 1000, 3)
        s = self.session
        u = completion.usage
        message, assigned = assign_ids(completion.message, s.id, s.call_count, self._ids())
        self.tokens_used += (u.prompt_tokens or 0) + (u.completion_tokens or 0)
        request, ledger = pending.request, pending.ledger
        row = self.auditor.add(
            self._live.audit_request(
                request, u, marker=s.marker_since_last_call(), model=self.backend.model, backend=self.backend.name
            )
        )
        audit = audit_record(row)
        cache = self.provider_cache.after_call(request, row, u)
        if cache is not None:
            audit["cache"] = cache
        mismatch = check_reported(ledger, u.prompt_tokens, self.counter.source, request.tool_choice)
        ledger = ledger.reconciled(u.prompt_tokens)  # the parts add up to the backend's count
        ledger_rec: dict[str, Any] = dict(ledger.to_dict())
        if mismatch is not None:
            ledger_rec["mismatch"] = {"kind": mismatch.kind, "reported": mismatch.reported, "message": mismatch.message}
        idx = s.record_call(request, u, ledger=ledger_rec, audit=audit, model=self.backend.model, wall_ms=wall_ms)
        report = CallReport(
            idx,
            u.prompt_tokens,
            u.cached_tokens,
            u.completion_tokens,
            u.prefill_ms,
            u.decode_ms,
            ledger,
            len(message.tool_calls),
            reusable_tokens=row.reusable_prefix_tokens,
            cause=row.cause,
            divergence=audit.get("where"),
            compactions=pending.compactions,
            wall_ms=wall_ms,
            mismatch=mismatch.message if mismatch is not None else None,
            cache=cache,
            usage=u,
            finish_reason=completion.finish_reason,
            response_model=completion.model,
            audit=audit,
        )
        if mismatch is not None and mismatch.kind not in self._warned:
            self._warned.add(mismatch.kind)
            self.on_event(LedgerWarning(index=idx, mismatch=mismatch))
        ids = {"assigned_ids": {str(i): v for i, v in assigned.items()}} if assigned else {}
        s.add_assistant(message, u, call_index=idx, finish_reason=completion.finish_reason, **ids)
        cfg = self.config.compaction
        excluded, keep = (cfg.provider_exclude_tools, cfg.keep) if cfg is not None else ((), ())
        for ev in provider_events(u, idx, request.messages, excluded, keep):  # the provider's own compaction, if any
            s.append(ev)
        report.overhead_ms = round(pending.pre_ms + (time.perf_counter() - t1) * 1000 + self._carry_ms, 3)
        self._carry_ms = 0.0
        if message.tool_calls:
            self._rounds += 1
        step = Step(message, report, completion.finish_reason)
        self._last = step
        self.on_event(AssistantReply(message=message, report=report))
        return step

    def _take_pending(self) -> Pending:
        pending, self._pending = self._pending, None
        if pending is None:
            raise CtxwrightError("no request is waiting for a reply: call ctx.request() before ctx.record(reply)")
        return pending

    def _ids(self) -> set[str]:
        if self._call_ids is None:
            self._call_ids = ids_in(ev.message for ev in self.session.events if isinstance(ev, AssistantEvent))
        return self._call_ids

    # -- tools ---------------------------------------------------------------------------
    def run_tools(self, step: Step) -> list[ToolEvent]:
        """Run the step's tool calls (repeats checked, the gate asked, concurrently, each with
        its timeout) and append every result, in the order of the calls: each passes the
        sanitizer, the budget/offload layer and the marking (``defence/record.py``) first."""
        self._check_open()
        if step is not self._last or step.ran:
            raise CtxwrightError(
                "these tool calls cannot be run now: only the last reply's calls run, once, before the next "
                "request (a result recorded twice or out of order is refused by the provider)"
            )
        step.ran = True
        calls = step.tool_calls
        events: list[ToolEvent] = []
        if not calls:
            return events
        s = self.session
        repeats, blocked = self._repeats(calls)
        denied = self._gate(calls, blocked)
        outcomes = self._run(calls, {**blocked, **denied})
        t_res = time.perf_counter()
        # sanitize -> budget/offload -> mark -> timestamp, decided once per result (agent/results.py)
        stamp = self.stamp if self.config.timestamps else None
        steps = result_steps(s, self.config.defence, self.compaction, self.config.max_result_chars, stamp)
        limit = self.config.max_repeats
        for d, n in zip(run_steps(steps, drafts_of(calls, outcomes)), repeats, strict=False):
            if limit and n == limit + 1:
                note = repeat_note(d.call, n, limit)
                d = replace(d, content=f"{d.text}\n{note}")
                self.on_event(RepeatedCall(call=d.call, count=n, note=note))
            events.append(s.add_result(d))
            self.on_event(ToolDone(call=d.call, content=d.text, ok=d.ok, elapsed_ms=d.elapsed_ms or 0.0))
        self._pin_results(calls, events)
        del outcomes  # the tools' full outputs: offloaded or recorded by now, not kept twice
        self._carry_ms += (time.perf_counter() - t_res) * 1000
        step.blocked = bool(blocked)
        return events

    def _pin_results(self, calls: tuple[ToolCall, ...], events: list[ToolEvent]) -> None:
        """Pin the successful results of ``@tool(pin=True)`` tools and of the model's ``pin``
        tool (``compaction/pins.py``), after the whole batch: its results stay one run of events."""
        for call, ev in zip(calls, events, strict=False):
            if not ev.ok or not self.tools.pins(call):
                continue
            if call.name == pins.PIN_TOOL:
                try:
                    fact = call.parsed_arguments().get("fact")
                except ValueError:
                    fact = None
                text = fact.strip() if isinstance(fact, str) else None
                self.session.append(PinEvent(targets=(ev.seq,), text=text, by="model"))
            else:
                self.session.append(PinEvent(targets=(ev.seq,), by="tool"))

    # -- pins ----------------------------------------------------------------------------
    def pin(self, what: int | Message | Event | str) -> PinEvent:
        """Pin a message so every compaction tier keeps it whole (``compaction/pins.py``):
        ``what`` is an event seq, a recorded :class:`Message` or its event, or a text -- a
        fact the user states, appended as a ``<system-reminder>`` note that is pinned. A
        message a compaction already hid or shortened is appended again as a pinned note
        holding its recorded text. Recorded as a ``pin`` event: a resumed session keeps it.

        Raises ``ValueError`` for what names no message of the session (a status message
        included: the next status replaces it), and :class:`CtxwrightError` for a text while
        the last reply's tool calls are unanswered (a user message there breaks the pairing
        every provider checks)."""
        self._check_open()
        s = self.session
        if isinstance(what, str):
            if not what.strip():
                raise ValueError("nothing to pin: the text is empty")
            return self._pin_note(what, what)
        seq = self._seq_of(what)
        ev = s.events[seq]
        if isinstance(ev, StatusEvent) or not isinstance(ev, MessageEvent):
            what_is = "a status message (the next status replaces it)" if isinstance(ev, StatusEvent) else ev.kind
            raise ValueError(f"event {seq} is {what_is}, not a message that can be pinned; pin its text instead")
        if seq in hidden_seqs(s.events):
            return self._pin_note(pins.restored_text(seq, event_text(ev)), None, restored=seq)
        earlier = next((p for p in pins.pin_events(s.events) if p.targets == (seq,)), None)
        return earlier if earlier is not None else s.append(PinEvent(targets=(seq,), by="user"))

    def _calls_unanswered(self) -> bool:
        """The last reply asked for tools that have not run: a provider rejects a request with an
        unanswered tool call, and a message appended now would stand between a call and its result."""
        last = self._last
        return last is not None and bool(last.tool_calls) and not last.ran

    def _pin_note(self, body: str, text: str | None, restored: int | None = None) -> PinEvent:
        """Append ``body`` as a pinned user note (``pins.note_text``) and the pin naming it."""
        if self._calls_unanswered():
            raise CtxwrightError(
                "cannot pin a text now: the last reply's tool calls are not answered yet; run them "
                "(run_tools) first, then pin"
            )
        s = self.session
        note = s.add_user(pins.note_text(body), **{pins.PIN_NOTE_KEY: "user"})
        extra = {"restored": restored} if restored is not None else {}
        return s.append(PinEvent(targets=(note.seq,), text=text if text is not None else body, by="user", extra=extra))

    def _seq_of(self, what: int | Message | Event) -> int:
        """The seq of the message event ``what`` names (the newest, for a message recorded twice)."""
        events = self.session.events
        if isinstance(what, Event):
            if not (0 <= what.seq < len(events)) or events[what.seq] != what:
                raise ValueError(f"this {what.kind} event is not one of session {self.session_id}'s events")
            return what.seq
        if isinstance(what, Message):
            found = next(
                (ev.seq for ev in reversed(events) if isinstance(ev, MessageEvent) and ev.message == what), None
            )
            if found is None:
                raise ValueError(f"this {what.role} message is not recorded in session {self.session_id}")
            return found
        if isinstance(what, bool) or not isinstance(what, int):
            raise ValueError(f"cannot pin {type(what).__name__}: pass an event seq, a Message, an event or a text")
        if not 0 <= what < len(events):
            raise ValueError(f"there is no event {what}: session {self.session_id} has events 0-{len(events) - 1}")
        return what

    def _timeout_for(self, call: ToolCall) -> float:
        """The tool's own ``timeout_s`` (through ``call_tool``: the deferred tool's), else the config's."""
        return self.tools.timeout_for(call) or self.config.tool_timeout_s

    def _run(self, calls: tuple[ToolCall, ...], blocked: dict[int, ToolOutcome] | None = None) -> list[ToolOutcome]:
        """Run one reply's calls concurrently, each on a daemon thread (``tools/workers.py``:
        reused between calls) with its own deadline from the start of the batch; a call still
        running then is abandoned (a thread cannot be killed) and answered with a timeout error,
        so one hung tool never stalls the loop. ``blocked``: calls not to run, by position, with
        the outcome that answers them."""
        t0 = time.perf_counter()
        boxes: list[list[ToolOutcome]] = [[blocked[i]] if blocked and i in blocked else [] for i in range(len(calls))]
        running: list[Done | None] = []
        for call, box in zip(calls, boxes, strict=False):
            if box:
                running.append(None)
                continue
            self.on_event(ToolStart(call=call))
            running.append(WORKERS.submit(self._executor(call, box), name=f"tool-{call.name}"))
        outcomes = []
        for call, done, box in zip(calls, running, boxes, strict=False):
            timeout = self._timeout_for(call)
            if done is not None:
                done.wait(max(0.0, t0 + timeout - time.perf_counter()))
            outcomes.append(
                box[0]
                if box
                else error_outcome(
                    call,
                    "timeout",
                    f"{call.name} did not finish within {timeout:g} s and was abandoned",
                    "the tool may be hung or the input too large; try a smaller request or another approach",
                    elapsed_ms=(time.perf_counter() - t0) * 1000,
                )
            )
        return outcomes

    def _executor(self, call: ToolCall, box: list[ToolOutcome]) -> Callable[[], None]:
        return lambda: box.append(self.tools.execute(call))

    def _index(self) -> ProvenanceIndex:
        """The session's sources for argument provenance, read up to the last event."""
        if self._provenance is None:
            tools = self.tools

            def untrusted(name: str) -> bool:
                return name in tools and tools.get(name).trust == "untrusted"

            self._provenance = ProvenanceIndex(untrusted)
            self._provenance.add_trusted_text(self.session.prefix.system_prompt)
            for parent in self.gate_parents:
                self._provenance.update(parent.id, parent.events, user_trusted=parent is self.gate_parents[0])
        self._provenance.update(self.session.id, self.session.events, user_trusted=not self.gate_parents)
        return self._provenance

    def _gate(self, calls: tuple[ToolCall, ...], blocked: dict[int, ToolOutcome]) -> dict[int, ToolOutcome]:
        """The confirmation gate on this reply's calls, one after the other (a person may be
        asked): a ``gate`` event per gated call, and the denied ones' answers by position."""
        denied: dict[int, ToolOutcome] = {}
        if self.gate is None:
            return denied
        for i, call in enumerate(calls):
            if i in blocked:
                continue
            try:
                bound = self.tools.resolve(call)  # call_tool resolves to the tool it runs
            except Exception:  # the registry's execute reports it as the call's error
                continue
            if not isinstance(bound, BoundCall) or not self.gate.gated(bound.tool):
                continue
            try:
                arguments = bound.call.parsed_arguments()
            except ValueError:
                arguments = dict(bound.kwargs)
            request = self.gate.check(bound.tool, call.id, arguments, self._index() if self.gate.provenance else None)
            decision = self.gate.decide(request)
            self.session.append(self.gate.event(request, decision))
            self.on_event(GateDecided(call=call, request=request, decision=decision))
            if not decision.approved:
                denied[i] = error_outcome(
                    call,
                    "gate_denied",
                    f"not run: the confirmation gate denied {bound.tool.name}: {decision.reason}",
                    "The user has not approved this call. Do not repeat it with the same values: a value taken "
                    "from external content needs the user's confirmation. Use only values the user gave, or "
                    "finish and tell the user what you wanted to do and why.",
                )
        return denied

    def _repeats(self, calls: tuple[ToolCall, ...]) -> tuple[list[int], dict[int, ToolOutcome]]:
        """How many identical calls in a row end with each of this reply's calls (the reply is
        recorded by now), and the calls past the limit and its note: not run, answered with
        a ``repeated_tool_call`` error."""
        limit = self.config.max_repeats
        if not limit:
            return [1] * len(calls), {}
        counts = [n for _, n in self._repeat_tracker.tail(self.session.events, len(calls))]
        blocked = {
            i: error_outcome(
                call,
                "repeated_tool_call",
                f"not run: {call.name} was called with these same arguments {n} times in a row, "
                f"over the limit of {limit}; the run ends here",
                "its result does not change; use the result you already have, or change the arguments",
            )
            for i, (call, n) in enumerate(zip(calls, counts, strict=False))
            if n > limit + 1
        }
        return counts, blocked

    # -- reading -------------------------------------------------------------------------
    def audit(self) -> AuditSummary:
        """The session's cache accounting so far: hit ratio, reuse efficiency, breaks."""
        return self.auditor.summary()

    def report(self, path: str | Path, prices: Any = None) -> Path:
        """Write the HTML report of this session (and its sub-agents') to ``path``."""
        from ctxwright.report import from_store, write_report
        from ctxwright.store.sessions import Store

        store = self.session.store
        if not isinstance(store, Store):
            raise CtxwrightError(
                "a report is drawn from the stored session: give a database (db='agent.db'); "
                "db=None keeps nothing to report"
            )
        return write_report(from_store(store, self.session.id, self.counter), path, prices)

    # -- lifecycle -----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CtxwrightError("this context is closed; continue the session in a new one: resume(session_id)")
        lease = self.wired.lease if self.wired is not None else None
        if lease is not None:  # a newer harness of this process may have taken the session
            lease.check()

    def close(self) -> None:
        """Stop the components (MCP servers) and release the database; everything recorded stays."""
        if self._closed:
            return
        self._closed = True
        self.provider_cache.stop_timer()
        ahead = self.compaction.ahead if self.compaction is not None else None
        if ahead is not None and self.wired is not None and self.wired.owned_summary_backend is not None:
            ahead.wait()  # a model object (summarizer="x.gguf") is not freed under a summary still running
        if self.wired is not None:
            self.wired.close()

    def __enter__(self) -> Context:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Context(session {self.session.id}, tools={list(self.tools.names())})"


# The options, their defaults and their help come from the one declaration (recipe/options.py).
Context.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *harness_parameters()[:2],
        inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None),
        *[p for p in harness_parameters()[2:] if p.name != "backend"],
    ]
)
Context.__doc__ = f"{Context.__doc__}\n{harness_doc()}\n"


def completion_of(reply: Completion | Mapping[str, Any] | Any) -> Completion:
    """A :class:`Completion` from what a loop got back: ours, an OpenAI SDK object (anything
    with ``model_dump()``) or the chat-completions JSON as a dict."""
    if isinstance(reply, Completion):
        return reply
    try:
        data = reply.model_dump(mode="json") if hasattr(reply, "model_dump") else reply
    except Exception as exc:
        raise ConfigError(f"ctx.record(): the reply's model_dump() failed ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"ctx.record() takes the model's reply: an OpenAI ChatCompletion, its JSON as a dict, or a Completion; "
            f"got {type(reply).__name__}"
        )
    from ctxwright.backends.openai_compat import completion_from_data

    return completion_from_data(dict(data))


def _recall_in(tools: ToolRegistry) -> Recall | None:
    if RECALL_TOOL not in tools:
        return None
    owner = getattr(tools.get(RECALL_TOOL).func, "__self__", None)
    return owner if isinstance(owner, Recall) else None


def _reader_in(tools: ToolRegistry) -> ResultReader | None:
    if "read_result" not in tools:
        return None
    owner = getattr(tools.get("read_result").func, "__self__", None)
    return owner if isinstance(owner, ResultReader) else None
