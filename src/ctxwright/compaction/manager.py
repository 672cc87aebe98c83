"""Runs the layers, cheapest first, before each model call.

Order and why:

1. the tool-result budget and repeat markers apply when a result is *recorded* (never
   sent yet, so free for the cache);
2. when the request passes ``trigger_ratio`` of the effective window (at most once every
   ``min_calls_between`` calls, unless it is over the window itself): unused-result
   markers (noise); if still over the trigger, clearing of old results; if still over,
   trim (drop the oldest whole turns) down to ``trim_target_ratio`` -- one ``compaction``
   event per layer that changed something;
3. if it cannot fit at all (the system prompt and first user message alone are too big):
   :class:`~ctxwright.errors.ContextWindowExceeded` with what to do, before any request.

The newest user message, pending tool results and the status bar are never touched: the
layers only rewrite what the model has already seen.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.compaction import archival, full
from ctxwright.compaction.breaker import CircuitBreaker
from ctxwright.compaction.budget import apply_budget, text_sha256
from ctxwright.compaction.check import violations
from ctxwright.compaction.clearing import clear_old_results
from ctxwright.compaction.config import CompactionConfig
from ctxwright.compaction.noise import repeat_marker, unused_results
from ctxwright.compaction.offload import ResultFiles
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.strategies import (
    COMPRESSED,
    SCAN_CHARS,
    NewResult,
    StrategyContext,
    compress_batch,
    compress_one,
)
from ctxwright.compaction.summarizer import Summarizer, SummaryFailed
from ctxwright.compaction.trim import note_text, plan_trim
from ctxwright.core.messages import Message, canonical_json
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import ContextWindowExceeded

if TYPE_CHECKING:
    from ctxwright.core.session import Session

#: Per-message framing tokens a chat template adds (role markers); an upper estimate.
PER_MESSAGE_OVERHEAD = 4
DEFAULT_SERVED_WINDOW = 128_000


@dataclass
class CompactionReport:
    """One layer's effect before one call: what it changed and what the request shrank by."""

    layer: str
    messages_changed: int
    tokens_before: int
    tokens_after: int
    event_seq: int


@dataclass
class ContextManager:
    """The layers of one session, configured by :class:`CompactionConfig`."""

    config: CompactionConfig
    counter: TokenCounter
    window_tokens: int
    reader: ResultReader = field(default_factory=ResultReader)
    files: ResultFiles | None = None
    _seen: dict[str, str] = field(default_factory=dict)  # (tool, sha256) -> result_id
    _ids: set[str] = field(default_factory=set)
    _last_compaction_call: int = -(10**9)
    _msg_tokens: dict[Message, int] = field(default_factory=dict)
    #: the LLM layers' summarizer (its own model object / requests); None: no LLM layers
    summarizer: Summarizer | None = None
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    _known: list[str] = field(default_factory=list)
    _call_index: int = 0
    llm_summaries: int = 0
    llm_failures: int = 0

    @classmethod
    def for_backend(
        cls, config: CompactionConfig, counter: TokenCounter, backend: Any, summary_backend: Any = None
    ) -> ContextManager:
        """``summary_backend``: where LLM summaries run; default a fork of ``backend`` when it
        has one (the embedded model: its own KV state), else ``backend`` itself (a served
        model: a separate request does not disturb the session's cached prefix)."""
        window = config.window_tokens or getattr(backend, "context_window", None) or DEFAULT_SERVED_WINDOW
        m = cls(config, counter, int(window))
        m.breaker = CircuitBreaker(config.breaker_threshold, config.breaker_cooldown_calls)
        if config.uses_llm:
            if summary_backend is None:
                fork = getattr(backend, "fork", None)
                summary_backend = fork() if callable(fork) else backend
            m.summarizer = Summarizer(
                summary_backend,
                counter,
                input_budget_tokens=config.summary_input_tokens,
                max_output_tokens=config.summary_max_tokens,
                timeout_s=config.summary_timeout_s,
            )
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
            else:
                base = Path(tempfile.gettempdir()) / "ctxwright-results"
        self.files = ResultFiles(Path(base) / session.id)
        self.reader.bind(session, self.files)
        for ev in session.events:
            if ev.kind == "tool":
                rid = ev.payload.get("result_id")
                if rid:
                    self._ids.add(rid)
                    if ev.payload.get("sha256"):
                        self._seen.setdefault(f"{ev.payload.get('tool_name')}:{ev.payload['sha256']}", rid)
            elif ev.kind == "compaction" and "call_index" in ev.payload:
                self._last_compaction_call = int(ev.payload.get("call_index", self._last_compaction_call))
        self._known = [
            (ev.payload.get("message") or {}).get("content") or ""
            for ev in session.events
            if ev.kind == "tool" and ev.payload.get("compressed")
        ]
        self.breaker.restore(session)

    # -- layer 1 and repeats, at record time ------------------------------------------------
    def _new_id(self, tool_call_id: str) -> str:
        rid = tool_call_id or "result"
        k = 1
        while rid in self._ids:
            k += 1
            rid = f"{tool_call_id}~{k}"
        self._ids.add(rid)
        return rid

    def process_result(self, tool_name: str, tool_call_id: str, text: str, ok: bool) -> tuple[str, dict[str, Any]]:
        """The content to record for one result, and the payload fields that describe it."""
        assert self.files is not None, "bind() the manager to a session first"
        rid = self._new_id(tool_call_id)
        cap = self.config.cap_for(tool_name, self.effective_window)
        res = apply_budget(
            text,
            tool_name=tool_name,
            result_id=rid,
            cap_tokens=cap,
            count=self.counter.count,
            files=self.files,
            head_chars=self.config.preview_head_chars,
            tail_chars=self.config.preview_tail_chars,
        )
        if self.config.dedupe and ok and len(text) >= 200:
            digest = res.info.get("sha256") or text_sha256(text)
            res.info["sha256"] = digest
            key = f"{tool_name}:{digest}"
            earlier = self._seen.get(key)
            if earlier is not None:
                res.info["repeat_of"] = earlier
                return repeat_marker(tool_name, earlier), res.info
            self._seen[key] = rid
        return res.content, res.info

    def query(self, session: Session) -> str:
        """What the task is: the first user message, and the latest one if it differs."""
        users = [ev.payload["message"].get("content") or "" for ev in session.events if ev.kind == "user"]
        if not users:
            return ""
        return users[0] if len(users) == 1 or users[-1] == users[0] else f"{users[0]}\n{users[-1]}"

    def _strategy_ctx(self, session: Session, call_index: int) -> StrategyContext:
        return StrategyContext(
            query=self.query(session),
            known=self._known,
            count=self.counter.count,
            summarize=lambda text, instruction, max_chars, query: self._summarize(
                session, call_index, text, instruction, max_chars, query
            ),
        )

    def process_batch(
        self, session: Session, items: list[tuple[str, str, str, bool]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """One round's results ``(tool name, call id, text, ok)``: layer 1 and repeats for each,
        then the record-time strategy over the round."""
        out = [self.process_result(name, cid, text, ok) for name, cid, text, ok in items]
        strategy = self.config.strategy
        if strategy in ("none", "adaptive"):
            return out
        todo = [
            (i, NewResult(items[i][0], info["result_id"], items[i][2], content, items[i][3]))
            for i, (content, info) in enumerate(out)
            if "repeat_of" not in info
        ]
        ctx = self._strategy_ctx(session, self._call_index)
        new = compress_batch(strategy, [r for _, r in todo], ctx)
        for (i, r), content in zip(todo, new, strict=False):
            if content is None:
                continue
            info = out[i][1]
            if "offload" not in info:  # the original stays restorable
                assert self.files is not None
                saved = self.files.save(r.result_id, r.text)
                info["offload"] = {"path": saved.path, "chars": saved.chars, "bytes": saved.bytes}
            info["compressed"] = strategy
            self._known.append(content)
            out[i] = (content, info)
        return out

    def _original(self, session: Session, seq: int) -> str:
        """A recorded result's full text: its offload file, else its recorded content."""
        p = session.events[seq].payload
        rid = p.get("result_id")
        if rid and self.files is not None and self.files.exists(rid):
            return self.files.read(rid, 0, SCAN_CHARS)[0]
        return (p.get("message") or {}).get("content") or ""

    # -- measuring --------------------------------------------------------------------------
    def _tokens_of(self, m: Message) -> int:
        n = self._msg_tokens.get(m)
        if n is None:
            n = self.counter.count(canonical_json(m.to_wire())) + PER_MESSAGE_OVERHEAD
            if len(self._msg_tokens) > 50_000:
                self._msg_tokens.clear()
            self._msg_tokens[m] = n
        return n

    def request_tokens(self, session: Session) -> int:
        return self.counter.count(session.prefix.canonical()) + sum(self._tokens_of(m) for m in session.trajectory())

    # -- before each call -----------------------------------------------------------------
    def before_call(self, session: Session, call_index: int) -> list[CompactionReport]:
        """Apply whatever layers the request's size calls for; returns what each did."""
        if not self.config.enabled:
            return []
        cfg = self.config
        reports: list[CompactionReport] = []
        self._call_index = call_index
        tokens = self.request_tokens(session)
        trigger = cfg.trigger_ratio * self.effective_window
        spaced = call_index - self._last_compaction_call >= cfg.min_calls_between
        llm_ok = self.summarizer is not None and self.breaker.allow(call_index)
        if cfg.strategy == "adaptive" and llm_ok and tokens > cfg.adaptive_ratio * self.effective_window:
            tokens = self._layer(
                session,
                "adaptive",
                call_index,
                tokens,
                reports,
                lambda entries, done: self._adaptive(session, entries, done, call_index),
            )
        if (tokens > trigger and spaced) or tokens > self.effective_window:
            meta = {ev.seq: ev.payload for ev in session.events if ev.kind == "tool"}
            protected = self._protected(session)
            if cfg.drop_unused:
                tokens = self._layer(
                    session,
                    "noise",
                    call_index,
                    tokens,
                    reports,
                    lambda entries, done: unused_results(entries, meta, cfg.unused_after_turns, done | protected),
                )
            if (
                tokens > trigger
                and cfg.archival_summaries
                and self.summarizer is not None
                and self.breaker.allow(call_index)
            ):
                tokens = self._layer(
                    session,
                    "archival",
                    call_index,
                    tokens,
                    reports,
                    lambda entries, done: self._archive(session, entries, done | protected, call_index),
                )
            if tokens > trigger:
                tokens = self._layer(
                    session,
                    "clearing",
                    call_index,
                    tokens,
                    reports,
                    lambda entries, done: clear_old_results(
                        entries,
                        meta,
                        cfg.keep_recent_results,
                        cfg.min_clear_tokens,
                        self.counter.count,
                        done | protected,
                        int(cfg.keep_recent_share * self.effective_window),
                    ),
                )
            for stage in (1, 2):  # layer 5: LLM compaction of the older trajectory, older half first
                if (
                    tokens > trigger
                    and cfg.full_compaction
                    and self.summarizer is not None
                    and self.breaker.allow(call_index)
                ):
                    tokens = self._full(session, call_index, tokens, reports, stage)
            if tokens > trigger:  # what is left is turns themselves: drop the oldest, well below the trigger
                tokens = self._trim(
                    session, call_index, tokens, reports, target=int(cfg.trim_target_ratio * self.effective_window)
                )
        if tokens > self.effective_window:
            raise ContextWindowExceeded(
                f"the request needs about {tokens:,} tokens but the effective window is {self.effective_window:,} "
                f"({self.window_tokens:,} minus {cfg.reserve_output_tokens:,} for the reply), and nothing "
                "more can be removed: the system prompt, tool definitions, first user message and newest turn "
                "alone are too big. Shorten the task message, use fewer tools, or a model with a larger window. "
                "Every event so far is saved."
            )
        return reports

    def _summarize(
        self, session: Session, call_index: int, text: str, instruction: str, max_chars: int, query: str | None = None
    ) -> str | None:
        """One checked LLM summary, or None: no summarizer, the breaker open, or a failure
        (recorded as an event and counted by the breaker). Every LLM layer and strategy
        comes through here."""
        if self.summarizer is None or not self.breaker.allow(call_index):
            return None
        try:
            out = self.summarizer.summarize(text, instruction, max_chars=max_chars, query=query).text
        except SummaryFailed as exc:  # an event (nothing is lost) and a breaker count
            self.llm_failures += 1
            session.append("summary_failed", {"reason": exc.reason, "detail": str(exc), "call_index": call_index})
            self.breaker.failure(exc.reason, session, call_index)
            return None
        self.llm_summaries += 1
        self.breaker.success(session, call_index)
        return out

    def _adaptive(self, session: Session, entries, done: set[int], call_index: int) -> dict[int, str]:
        """Every result not compressed yet, each compressed once and marked [COMPRESSED]."""
        ctx = self._strategy_ctx(session, call_index)
        out: dict[int, str] = {}
        for seq, m in entries:
            if m.role != "tool" or seq is None or seq in done or (m.content or "").startswith(COMPRESSED):
                continue
            p = session.events[seq].payload
            r = NewResult(
                p.get("tool_name") or "tool",
                p.get("result_id") or m.tool_call_id or str(seq),
                self._original(session, seq),
                m.content or "",
                bool(p.get("ok", True)),
            )
            new = compress_one("adaptive", r, ctx)
            if new is not None:
                out[seq] = new
                self._known.append(new)
            elif self.summarizer is None or not self.breaker.allow(call_index):
                break
        return out

    def _archive(self, session: Session, entries, done: set[int], call_index: int) -> dict[int, str]:
        return archival.archive(
            entries,
            self.config.keep_recent_results,
            done,
            lambda text: self._summarize(session, call_index, text, archival.INSTRUCTION, 600),
        )

    def _full(
        self, session: Session, call_index: int, tokens: int, reports: list[CompactionReport], stage: int
    ) -> int:
        entries = session.base_entries()
        idx = full.plan_span(entries, stage, self._tokens_of)
        seqs = [entries[i][0] for i in idx if entries[i][0] is not None]
        if not seqs:
            return tokens
        text = full.render([entries[i][1] for i in idx])
        summary = self._summarize(session, call_index, text, full.INSTRUCTION, 2_000)
        if summary is None:
            return tokens
        ev = session.add_compaction(
            "full",
            drop=seqs,
            note=(min(seqs), full.note(summary, len(idx), stage)),
            note_replaces_all=True,
            call_index=call_index,
            tokens_before=tokens,
            stage=stage,
        )
        after = self.request_tokens(session)
        reports.append(CompactionReport(f"full_stage{stage}", len(idx), tokens, after, ev.seq))
        self._last_compaction_call = call_index
        self._check(session)
        return after

    def status_line(self) -> str | None:
        return self.breaker.status_line(self._call_index)

    def _protected(self, session: Session) -> set[int]:
        """Results the model has not answered yet (after the last assistant turn) stay as they are."""
        out: set[int] = set()
        for ev in reversed(session.events):
            if ev.kind == "assistant":
                break
            if ev.kind == "tool":
                out.add(ev.seq)
        return out

    def _replaced_already(self, session: Session) -> set[int]:
        done: set[int] = set()
        for ev in session.events:
            if ev.kind == "compaction":
                done.update(int(k) for k in (ev.payload.get("replace") or {}))
        return done

    def _layer(
        self, session: Session, name: str, call_index: int, tokens: int, reports: list[CompactionReport], plan
    ) -> int:
        replace = plan(session.base_entries(), self._replaced_already(session))
        if not replace:
            return tokens
        ev = session.add_compaction(name, replace=replace, call_index=call_index, tokens_before=tokens)
        after = self.request_tokens(session)
        reports.append(CompactionReport(name, len(replace), tokens, after, ev.seq))
        self._last_compaction_call = call_index
        self._check(session)
        return after

    def _trim(
        self, session: Session, call_index: int, tokens: int, reports: list[CompactionReport], target: int
    ) -> int:
        entries = session.base_entries()
        kinds = {ev.seq: ev.kind for ev in session.events}
        drop, first = plan_trim(entries, self._tokens_of, tokens - target, kinds)
        if not drop or first is None:
            return tokens
        total = len(drop) + sum(len(ev.payload.get("drop") or ()) for ev in session.events if ev.kind == "compaction")
        ev = session.add_compaction(
            "trim", drop=drop, note=(first, note_text(total)), call_index=call_index, tokens_before=tokens
        )
        after = self.request_tokens(session)
        reports.append(CompactionReport("trim", len(drop), tokens, after, ev.seq))
        self._last_compaction_call = call_index
        self._check(session)
        return after

    def _check(self, session: Session) -> None:
        """A layer that broke an invariant is a bug in ctxwright; fail before sending."""
        bad = violations([m for _, m in session.recorded_messages()], session.trajectory())
        if bad:
            raise AssertionError("ctxwright compaction produced an invalid context: " + "; ".join(bad))
