"""Runs the layers, cheapest first, before each model call.

Order and why:

1. the tool-result budget and repeat markers apply when a result is *recorded* (never
   sent yet, so free for the cache), and so does a record-time strategy (strategies.py);
2. before each call, the tiers of :func:`~ctxwright.compaction.pipeline.tiers_for`, in
   that order: ``adaptive`` past its own threshold; then, when the planner says so
   (``planner.py``, policy ``cost``: the window needs it or the cost rule does; policy
   ``eager``: the request passes ``trigger_ratio`` of the effective window, at most once
   every ``min_calls_between`` calls, unless it is over the window itself), noise, archival
   summaries, clearing, two-stage full compaction and trim, each only while the request is
   still over the depth (cost: ``target_ratio``; eager: the trigger, trim to
   ``trim_target_ratio``) -- one ``compaction`` event per tier that changed something, all
   through the one check-record-measure step of ``pipeline.py``;
3. if it cannot fit at all (the system prompt and first user message alone are too big):
   :class:`~ctxwright.errors.ContextWindowExceeded` with what to do, before any request.

The newest user message, pending tool results and the status bar are never touched: the
layers only rewrite what the model has already seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwright.backends.base import Backend
from ctxwright.compaction import pipeline, planner
from ctxwright.compaction.background import Ahead
from ctxwright.compaction.breaker import CircuitBreaker
from ctxwright.compaction.budget import apply_budget, offload_of, sanitize, text_sha256
from ctxwright.compaction.compress import Earlier, names_in
from ctxwright.compaction.config import CompactionConfig
from ctxwright.compaction.hooks import CompactionHooks
from ctxwright.compaction.ledger import ItemCache
from ctxwright.compaction.noise import repeat_marker, salient_terms
from ctxwright.compaction.offload import ResultFiles
from ctxwright.compaction.pipeline import CompactionReport, PassState, tiers_for
from ctxwright.compaction.planner import Decision
from ctxwright.compaction.recall import Recall
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.strategies import SCAN_CHARS, NewResult, StrategyContext, compress_batch
from ctxwright.compaction.summarizer import Summarizer
from ctxwright.core.events import BudgetRecord, CompactionEvent, SummaryFailedEvent, ToolEvent, UserEvent
from ctxwright.core.incremental import PrefixScan
from ctxwright.core.messages import Message
from ctxwright.core.progress import EventSink, ignore
from ctxwright.core.results import ResultDraft
from ctxwright.core.skill_content import body_skill
from ctxwright.core.tokens import PER_MESSAGE_OVERHEAD, TokenCounter
from ctxwright.errors import ContextWindowExceeded, SummaryFailed

if TYPE_CHECKING:
    from collections.abc import Callable

    from ctxwright.core.messages import ToolCall
    from ctxwright.core.session import Session

DEFAULT_SERVED_WINDOW = 128_000


@dataclass
class ContextManager:
    """The layers of one session, configured by :class:`CompactionConfig`."""

    config: CompactionConfig
    counter: TokenCounter
    window_tokens: int
    reader: ResultReader = field(default_factory=ResultReader)
    #: the ``recall`` tool's searcher (the registry's, when the prefix has the tool)
    recall: Recall = field(default_factory=Recall)
    files: ResultFiles | None = None
    _seen: dict[str, str] = field(default_factory=dict)  # (tool, sha256) -> result_id
    _ids: set[str] = field(default_factory=set)
    #: the call index of the last recorded compaction (spacing: ``min_calls_between``)
    last_compaction_call: int = -(10**9)
    _msg_tokens: dict[Message, int] = field(default_factory=dict)
    #: the trajectory's tokens as a running total per message, so a request that only adds
    #: messages is counted for those alone (``core/incremental.py``)
    _trajectory_tokens: PrefixScan[Message, int] | None = None
    #: the LLM layers' summarizer (its own model object / requests); None: no LLM layers
    summarizer: Summarizer | None = None
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    #: compressed results so far: a strategy does not repeat what the model already has
    known: list[str] = field(default_factory=list)
    _call_index: int = 0
    #: (call index, request tokens) where the current stretch began: the last compaction's
    #: call and the request it left, for the planner's D and N
    _stretch: tuple[int, int] | None = None
    #: receives the notice before a deep compaction (``CompactionAhead``); the agent sets it
    #: to its ``on_event``
    on_event: EventSink = ignore
    #: the loss ledger's scan of each hidden event, kept across compactions (``ledger.py``)
    ledger_items: ItemCache = field(default_factory=ItemCache)
    #: the session's earlier results, for the repeat compressor (``compress/``), fed
    #: from the recorded events, live and on resume alike (:meth:`_sync_earlier`)
    earlier: Earlier = field(default_factory=Earlier)
    #: how many of the session's events :attr:`earlier` has seen (:meth:`_sync_earlier`)
    _earlier_upto: int = 0
    #: the session of the round being budgeted: a source outline keeps the lines naming
    #: what its task names (:meth:`_task_names`)
    _round_session: Session | None = None
    #: the first event seq :attr:`ledger_items` has not scanned yet
    _ledger_scanned: int = 0
    #: the summary written ahead in the background (``background.py``); None: ``background`` off
    ahead: Ahead | None = None
    #: whether a call's result is pinned (``ToolRegistry.pins``, set by the context): the
    #: record-time strategy leaves it whole (``pins.py``)
    pins_call: Callable[[ToolCall], bool] | None = None
    #: the user's ``before_compaction``/``after_compaction`` hooks (``hooks.py``); never stored
    hooks: CompactionHooks | None = None

    @classmethod
    def for_backend(
        cls, config: CompactionConfig, counter: TokenCounter, backend: Backend, summary_backend: Backend | None = None
    ) -> ContextManager:
        """``summary_backend``: where LLM summaries run; default ``backend.fork()`` (the
        embedded model: a second model object with its own KV state; a served model: the
        backend itself, as a separate request does not disturb the session's cached prefix)."""
        window = config.window_tokens or backend.context_window or DEFAULT_SERVED_WINDOW
        m = cls(config, counter, int(window))
        m.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_cooldown_calls)
        if config.uses_llm:
            if summary_backend is None:
                summary_backend = backend.fork()
            m.summarizer = Summarizer(
                summary_backend,
                counter,
                input_budget_tokens=config.summary_input_tokens,
                max_output_tokens=config.summary_max_tokens,
                timeout_s=config.summary_timeout_s,
            )
            if config.background:
                m.ahead = Ahead(m.summarizer)
        return m

    @property
    def effective_window(self) -> int:
        return max(256, self.window_tokens - self.config.reserve_output_tokens)

    # -- binding -------------------------------------------------------------------------
    def bind(self, session: Session) -> None:
        """Attach to a session (new or resumed): its offload folder and what it recorded."""
        base = self.config.results_dir
        if base is None:
            store_path = getattr(getattr(session, "store", None), "path", None)
            if store_path is not None and str(store_path) != ":memory:":
                base = Path(store_path).parent / "ctxwright-results"
        # no store: a fresh private temporary folder, never a fixed /tmp path (compaction/offload.py)
        self.files = ResultFiles(Path(base) / session.id if base is not None else None)
        self.reader.bind(session, self.files)
        self.recall.bind(session, self.files)
        for ev in session.events:
            if isinstance(ev, ToolEvent):
                rid = ev.result_id
                if rid:
                    self._ids.add(rid)
                    if ev.sha256:
                        self._seen.setdefault(f"{ev.tool_name}:{ev.sha256}", rid)
            elif isinstance(ev, CompactionEvent) and ev.call_index is not None:
                self.last_compaction_call = ev.call_index
        self.known = [ev.message.content or "" for ev in session.events if isinstance(ev, ToolEvent) and ev.compressed]
        self.breaker.restore(session)
        self.ledger_items, self._ledger_scanned = ItemCache(), 0  # seqs are this session's
        self.earlier = Earlier()
        self._earlier_upto = 0

    def _sync_earlier(self, session: Session) -> None:
        """Add the results recorded since the last call to :attr:`earlier`, in order, each
        as recorded (:meth:`_recorded_original`). The live run and a resumed one go through
        this same step, so a result after a resume is compressed exactly as it would have
        been without the interruption. Of a long history only the texts the newest-texts
        window keeps are read (the rest by hash)."""
        if not self.config.compress:
            return
        events = [
            ev for ev in session.events[self._earlier_upto :] if isinstance(ev, ToolEvent) and ev.result_id is not None
        ]
        self._earlier_upto = len(session.events)
        keep: set[int] = set()  # indexes in ``events`` whose text the window would keep
        for i in range(len(events) - 1, -1, -1):
            if len(keep) >= self.earlier.max_texts:
                break
            if self._text_kept(events[i]):
                keep.add(i)
        for i, ev in enumerate(events):
            assert ev.result_id is not None
            if i in keep:
                self.earlier.add(ev.result_id, self._recorded_original(session, ev), sha256=ev.sha256)
            else:
                digest = ev.sha256 or text_sha256(self._recorded_original(session, ev))
                self.earlier.add_digest(ev.result_id, digest)

    def _text_kept(self, ev: ToolEvent) -> bool:
        """Whether :attr:`earlier` keeps this result's text (else its hash only)."""
        size = ev.chars if ev.chars is not None else len(ev.message.content or "")
        return size <= self.earlier.max_text_chars

    def _recorded_original(self, session: Session, ev: ToolEvent, depth: int = 0) -> str:
        """The text of a recorded result: its offload file (the original, exactly), the
        earlier result it repeats, else its content less an invalid-UTF-8 note line."""
        assert self.files is not None and ev.result_id is not None
        if ev.offload is not None and self.files.exists(ev.result_id):
            return self.files.read(ev.result_id, 0, ev.offload.chars)[0]
        if ev.repeat_of is not None and depth < 2:
            for other in session.events:
                if isinstance(other, ToolEvent) and other.result_id == ev.repeat_of and other is not ev:
                    return self._recorded_original(session, other, depth + 1)
        content = ev.message.content or ""
        if ev.invalid_utf8 and content.startswith("[ctxwright: "):
            return content.partition("\n")[2]
        return content

    # -- layer 1 and repeats, at record time ------------------------------------------------
    def _new_id(self, tool_call_id: str) -> str:
        rid = tool_call_id or "result"
        k = 1
        while rid in self._ids:
            k += 1
            rid = f"{tool_call_id}~{k}"
        self._ids.add(rid)
        return rid

    def _task_names(self) -> Iterator[str]:
        """The code names the task mentions, found only if an outline is made (lazily:
        :meth:`query` reads the whole session)."""
        if self._round_session is not None:
            yield from names_in(self.query(self._round_session))

    def process_result(
        self, tool_name: str, tool_call_id: str, text: str | bytes, ok: bool
    ) -> tuple[str, BudgetRecord]:
        """The content to record for one result, and what the event records about it."""
        assert self.files is not None, "bind() the manager to a session first"
        rid = self._new_id(tool_call_id)
        cap = self.config.cap_for(tool_name, self.effective_window)
        # a skill's instructions loaded again (the first copy was compacted away) must arrive
        # whole, not as a pointer to a result the view no longer shows (skills.py)
        skill_body = isinstance(text, str) and body_skill(tool_name, text) is not None
        content, record = apply_budget(
            text,
            tool_name=tool_name,
            result_id=rid,
            cap_tokens=cap,
            count=self.counter.count,
            files=self.files,
            head_chars=self.config.preview_head_chars,
            tail_chars=self.config.preview_tail_chars,
            earlier=self.earlier if self.config.compress and not skill_body else None,
            names=self._task_names(),
        )
        if self.config.dedupe and ok and len(text) >= 200 and not skill_body:
            digest = record.sha256 or text_sha256(
                text if isinstance(text, str) else sanitize(text.decode("utf-8", "surrogateescape"))[0]
            )
            record = replace(record, sha256=digest)
            key = f"{tool_name}:{digest}"
            earlier = self._seen.get(key)
            if earlier is not None:  # the one-line pointer wins over a compressor's form
                marked = replace(record, repeat_of=earlier, compress_rule=None, compress_saved=None)
                return repeat_marker(tool_name, earlier), marked
            self._seen[key] = rid
        return content, record

    def query(self, session: Session) -> str:
        """What the task is: the first user message, and the latest one if it differs."""
        users = [
            ev.message.content or ""
            for ev in session.events
            if isinstance(ev, UserEvent) and not ev.is_reminder  # not the task
        ]
        if not users:
            return ""
        return users[0] if len(users) == 1 or users[-1] == users[0] else f"{users[0]}\n{users[-1]}"

    def strategy_context(self, session: Session, call_index: int) -> StrategyContext:
        return StrategyContext(
            query=self.query(session),
            known=self.known,
            count=self.counter.count,
            summarize=lambda text, instruction, max_chars, query: self.summarize(
                session, call_index, text, instruction, max_chars, query
            ),
        )

    def process_batch(self, session: Session, drafts: list[ResultDraft]) -> list[ResultDraft]:
        """One round's results, the budget step (``core/results.py``): layer 1 and repeats for
        each (under the name of the tool called), then the record-time strategy over the
        round. A large bytes result is decoded where it is saved (``budget.py``); a strategy
        reads its text back from there."""
        if self.config.compress:
            self._sync_earlier(session)
            self._round_session = session
        budgeted = [self.process_result(d.call.name, d.call.id, d.content, d.ok) for d in drafts]
        strategy = self.config.strategy
        if strategy not in ("none", "adaptive"):
            todo = [
                (i, NewResult(d.call.name, rec.result_id, self._as_text(d.content, rec), content, d.ok))
                for i, (d, (content, rec)) in enumerate(zip(drafts, budgeted, strict=True))
                if rec.repeat_of is None
                and body_skill(d.call.name, content) is None  # skills.py: never compressed
                and not (self.pins_call is not None and self.pins_call(d.call))  # pins.py: kept whole
            ]
            ctx = self.strategy_context(session, self._call_index)
            new = compress_batch(strategy, [r for _, r in todo], ctx)
            for (i, r), content in zip(todo, new, strict=False):
                if content is None:
                    continue
                rec = budgeted[i][1]
                if rec.offload is None:  # the original stays restorable
                    assert self.files is not None
                    rec = replace(rec, offload=offload_of(self.files.save(r.result_id, r.text)))
                self.known.append(content)
                budgeted[i] = (content, replace(rec, compressed=strategy, compress_rule=None, compress_saved=None))
        return [replace(d, content=content, budget=rec) for d, (content, rec) in zip(drafts, budgeted, strict=True)]

    def _as_text(self, text: str | bytes, record: BudgetRecord) -> str:
        """A result's text for a strategy: as given, or -- for bytes -- what was saved of it."""
        if isinstance(text, str):
            return text
        rid = record.result_id
        if self.files is not None and self.files.exists(rid):
            return self.files.read(rid, 0, SCAN_CHARS)[0]
        return sanitize(text.decode("utf-8", "surrogateescape"))[0]

    def original_text(self, session: Session, seq: int) -> str:
        """A recorded result's full text: its offload file, else its recorded content."""
        ev = session.events[seq]
        rid = ev.result_id if isinstance(ev, ToolEvent) else None
        if rid and self.files is not None and self.files.exists(rid):
            return self.files.read(rid, 0, SCAN_CHARS)[0]
        return (ev.message.content if isinstance(ev, ToolEvent) else None) or ""

    # -- measuring --------------------------------------------------------------------------
    def tokens_of(self, m: Message) -> int:
        n = self._msg_tokens.get(m)
        if n is None:
            n = self.counter.count(m.canonical()) + PER_MESSAGE_OVERHEAD
            if len(self._msg_tokens) > 50_000:
                self._msg_tokens.clear()
            self._msg_tokens[m] = n
        return n

    def request_tokens(self, session: Session) -> int:
        if self._trajectory_tokens is None:
            tokens_of = self.tokens_of
            self._trajectory_tokens = PrefixScan(0, lambda acc, m: acc + tokens_of(m))
        return self.counter.count(session.prefix.canonical()) + self._trajectory_tokens.scan(session.trajectory())

    # -- before each call -----------------------------------------------------------------
    def before_call(self, session: Session, call_index: int, *, overflow: bool = False) -> list[CompactionReport]:
        """Apply whatever layers the request's size calls for; returns what each did.

        ``overflow``: the server refused the last request as over its context window although
        the count here said it fit (another tokenizer, a template's overhead): every tier runs
        down to half the request (or the usual depth, if lower), each event recording
        ``overflow_retry``. A summary being written ahead is waited for, not abandoned."""
        if not self.config.enabled:
            return []
        self._call_index = call_index
        self.scan_new(session)
        tokens = self.request_tokens(session)
        spaced = call_index - self.last_compaction_call >= self.config.min_calls_between
        decision = self.plan(session, call_index, tokens, spaced) if self.config.policy == "cost" else None
        if overflow:
            depth = (
                decision.target if decision is not None else int(self.config.trim_target_ratio * self.effective_window)
            )
            decision = Decision(  # the server's word: over the window, whatever the count here said
                compact=True,
                reason="over_window",
                tokens=tokens,
                window=self.effective_window,
                target=min(depth, tokens // 2),
                grown=0,
                calls=0,
                reprefill=0,
                alpha=self.config.alpha,
                trigger=tokens,
            )
        state = PassState(self, session, call_index, tokens=tokens, spaced=spaced, decision=decision)
        if overflow:
            state.info["overflow_retry"] = True
        tiers = tiers_for(self.config)
        reports = self.ahead.boundary(state, tiers) if self.ahead is not None else []
        reports += pipeline.run(tiers, state)
        tokens = state.tokens
        if reports or self._stretch is None:  # a new stretch begins after a compaction (or at the start)
            self._stretch = (call_index, tokens)
        if tokens > self.effective_window:
            raise ContextWindowExceeded(
                f"the request needs about {tokens:,} tokens but the effective window is {self.effective_window:,} "
                f"({self.window_tokens:,} minus {self.config.reserve_output_tokens:,} for the reply), and nothing "
                "more can be removed: the system prompt, tool definitions, first user message, pinned messages and "
                "newest turn alone are too big. Shorten the task message, use fewer tools or pins, or a model with a "
                "larger window. "
                "Every event so far is saved."
            )
        return reports

    def scan_new(self, session: Session) -> None:
        """What the layers read of each result, found once per event as it arrives: the loss
        ledger's items (``ledger.py``) and the noise rule's salient terms (``noise.py``).
        Found when a pass needs them, a pass that hides a hundred events of a 128K-token
        context scanned a hundred results at once."""
        events = session.events
        for seq in range(self._ledger_scanned, len(events)):
            ev = events[seq]
            if isinstance(ev, ToolEvent):
                salient_terms(ev.message.content or "")
        self._ledger_scanned = self.ledger_items.scan(events, self._ledger_scanned, partial(self.ledger_text, session))

    def ledger_text(self, session: Session, seq: int) -> str | None:
        """The text the loss ledger scans for a result event: its original (``None`` for
        an event that is not a result: the ledger reads its message)."""
        return self.original_text(session, seq) if isinstance(session.events[seq], ToolEvent) else None

    def plan(self, session: Session, call_index: int, tokens: int, spaced: bool) -> Decision:
        """The cost rule's decision before this call (``planner.py``), on this stretch's numbers:
        D and N since the last compaction, or since the first call this manager saw (a resumed
        session starts a new stretch: conservative, the cost reason then waits longer)."""
        start, base = self._stretch if self._stretch is not None else (call_index, tokens)
        pinned = self.counter.count(session.prefix.canonical())
        first = next((m for m in session.trajectory() if m.role == "user"), None)
        if first is not None:
            pinned += self.tokens_of(first)
        return planner.decide(
            tokens=tokens,
            window=self.effective_window,
            target=int(self.config.target_ratio * self.effective_window),
            grown=tokens - base,
            calls=call_index - start,
            pinned=pinned,
            alpha=self.config.alpha,
            spaced=spaced,
        )

    def summarize(
        self, session: Session, call_index: int, text: str, instruction: str, max_chars: int, query: str | None = None
    ) -> str | None:
        """One checked LLM summary, or None: no summarizer, the breaker open, or a failure
        (recorded as an event and counted by the breaker). Every LLM layer and strategy
        comes through here."""
        if self.summarizer is None or not self.breaker.allow(call_index):
            return None
        if self.ahead is not None and self.ahead.running:  # the model object is busy with it
            self.ahead.wait()
        try:
            out = self.summarizer.summarize(text, instruction, max_chars=max_chars, query=query).text
        except SummaryFailed as exc:  # an event (nothing is lost) and a breaker count
            session.append(SummaryFailedEvent(reason=exc.reason, detail=exc.detail, call_index=call_index))
            self.breaker.failure(exc.reason, session, call_index)
            return None
        self.breaker.success(session, call_index)
        return out
