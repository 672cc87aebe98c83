"""Compaction hooks (``compaction/hooks.py``) on a real Harness with the scripted backend: a
veto stops a compaction (and cannot stop one the window needs), an edit keeps events in view
or adds to the note, an edit that breaks an invariant is refused, a hook that raises or hangs
is bounded and reported while the run goes on, ``after_compaction`` reads the ledger, and the
hooks' events survive a resume. Each behaviour is checked against a run without the hook, so
a test fails if the hook had no effect."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright import CompactionHooks, ConfigError, Harness, PlanEdit, PlanView, ScriptedBackend, Veto, tool
from ctxwright.agent.progress import Compacted
from ctxwright.backends.scripted import call
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.hooks import CompactionHookWarning
from ctxwright.compaction.pipeline import CompactionReport
from ctxwright.core.events import CompactionEvent, HookEvent, ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.progress import ProgressEvent


@tool
def fetch(page: int) -> str:
    """Fetch a page.

    Args:
        page: page number
    """
    return f"Page {page}: " + " ".join(f"Fact{page}-{i}" for i in range(150))


def _replies(pages: int) -> list[Message | str]:
    return [
        Message(role="assistant", content=f"Fact{i}-0", tool_calls=(call("fetch", {"page": i}, f"p{i}"),))
        for i in range(pages)
    ] + ["done"]


def _harness(tmp_path: Path, hooks: CompactionHooks | None, pages: int = 6, **options: Any) -> Harness:
    """Compactions from call 3 on (eager policy, a 4,096-token window); with 5 pages the request
    stays under the window uncompacted, with 6 or more it would pass it."""
    cfg = CompactionConfig(
        results_dir=tmp_path / "results", window_tokens=4096, keep_recent_results=3, drop_unused=False, policy="eager"
    )
    return Harness(
        "You read pages.",
        [fetch],
        backend=ScriptedBackend(_replies(pages)),
        db=tmp_path / "agent.db",
        summaries=False,
        compaction=cfg,
        compaction_hooks=hooks,
        **options,
    )


def _compactions(h: Harness) -> list[CompactionEvent]:
    return [ev for ev in h.session.events if isinstance(ev, CompactionEvent)]


def _hook_events(h: Harness) -> list[HookEvent]:
    return [ev for ev in h.session.events if isinstance(ev, HookEvent)]


def _call_ids(m: Message) -> tuple[str | None, ...]:
    """The tool-call id a message answers and the ids of the calls it makes."""
    return (m.tool_call_id, *(c.id for c in m.tool_calls))


def _view_text(h: Harness) -> str:
    return "\n".join(m.content or "" for m in h.session.trajectory())


def test_a_veto_stops_the_compaction(tmp_path):
    with _harness(tmp_path / "plain", None, pages=5) as plain:
        assert plain.run("read the pages").stop_reason == "final_answer"
        assert _compactions(plain)  # without the hook this run compacts
    seen: list[PlanView] = []

    def before(plan: PlanView) -> Veto:
        seen.append(plan)
        return Veto("the user is reviewing the pages")

    with _harness(tmp_path / "vetoed", CompactionHooks(before=before), pages=5) as h:
        assert h.run("read the pages").stop_reason == "final_answer"
        assert _compactions(h) == []
        events = _hook_events(h)
        assert events and {ev.decision for ev in events} == {"vetoed"}
        assert events[0].hook == "before_compaction" and events[0].reason == "the user is reviewing the pages"
        assert "Fact0-149" in _view_text(h)  # nothing was cleared
        # the plan the hook saw: what the tier would hide, and the tokens it would free
        plan = seen[0]
        assert plan.tier == "trim" and plan.seqs and plan.tokens_after < plan.tokens_before <= plan.window
        assert plan.session_id == h.session_id
        assert set(plan.messages) == set(plan.drop) and plan.note and "removed" in plan.note
        assert {seen_plan.tier for seen_plan in seen} == {"trim", "clearing"}
        with pytest.raises(TypeError):
            plan.replace[plan.seqs[0]] = "x"  # type: ignore[index]  # read-only


def test_a_veto_cannot_push_the_request_over_the_window(tmp_path):
    """Over the window the provider would refuse the call: the plan applies, the event says so."""
    hooks = CompactionHooks(before=lambda plan: Veto("never"))
    with _harness(tmp_path, hooks, pages=14) as h:
        r = h.run("read the pages")
        assert r.stop_reason == "final_answer"
        decisions = [ev.decision for ev in _hook_events(h)]
        assert "vetoed" in decisions and "overridden" in decisions
        overridden = next(ev for ev in _hook_events(h) if ev.decision == "overridden")
        assert "over the window" in overridden.reason and "never" in overridden.reason
        assert _compactions(h)
        assert max(c.prompt_tokens or 0 for c in r.calls) <= 4096


def test_a_kept_event_stays_in_view(tmp_path):
    with _harness(tmp_path / "plain", None) as plain:
        plain.run("read the pages")
        assert "Fact0-149" not in _view_text(plain)  # without the hook page 0 is cleared

    def keep_page_0(plan: PlanView) -> PlanEdit:  # the call and its result: a dropped turn stays whole
        return PlanEdit(keep=[s for s, m in plan.messages.items() if "p0" in _call_ids(m)])

    with _harness(tmp_path / "kept", CompactionHooks(before=keep_page_0)) as h:
        h.run("read the pages")
        page0 = next(ev.seq for ev in h.session.events if isinstance(ev, ToolEvent) and ev.result_id == "p0")
        edited = [ev for ev in _hook_events(h) if ev.decision == "edited"]
        assert edited and edited[0].kept == (page0 - 1, page0)  # the call and its result
        comps = _compactions(h)
        assert comps and all(page0 not in c.replace and page0 not in c.drop for c in comps)
        assert any(c.replace for c in comps)  # the rest of the plan still applied
        assert "Fact0-149" in _view_text(h)


def test_a_note_is_added_to_the_compaction_note(tmp_path):
    note = "Remember: the deploy freeze lasts until Friday."
    with _harness(tmp_path, CompactionHooks(before=lambda plan: PlanEdit(note=note))) as h:
        h.run("read the pages")
        noted = [ev for ev in _hook_events(h) if ev.decision == "noted"]
        assert noted and noted[0].note == note
        comps = _compactions(h)
        assert any(note in text for c in comps for text in c.replace.values())
        assert note in _view_text(h)


def test_an_edit_that_breaks_an_invariant_is_refused(tmp_path):
    """Keeping a tool call while trim drops its result would leave the call unanswered."""

    def keep_calls(plan: PlanView) -> PlanEdit | None:
        if plan.tier != "trim":
            return None
        return PlanEdit(keep=[s for s, m in plan.messages.items() if m.tool_calls])

    warnings: list[ProgressEvent] = []
    with _harness(tmp_path, CompactionHooks(before=keep_calls), pages=14, on_event=warnings.append) as h:
        assert h.run("read the pages").stop_reason == "final_answer"
        refused = [ev for ev in _hook_events(h) if ev.decision == "refused"]
        assert refused and "invalid context" in refused[0].reason
        trims = [c for c in _compactions(h) if c.layer == "trim"]
        assert trims and any(s in trims[0].drop for s in refused[0].kept)  # the default rule applied
        assert any(isinstance(w, CompactionHookWarning) and w.decision == "refused" for w in warnings)


def test_a_hook_that_raises_is_reported_and_the_compaction_goes_on(tmp_path):
    def before(plan: PlanView) -> None:
        raise RuntimeError("cannot reach https://alice:s3cret@hooks.example/review")

    warnings: list[ProgressEvent] = []
    with _harness(tmp_path, CompactionHooks(before=before), on_event=warnings.append) as h:
        assert h.run("read the pages").stop_reason == "final_answer"
        failed = [ev for ev in _hook_events(h) if ev.hook == "before_compaction"]
        assert failed and {ev.decision for ev in failed} == {"failed"}
        assert "RuntimeError: cannot reach" in failed[0].reason and "s3cret" not in failed[0].reason  # redacted
        assert len(_compactions(h)) == len(failed)  # each went on as planned
        lines = [w for w in warnings if isinstance(w, CompactionHookWarning)]
        assert len(lines) == len(failed) and "failed" in lines[0].message and "s3cret" not in lines[0].message


def test_a_hook_that_hangs_is_cut_off_and_the_run_goes_on(tmp_path):
    release = threading.Event()

    def before(plan: PlanView) -> None:
        release.wait(60)  # hangs for a minute unless released

    warnings: list[ProgressEvent] = []
    t0 = time.monotonic()
    try:
        with _harness(tmp_path, CompactionHooks(before=before, timeout_s=0.5), on_event=warnings.append) as h:
            assert h.run("read the pages").stop_reason == "final_answer"
            elapsed = time.monotonic() - t0
            events = _hook_events(h)
            assert events and events[0].decision == "timeout" and "0.5 s" in events[0].reason
            assert events[0].duration_ms >= 450
            # at most MAX_HUNG threads are left behind: later compactions skip the hook
            assert {ev.decision for ev in events} <= {"timeout", "skipped"}
            assert len(_compactions(h)) == len(events)
            assert any(isinstance(w, CompactionHookWarning) and w.decision == "timeout" for w in warnings)
    finally:
        release.set()
    assert elapsed < 30  # not the minute the hook asked for


def test_after_compaction_sees_the_ledger(tmp_path):
    reports: list[CompactionReport] = []

    def after(report: CompactionReport) -> None:
        reports.append(report)
        report.kind = "changed by the hook"  # its own copy: the loop's report stays as it was

    progress: list[ProgressEvent] = []
    with _harness(tmp_path, CompactionHooks(after=after), on_event=progress.append) as h:
        h.run("read the pages")
        shown = [e.report for e in progress if isinstance(e, Compacted)]
        assert shown and all(r.kind in ("clearing", "trim") and r.ledger is not None for r in shown)
        comps = _compactions(h)
        assert comps and [r.event_seq for r in reports] == [c.seq for c in comps]
        for report, comp in zip(reports, comps, strict=True):
            assert report.ledger is not None and report.ledger.event_seq == comp.seq
            assert {e.seq for e in report.ledger.events} == set(comp.replace) | set(comp.drop)
            assert report.ledger.hidden == len(comp.replace) + len(comp.drop)
        after = [ev for ev in _hook_events(h) if ev.hook == "after_compaction"]
        assert [ev.compaction_seq for ev in after] == [c.seq for c in comps]
        assert {ev.decision for ev in after} == {"ok"}


def test_hook_events_survive_a_resume(tmp_path):
    hooks = CompactionHooks(before=lambda plan: PlanEdit(note="kept by the reviewer"))
    with _harness(tmp_path, hooks) as h:
        h.run("read the pages")
        sid, before = h.session_id, [ev.to_dict() for ev in _hook_events(h)]
    assert before
    with Harness.resume(sid, [fetch], backend=ScriptedBackend(["again"]), db=tmp_path / "agent.db") as again:
        assert [ev.to_dict() for ev in _hook_events(again)] == before
        assert "kept by the reviewer" in _view_text(again)  # the edited compaction renders the same
        again.run("anything else?")  # no hooks given this time: nothing called, nothing recorded
        assert [ev.to_dict() for ev in _hook_events(again)] == before


def test_bad_hooks_are_refused_up_front(tmp_path):
    with pytest.raises(ConfigError, match="compaction_hooks"):
        _harness(tmp_path, lambda plan: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s"):
        CompactionHooks(timeout_s=0)
    with pytest.raises(TypeError):
        CompactionHooks(before="not a function")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PlanEdit(keep=["3"])  # type: ignore[list-item]


def test_show_compactions_lists_what_the_hooks_decided(tmp_path):
    """``ctxwright show ID --compactions`` says who stopped a compaction: a veto is listed with
    its reason (text and ``--json``); a hook that let the plan through is not."""
    import contextlib
    import io
    import json

    from rich.console import Console

    from ctxwright.cli.show import render_compactions
    from ctxwright.store.sessions import Store

    with _harness(tmp_path, CompactionHooks(before=lambda plan: Veto("the user is reviewing")), pages=5) as h:
        assert h.run("read the pages").stop_reason == "final_answer"
        sid = h.session_id
    store = Store(tmp_path / "agent.db")
    try:
        out = io.StringIO()
        render_compactions(store, sid, Console(file=out, width=200))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            render_compactions(store, sid, Console(file=io.StringIO()), as_json=True)
    finally:
        store.close()
    text = out.getvalue()
    assert "no compactions in this session" in text
    assert "hook before_compaction on trim" in text and "vetoed" in text and "the user is reviewing" in text
    hooks = json.loads(buf.getvalue())["hooks"]
    assert hooks and {x["decision"] for x in hooks} == {"vetoed"} and hooks[0]["tier"] == "trim"
