"""The loss ledger, recall and the notice before a deep compaction, on a real agent loop
(scripted backend, real tools, real store): identifiers planted in large tool results under a
small window must be listed as lost exactly when no longer visible, and ``recall`` must hand
back the passage that holds each of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction import ledger as ledger_mod
from ctxwright.compaction.ledger import appears, items_of, ledgers, visible_text
from ctxwright.compaction.recall import Recall
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import CompactionEvent, event_from_dict
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.progress import CompactionAhead, ProgressEvent
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool

FILLER = " ".join(["lorem ipsum dolor sit amet consectetur"] * 8)


def planted(page: int) -> list[str]:
    return [f"PROJ-{4800 + page}", f"a3f9c{page}e7d1", f"https://example.com/runbook/page{page}"]


def A(*calls: ToolCall, text: str | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(calls))


def _run(store: Store, tmp_path: Path, pages: int = 12, untrusted: bool = False) -> tuple[Session, list[ProgressEvent]]:
    reg = ToolRegistry()

    @tool(trust="untrusted" if untrusted else "trusted")
    def fetch(page: int) -> str:
        """Fetch a page of the runbook.

        Args:
            page: page number
        """
        ids = planted(page)
        return (
            f"Page {page}. {FILLER}\nThe incident ticket is {ids[0]}, fixed by commit {ids[1]}; see {ids[2]}.\n{FILLER}"
        )

    reg.register(fetch)
    reg.register(ResultReader().tool())
    reg.register(Recall().tool())
    replies: list[Message | str] = [
        A(call("fetch", {"page": i}, f"p{i}"), text=f"reading page {i}") for i in range(pages)
    ]
    replies.append("done")
    cfg = CompactionConfig(results_dir=tmp_path, window_tokens=2048, keep_recent_results=3, drop_unused=False)
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    seen: list[ProgressEvent] = []
    agent = Agent(
        s,
        ScriptedBackend(replies),
        reg,
        AgentConfig(compaction=cfg, max_iterations=40),
        counter=TokenCounter(estimate_tokens, "estimate"),
        on_event=seen.append,
    )
    assert agent.run("read the runbook pages").stop_reason == "final_answer"
    return s, seen


def _lost(s: Session) -> set[str]:
    out: set[str] = set()
    for _ev, led in ledgers(s.events):
        assert led is not None
        out.update(i.value for h in led.events for i in h.lost)
    return out


def test_the_ledger_lists_exactly_the_planted_identifiers_no_longer_visible_and_recall_returns_each(store, tmp_path):
    s, _ = _run(store, tmp_path)
    comps = [ev for ev in s.events if isinstance(ev, CompactionEvent)]
    assert comps, "the small window must make the layers compact"
    view = s.prefix.system_prompt + "\n" + visible_text(s.trajectory())
    every = {i for p in range(12) for i in planted(p)}
    gone = {i for i in every if not appears(i, view)}
    assert gone and gone != every  # some hidden, the newest results still in view
    assert _lost(s) == gone
    # each hidden event says where it can be read back: a result by its result_id, any event by recall
    layers = set()
    for ev, led in ledgers(s.events):
        assert led is not None and led.hidden == len(set(ev.replace) | set(ev.drop))
        layers.add(ev.layer)
        for h in led.events:
            assert f"recall (event {h.seq})" in h.read_back
            if h.tool == "fetch":
                assert f'read_result(result_id="{h.result_id}")' in h.read_back
    assert "clearing" in layers
    recaller = Recall()
    recaller.bind(s, ResultFiles_of(s, tmp_path))
    for ident in sorted(gone):
        hits = recaller.search(ident, 1)
        assert hits and ident in hits[0].text, ident
    # through the tool as the model calls it: event ids and result ids named
    out = recaller.recall(sorted(gone)[0]).content
    assert out.startswith("[recall: 1 passage") or out.startswith("[recall: ")
    assert "--- event " in out and "read_result(result_id=" in out


def ResultFiles_of(s: Session, tmp_path: Path):
    from ctxwright.compaction.offload import ResultFiles

    return ResultFiles(tmp_path / s.id)


def test_a_resumed_session_reads_its_ledgers_and_renders_byte_identically(store, tmp_path):
    s, _ = _run(store, tmp_path, pages=8)
    again = Session.resume(Store(store.path), s.id)
    assert [m.canonical() for m in again.messages()] == [m.canonical() for m in s.messages()]
    assert [led for _, led in ledgers(again.events)] == [led for _, led in ledgers(s.events)]


def test_an_old_compaction_event_without_a_ledger_loads_and_writes_back_unchanged():
    old = {"seq": 5, "kind": "compaction", "created_at": 1.0, "layer": "clearing", "replace": {"2": "[x]"}, "drop": []}
    ev = event_from_dict(old)
    assert isinstance(ev, CompactionEvent) and ev.ledger is None
    assert ev.to_dict() == old and ledger_mod.read(ev) is None
    assert json.dumps(ev.to_dict(), sort_keys=True) == json.dumps(old, sort_keys=True)


def test_a_malformed_stored_ledger_is_refused_or_skipped_never_a_crash():
    import pytest

    from ctxwright.errors import EventFormatError

    base = {"seq": 1, "kind": "compaction", "created_at": 1.0, "layer": "trim", "drop": [0]}
    with pytest.raises(EventFormatError):
        event_from_dict({**base, "ledger": [1, 2]})
    ev = event_from_dict({**base, "ledger": {"events": [{"seq": "x"}, {"seq": 0, "items": [{"kind": 1}, "junk"]}]}})
    assert isinstance(ev, CompactionEvent)
    led = ledger_mod.read(ev)
    assert led is not None and [h.seq for h in led.events] == [0] and led.events[0].items == ()


def test_the_ledger_is_bounded_and_says_what_it_left_out():
    text = " ".join(f"T{i:04d}-1234 host{i}.example/p{i}.py" for i in range(2000))
    from ctxwright.core.events import UserEvent

    events = [UserEvent(seq=i, message=Message(role="user", content=text)) for i in range(60)]
    led = ledger_mod.build(events, range(60), seen="")
    assert len(led["events"]) == ledger_mod.MAX_EVENTS and led["events_omitted"] == 60 - ledger_mod.MAX_EVENTS
    assert sum(len(e["items"]) for e in led["events"]) <= ledger_mod.MAX_ITEMS
    assert all(len(e["items"]) <= ledger_mod.MAX_ITEMS_PER_EVENT for e in led["events"])
    assert led["events"][0]["items_omitted"] > 0
    assert len(json.dumps(led)) < 60_000


def test_numbers_inside_identifiers_are_not_listed_twice():
    kinds = dict((v, k) for k, v in items_of("ticket PROJ-4821 took 1234 ms at 3.25 load, see /srv/app/main.py"))
    assert kinds == {"PROJ-4821": "ticket", "1234": "number", "3.25": "number", "/srv/app/main.py": "path"}


def test_recall_of_an_untrusted_result_is_marked_external(store, tmp_path):
    s, _ = _run(store, tmp_path, pages=10, untrusted=True)
    recaller = Recall()
    recaller.bind(s, ResultFiles_of(s, tmp_path))
    gone = sorted(_lost(s))
    assert gone
    assert recaller.recall(gone[0]).external
    assert not recaller.recall("nothing-like-this-zzz").external


def test_recall_refuses_empty_and_oversized_queries(store, tmp_path):
    import pytest

    s, _ = _run(store, tmp_path, pages=8)
    recaller = Recall()
    recaller.bind(s, ResultFiles_of(s, tmp_path))
    for bad in ("", "   ", "x" * 5000):
        with pytest.raises(ValueError):
            recaller.search(bad)
    assert recaller.search("PROJ-4800", limit=10_000)  # the limit is clamped, not refused


def test_the_notice_before_a_deep_compaction_reaches_on_event_before_the_event_is_recorded(store, tmp_path):
    s, seen = _run(store, tmp_path)
    ahead = [e for e in seen if isinstance(e, CompactionAhead)]
    deep = [ev for ev in s.events if isinstance(ev, CompactionEvent) and len(ev.replace) + len(ev.drop) >= 8]
    assert len(ahead) == len(deep)
    for e in ahead:
        assert e.events >= 8 and e.hidden_tokens > 0 and e.reprefill_tokens >= 0 and e.tokens_before > 0
        # sent before: the compaction it announced comes after the call index it names
        assert any(ev.call_index == e.call_index for ev in deep)
    from ctxwright.cli.progress import ahead_line

    if ahead:
        line = ahead_line(ahead[0])
        assert "\n" not in line and "cache cost" in line


def test_show_compactions_lists_the_ledger_as_text_and_json(tmp_path):
    db = tmp_path / "s.db"
    store = Store(db)
    s, _ = _run(store, tmp_path / "results", pages=12)
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    import os

    env = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-m", "ctxwright", "--db", str(db), "show", s.id, "--compactions", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    lost = {i["value"] for c in data["compactions"] for e in c["events"] for i in e["lost"]}
    assert lost == _lost(s)
    text = subprocess.run(
        [sys.executable, "-m", "ctxwright", "--db", str(db), "show", s.id, "--compactions"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert text.returncode == 0, text.stderr
    assert "lost from view" in text.stdout and sorted(lost)[0] in text.stdout


def test_recall_finds_a_fact_past_the_excerpt_of_a_result_offloaded_as_it_was_recorded(store, tmp_path):
    """A result over the budget is recorded as an excerpt with its full text on disk; no
    compaction ever hides it, but a fact past the excerpt is out of view all the same (here:
    at the end of a long line, past what the excerpt shows of a line that holds a fact)."""
    reg = ToolRegistry()
    recaller = Recall()

    @tool
    def dump() -> str:
        """Dump the log."""
        fact = "see 1.5 " + FILLER + " the failing build is BUILD-7731 on host db-west-4"
        return "\n".join([FILLER] * 60 + [fact] + [FILLER] * 5)

    reg.register(dump)
    reg.register(ResultReader().tool())
    reg.register(recaller.tool())
    # compress off: folded, the filler lines would leave the fact in view
    cfg = CompactionConfig(results_dir=tmp_path, window_tokens=8192, result_cap_tokens=300, compress=False)
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    agent = Agent(
        s,
        ScriptedBackend([A(call("dump", {}, "d1")), "done"]),
        reg,
        AgentConfig(compaction=cfg, max_iterations=5),
        counter=TokenCounter(estimate_tokens, "estimate"),
    )
    agent.run("why did the build fail?")
    assert not [ev for ev in s.events if isinstance(ev, CompactionEvent)]
    assert "BUILD-7731" not in visible_text(s.messages())  # past the excerpt
    got = recaller.recall("BUILD-7731").content
    assert "the failing build is BUILD-7731" in got and 'read_result(result_id="d1")' in got
