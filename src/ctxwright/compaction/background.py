"""No stalls: the LLM summary written ahead, on a background thread, applied at a call boundary.

Why: a summary by a model takes seconds (a served model's queue, a small local model's
prefill); written inside the call that needs it, the agent stands still that long at every
compaction (one public session spent a median 137 s per compaction). Written ahead, from the
moment the request passes ``soft_ratio`` of the window, it is usually ready before the
trigger, and the boundary that applies it only checks and records.

Rules, each protecting the bytes the session sends and replays:

* the job reads nothing of the session: it gets the text to summarise, rendered in the main
  thread, and runs the summarizer alone (``summarizer.py`` puts the request on its own thread
  with its timeout), so the loop may append events meanwhile;
* it is applied only if the events it summarised are still in view, in order, unchanged (a
  compaction since, a rewritten result: the span is stale) -- else it is discarded, and a
  ``summary_failed`` event with reason ``stale`` says so;
* it is applied through the same check-record-measure step as the synchronous tier
  (``pipeline.apply``), with the plan the tier builds from the same span and summary
  (``pipeline.full_plan``), so it records the same ``compaction`` event and a resume renders
  the same bytes;
* a pass that reaches the trigger while the job runs waits for it, at most the summary
  timeout, instead of starting a second summary of the same span;
* every compaction event records ``stall_ms``: how long the loop waited on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ctxwright.compaction import archival, full
from ctxwright.core.events import CompactionEvent, Event, SummaryFailedEvent
from ctxwright.core.messages import Message
from ctxwright.errors import SummaryFailed

if TYPE_CHECKING:
    from ctxwright.compaction.pipeline import CompactionReport, PassState, Plan, Tier
    from ctxwright.compaction.summarizer import Summarizer

#: (seq or None for an inserted note, message): one entry of ``Session.base_entries()``
Entry = tuple[int | None, Message]


def stall_ms(started: float) -> float:
    """Milliseconds since ``started`` (``time.monotonic()``), as recorded in ``stall_ms``."""
    return round((time.monotonic() - started) * 1000, 1)


def stamp(state: PassState, plan: Plan, started: float) -> None:
    """Before a plan is recorded: how long the loop waited on it (``stall_ms``), and what the
    pass adds to every event it records (``PassState.info``: ``overflow_retry``)."""
    plan.info.setdefault("stall_ms", stall_ms(started))
    for key, value in state.info.items():
        plan.info.setdefault(key, value)


def stall_summary(values: list[float]) -> dict[str, float | int] | None:
    """``n``, ``p50_ms``, ``p95_ms`` and ``max_ms`` of recorded stalls (nearest rank); ``None``
    when no compaction recorded one (events written before the field existed)."""
    if not values:
        return None
    xs = sorted(values)

    def rank(q: float) -> float:
        return xs[max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))]

    return {"n": len(xs), "p50_ms": rank(0.5), "p95_ms": rank(0.95), "max_ms": xs[-1]}


def stalls(events: Iterable[Event]) -> dict[str, float | int] | None:
    """:func:`stall_summary` of the compaction events' ``stall_ms``: what ``ctxwright show ID
    --compactions`` prints under the ledgers."""
    return stall_summary([ev.stall_ms for ev in events if isinstance(ev, CompactionEvent) and ev.stall_ms is not None])


@dataclass
class Job:
    """One summary being written ahead: what it summarises and, once done, the outcome."""

    #: ``full`` (stage 1's span, one note) or ``archival`` (one summary per old round)
    layer: str
    call_index: int
    #: the entries it summarised, as the view showed them at launch
    picked: list[Entry]
    #: full: the one summary; archival: event seq -> new content
    summary: str | None = None
    replace: dict[int, str] = field(default_factory=dict)
    failure: SummaryFailed | None = None
    started: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self, work: Callable[[], None]) -> None:
        def run() -> None:
            try:
                work()
            except SummaryFailed as exc:
                self.failure = exc
            except Exception as exc:  # a bug or a backend's surprise: reported as a failed summary
                self.failure = SummaryFailed("error", f"{type(exc).__name__}: {exc}")
            finally:
                self.done.set()

        self.thread = threading.Thread(target=run, daemon=True, name="ctxwright-summary-ahead")
        self.thread.start()


def still_in_view(entries: list[Entry], picked: list[Entry]) -> bool:
    """Whether every picked entry is still in the view, in the same order, with the same
    message (the span was not compacted, rewritten or cut since)."""
    j = 0
    for entry in picked:
        while j < len(entries) and entries[j] != entry:
            j += 1
        if j == len(entries):
            return False
        j += 1
    return True


@dataclass
class Ahead:
    """The background summaries of one :class:`~ctxwright.compaction.manager.ContextManager`."""

    summarizer: Summarizer
    job: Job | None = None
    #: jobs started, applied and discarded as stale (for a benchmark or a test to read)
    started: int = 0
    applied: int = 0
    discarded: int = 0

    @property
    def running(self) -> bool:
        return self.job is not None and not self.job.done.is_set()

    def wait(self) -> None:
        """Wait for the running job, at most the summary timeout (the summarizer's own
        timeout ends its request by then; a second is left for the thread to finish)."""
        if self.job is not None:
            self.job.done.wait(self.summarizer.timeout_s + 1.0)

    # -- one call boundary -----------------------------------------------------------------
    def boundary(self, state: PassState, tiers: list[Tier]) -> list[CompactionReport]:
        """Before a call: apply a finished job; wait for a running one if the pass reached the
        trigger; start one when the request passed the soft threshold. ``tiers``: the
        configured tiers, whose ``full`` / ``archival`` one records what a job prepared."""
        t0 = time.monotonic()
        reports: list[CompactionReport] = []
        job = self.job
        if job is not None and not job.done.is_set() and state.triggered():
            self.wait()
        if job is not None and job.done.is_set():
            self.job = None
            reports += self._apply(state, job, tiers, t0)
        elif job is not None and state.triggered():  # still not done after the timeout
            self.job = None
            state.session.append(
                SummaryFailedEvent(
                    reason="timeout",
                    detail=f"the summary prepared ahead took over {self.summarizer.timeout_s:g} s",
                    call_index=state.call_index,
                )
            )
            state.manager.breaker.failure("timeout", state.session, state.call_index)
        if self.job is None and not reports and self._soft(state):
            self._launch(state)
            if self.job is not None and state.triggered():  # over the trigger already: as synchronous
                self.wait()
                job = self.job
                if job.done.is_set():
                    self.job = None
                    reports += self._apply(state, job, tiers, t0)
        return reports

    def _soft(self, state: PassState) -> bool:
        m = state.manager
        spaced = state.call_index - m.last_compaction_call >= state.config.min_calls_between
        return spaced and state.tokens > state.config.soft_ratio * state.window and state.llm_available()

    def _launch(self, state: PassState) -> None:
        """Render the span in this thread; summarise it on another."""
        from ctxwright.compaction.pipeline import exempt, full_span, replaced_already

        cfg, s = state.config, state.session
        summarizer = self.summarizer
        job: Job
        if cfg.full_compaction:
            picked = full_span(state, 1)
            if not any(seq is not None for seq, _ in picked):
                return
            job = Job("full", state.call_index, picked)
            text = full.render([msg for _, msg in picked])

            def work_full() -> None:
                job.summary = summarizer.summarize(text, full.INSTRUCTION, max_chars=2_000).text

            job.start(work_full)
        else:
            entries = s.base_entries()
            done = replaced_already(s) | exempt(s)
            rounds = archival.old_rounds(entries, cfg.keep_recent_results, done)
            if not rounds:
                return
            results: list[Entry] = [(seq, msg) for _k, _call, res in rounds for seq, msg in res]
            job = Job("archival", state.call_index, results)

            def summarize_round(text: str) -> str | None:
                try:
                    return summarizer.summarize(text, archival.INSTRUCTION, max_chars=600).text
                except SummaryFailed as exc:  # the first failure ends the pass, as in the tier
                    job.failure = exc
                    return None

            def work_archival() -> None:
                job.replace = archival.archive(entries, cfg.keep_recent_results, done, summarize_round)

            job.start(work_archival)
        self.job = job
        self.started += 1

    def _apply(self, state: PassState, job: Job, tiers: list[Tier], t0: float) -> list[CompactionReport]:
        """Record what ``job`` prepared, if its span is still valid; else say why not."""
        from ctxwright.compaction import pipeline

        s, m = state.session, state.manager
        if job.failure is not None:  # as the synchronous path: an event and a breaker count
            s.append(
                SummaryFailedEvent(reason=job.failure.reason, detail=job.failure.detail, call_index=state.call_index)
            )
            m.breaker.failure(job.failure.reason, s, state.call_index)
        elif job.summary is not None or job.replace:
            m.breaker.success(s, state.call_index)
        tier = next((t for t in tiers if t.layer == job.layer), None)
        if tier is None or (job.summary is None and not job.replace):
            return []
        if not still_in_view(s.base_entries(), [e for e in job.picked if e[0] is not None]):
            self._discard(state, job, "the events it summarised were compacted or changed since")
            return []
        if job.layer == "full":
            assert job.summary is not None
            seqs = [seq for seq, _ in job.picked if seq is not None]
            plan = pipeline.full_plan(state, 1, seqs, len(job.picked), job.summary)
        else:
            plan = pipeline.Plan(len(job.replace), replace=dict(job.replace))
        plan.info.update({"background": True, "prepared_at_call": job.call_index})
        stamp(state, plan, t0)
        try:
            report = pipeline.apply(state, tier, plan)
        except AssertionError as exc:  # the span no longer cuts cleanly: nothing was recorded
            self._discard(state, job, f"the view it would give is no longer valid ({exc})")
            return []
        if report is None:  # vetoed by the user's before_compaction hook (hooks.py records it)
            return []
        report.started_at = time.time() - (time.monotonic() - t0)
        self.applied += 1
        return [report]

    def _discard(self, state: PassState, job: Job, reason: str) -> None:
        self.discarded += 1
        state.session.append(
            SummaryFailedEvent(
                reason="stale",
                detail=f"the {job.layer} summary prepared before call {job.call_index} was discarded: {reason}",
                call_index=state.call_index,
            )
        )
