"""The compaction layers without an LLM: invariants, budget and offload, noise, clearing,
trim, compaction events across resume. Property tests drive random trajectories through
every layer and require zero invariant violations."""

from __future__ import annotations

import itertools
import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.batches import units
from ctxwright.compaction.check import violations
from ctxwright.compaction.clearing import clear_old_results
from ctxwright.compaction.cutpoints import legal_boundaries
from ctxwright.compaction.noise import salient_terms, unused_results
from ctxwright.compaction.offload import SLICE, ResultFiles, file_stem
from ctxwright.compaction.pairing import pairing_violations
from ctxwright.compaction.reasoning_loops import reasoning_violations
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.compaction.trim import plan_trim
from ctxwright.core.events import BudgetRecord, CompactionEvent, ToolEvent, UserEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.defence.marking import unwrap
from ctxwright.tools.registry import ToolRegistry, tool


def A(*calls: ToolCall, text: str | None = None, reasoning: str | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(calls), reasoning_content=reasoning)


def T(cid: str, text: str = "ok") -> Message:
    return Message(role="tool", tool_call_id=cid, content=text)


def U(text: str) -> Message:
    return Message(role="user", content=text)


# -- invariant checkers can fail ------------------------------------------------------------
def test_pairing_finds_orphans_and_unanswered_calls():
    c1, c2 = ToolCall("a", "f", "{}"), ToolCall("b", "f", "{}")
    assert pairing_violations([U("q"), A(c1, c2), T("a"), T("b"), A(text="done")]) == []
    assert "answers no open tool call" in pairing_violations([U("q"), T("a")])[0]
    assert "unanswered" in pairing_violations([U("q"), A(c1, c2), T("a"), A(text="x")])[0]
    assert "unanswered at the end" in pairing_violations([U("q"), A(c1)])[0]


def test_units_keep_a_parallel_batch_together():
    c1, c2 = ToolCall("a", "f", "{}"), ToolCall("b", "f", "{}")
    msgs = [U("q"), A(c1, c2), T("a"), T("b"), A(text="done")]
    assert units(msgs) == [(0, 1), (1, 4), (4, 5)]
    assert legal_boundaries(msgs) == [1, 4, 5]


def test_reasoning_loop_is_one_unit_and_partial_reasoning_is_a_violation():
    c1, c2 = ToolCall("a", "f", "{}"), ToolCall("b", "f", "{}")
    msgs = [
        U("q1"),
        A(text="x"),
        U("q2"),
        A(c1, reasoning="think"),
        T("a"),
        A(c2, reasoning="more"),
        T("b"),
        A(text="done"),
    ]
    b = legal_boundaries(msgs)
    assert 2 in b and not any(3 <= i <= 7 for i in b)  # nothing inside the reasoning loop
    broken = [U("q2"), A(c1, reasoning="think"), T("a"), A(c2), T("b"), A(text="done")]
    assert reasoning_violations(broken)


def test_pinned_first_user_message():
    rec = [U("the task"), A(text="x")]
    assert violations(rec, rec) == []
    assert violations(rec, [U("something else"), A(text="x")]) == [
        "the first user message is missing or changed in the view"
    ]


# -- random trajectories through every layer ---------------------------------------------------
@st.composite
def trajectories(draw):
    msgs: list[Message] = []
    n_loops = draw(st.integers(1, 5))
    k = 0
    for _ in range(n_loops):
        msgs.append(U(draw(st.sampled_from(["task", "follow up", "more please"]))))
        reasoning = draw(st.booleans())
        for _ in range(draw(st.integers(0, 4))):
            width = draw(st.integers(1, 3))
            calls = [ToolCall(f"c{k + i}", draw(st.sampled_from(["search", "fetch"])), "{}") for i in range(width)]
            k += width
            msgs.append(A(*calls, reasoning="r" if reasoning else None))
            for c in calls:
                size = draw(st.integers(0, 400))
                msgs.append(T(c.id, f"Result {c.id} ID-{k}X " + "word " * size))
        msgs.append(A(text="answer"))
    return msgs


def _session(msgs: list[Message]) -> Session:
    s = Session.start(Prefix.build("sys"))
    for m in msgs:
        if m.role == "tool":
            s.add_tool_result(m.tool_call_id, m.content, tool_name="search", budget=BudgetRecord(m.tool_call_id))
        elif m.role == "user":
            s.add_user(m.content)
        else:
            s.add_assistant(m)
    return s


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=trajectories(), keep=st.integers(0, 5), excess=st.integers(1, 5000), after=st.integers(0, 3))
def test_every_layer_keeps_every_invariant(msgs, keep, excess, after):
    s = _session(msgs)
    meta = {ev.seq: ev for ev in s.events if isinstance(ev, ToolEvent)}
    s.add_compaction("noise", replace=unused_results(s.base_entries(), meta, after, set()))
    assert violations(msgs, s.trajectory()) == []
    s.add_compaction("clearing", replace=clear_old_results(s.base_entries(), meta, keep, 1, estimate_tokens, set()))
    assert violations(msgs, s.trajectory()) == []
    users = {ev.seq for ev in s.events if isinstance(ev, UserEvent)}
    drop, first = plan_trim(s.base_entries(), lambda m: estimate_tokens(m.content or "") + 4, excess, users)
    if drop:
        s.add_compaction("trim", drop=drop, note=(first, "[removed]"))
    view = s.trajectory()
    assert violations(msgs, view) == []
    assert view[-1] == msgs[-1]  # the newest unit always stays


# -- layer 1: budget and offload ----------------------------------------------------------------
def _manager(tmp_path, window=8192, **cfg) -> ContextManager:
    return ContextManager(
        CompactionConfig(results_dir=tmp_path, **cfg), TokenCounter(estimate_tokens, "estimate"), window
    )


def test_small_result_is_kept_and_big_one_offloaded_with_a_frozen_preview(tmp_path):
    m = _manager(tmp_path, compress=False)  # the preview is under test, not the log folding
    s = Session.start(Prefix.build("sys"))
    m.bind(s)
    body, info = m.process_result("search", "c1", "short answer", True)
    assert body == "short answer" and info.offload is None
    big = "".join(f"line {i:06d}\n" for i in range(20_000))  # 240,000 chars
    body, info = m.process_result("search", "c2", big, True)
    assert info.offload is not None and info.offload.chars == len(big) and len(body) < 3000
    assert 'read_result(result_id="c2"' in body and body.count("line 000000") == 1 and "line 019999" in body
    assert estimate_tokens(body) <= m.config.cap_for("search", m.effective_window)


def test_read_result_pages_back_exact_text(tmp_path):
    files = ResultFiles(tmp_path / "s")
    text = "αβγ" * 700_000 + "end"  # multi-byte, more than one 1M-char slice
    files.save("r1", text)
    for off, lim in [(0, 10), (1_048_570, 20), (len(text) - 5, 100), (2_100_000, 3)]:
        page, total = files.read("r1", off, lim)
        assert page == text[off : off + lim] and total == len(text)


def test_offload_survives_resume_with_identical_bytes(store, tmp_path):
    reg = ToolRegistry()

    @tool
    def dump(n: int) -> str:
        """Dump n lines.

        Args:
            n: lines
        """
        return "".join(f"row {i} of the dump\n" for i in range(n))

    reg.register(dump)
    reader = ResultReader()
    reg.register(reader.tool())
    # compress off: the preview is under test (a dump of near-identical rows would be folded)
    cfg = AgentConfig(compaction=CompactionConfig(results_dir=tmp_path, window_tokens=4096, compress=False))
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    backend = ScriptedBackend(
        [
            A(call("dump", {"n": 5000}, "d1")),
            A(call("read_result", {"result_id": "d1", "offset": 0, "limit": 60}, "r1")),
            "done",
        ]
    )
    Agent(s, backend, reg, cfg).run("dump it")
    tool_events = [ev for ev in s.events if isinstance(ev, ToolEvent)]
    offload = tool_events[0].offload
    assert offload is not None and offload.chars == sum(len(f"row {i} of the dump\n") for i in range(5000))
    assert "[ctxwright: the dump result is" in (tool_events[0].message.content or "")
    page = tool_events[1].message.content or ""
    assert tool_events[1].external  # read_result's pages may be an untrusted result's text
    page = unwrap(page)[2]
    assert page.startswith("[result d1: characters 0-60 of ") and "row 0 of the dump\nrow 1 of the dump" in page
    before = [m.canonical() for m in s.messages()]
    resumed = Session.resume(store, s.id)
    assert [m.canonical() for m in resumed.messages()] == before


def test_fifty_megabyte_output_is_held_once(tmp_path):
    reg = ToolRegistry()
    size = 50 * 1024 * 1024

    @tool
    def huge() -> str:
        """Return 50 MB."""
        return "".join(["x" * 1023 + "\n"] * (size // 1024))  # built once, 50 MiB

    reg.register(huge)
    s = Session.start(Prefix.build("sys", reg.specs()))
    a = Agent(
        s,
        ScriptedBackend([A(call("huge", {}, "h1")), "done"]),
        reg,
        AgentConfig(compaction=CompactionConfig(results_dir=tmp_path), tool_timeout_s=120),
    )
    tracemalloc.start()
    try:
        r = a.run("go")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.stop_reason == "final_answer"
    assert peak < size * 1.3, f"peak {peak / 2**20:.1f} MiB for a 50 MiB output"
    assert (tmp_path / s.id / f"{file_stem('h1')}.txt").stat().st_size == size
    assert a.context.reader.read("h1", size - 5, 10).endswith("xxxx\n")
    ev = next(e for e in s.events if isinstance(e, ToolEvent))
    assert len(ev.message.content or "") < 4000


@pytest.mark.parametrize("kind", ["text", pytest.param("binary", marks=pytest.mark.slow)])
@pytest.mark.parametrize("compaction", [True, False], ids=["compaction", "no-compaction"])
def test_fifty_megabytes_of_bytes_are_held_at_most_twice(tmp_path, kind, compaction):
    """A tool returning 50 MB of ``bytes``: with compaction (offloaded whole) and without
    (cut to the head and tail it shows), the run's peak memory stays within twice the
    output, the bytes included. Binary bytes are the hard case: decoded whole they are a
    100 MB string (two bytes per character once one U+FFFD is in it) next to the 50 MB."""
    import hashlib

    from ctxwright import Harness

    size = 50 * 1024 * 1024

    @tool
    def dump() -> bytes:
        """Return 50 MB."""
        if kind == "text":
            return b"0123456789abcde\n" * (size // 16)
        return hashlib.shake_128(b"50 MB").digest(size)  # random-looking, made in place

    backend = ScriptedBackend([A(call("dump", {}, "d1")), "done"])
    cfg = CompactionConfig(results_dir=tmp_path) if compaction else False
    with Harness("sys", [dump], backend=backend, db=None, compaction=cfg, tool_timeout=300) as h:
        tracemalloc.start()
        try:
            r = h.run("go")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.stop_reason == "final_answer"
        assert peak <= 2 * size, f"peak {peak / 2**20:.1f} MiB for 50 MiB of {kind} bytes"
        ev = next(e for e in h.session.events if isinstance(e, ToolEvent))
        content = ev.message.content or ""
        assert len(content) < 250_000  # the head and the tail
        expected = hashlib.shake_128(b"50 MB").digest(size).decode("utf-8", "replace") if kind == "binary" else None
        if compaction:
            assert ev.offload is not None and ev.offload.path.endswith(f"{file_stem('d1')}.txt")
            reader = h.agent.context.reader
            total = ev.offload.chars
            if expected is not None:
                assert total == len(expected)
                data = hashlib.shake_128(b"50 MB").digest(size)
                assert ev.invalid_utf8 == size - len(data.decode("utf-8", "ignore").encode())
                del data
                for off in (0, SLICE - 3, total // 2, total - 10):  # pages back across slice edges
                    assert reader.read("d1", off, 10).endswith(expected[off : off + 10])
            else:
                assert total == size and reader.read("d1", size - 16, 16).endswith("0123456789abcde\n")
        else:
            assert "characters omitted" in content
            if expected is not None:
                assert content.startswith(expected[:1000]) and content.endswith(expected[-1000:])


def test_bytes_decoded_in_slices_are_the_whole_decode(tmp_path):
    """The slice-by-slice decoding of a large bytes result gives the text, the invalid-byte
    count and the hash a whole decode gives, with multi-byte characters, invalid bytes and
    genuine U+FFFD cut at every slice edge; and its offload file pages back the same."""
    from ctxwright.compaction.budget import ByteScan, text_sha256

    unit = "é€😀\ufffd".encode() + b"\xff\xc3(\xe2\x82 ok\n"
    data = (unit * (3 * SLICE // len(unit) + 7))[: 3 * SLICE + 5]
    whole = data.decode("utf-8", "replace")
    scan = ByteScan(1000, 500)
    files = ResultFiles(tmp_path)
    saved = files.save_pieces("r", scan.watch(data))
    assert scan.chars == saved.chars == len(whole)
    assert scan.head == whole[:1000] and scan.tail == whole[-500:]
    assert scan.replaced == len(data) - len(data.decode("utf-8", "ignore").encode())
    assert scan.sha256 == text_sha256(whole)
    for off in (0, SLICE - 2, SLICE, 2 * SLICE + 1, len(whole) - 3):
        assert files.read("r", off, 7) == (whole[off : off + 7], len(whole))
    assert (tmp_path / f"{file_stem('r')}.txt").read_bytes() == whole.encode()


def test_invalid_utf8_output_is_replaced_and_said(store, tmp_path):
    reg = ToolRegistry()

    @tool
    def binary() -> bytes:
        """Return bytes."""
        return b"header \xff\xfe\x00 body \xc3\x28 end"

    reg.register(binary)
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    r = Agent(
        s,
        ScriptedBackend([A(call("binary", {}, "b1")), "done"]),
        reg,
        AgentConfig(compaction=CompactionConfig(results_dir=tmp_path)),
    ).run("go")
    assert r.stop_reason == "final_answer"
    content = next(e for e in s.events if isinstance(e, ToolEvent)).message.content or ""
    assert "not valid UTF-8" in content and "\ufffd" in content and "body" in content
    s.build_request().canonical_bytes()  # encodable for any provider
    assert Session.resume(store, s.id).messages() == s.messages()


# -- layers 2 and 3 ---------------------------------------------------------------------------
def test_repeated_output_becomes_a_pointer(tmp_path):
    m = _manager(tmp_path)
    s = Session.start(Prefix.build("sys"))
    m.bind(s)
    text = "the same long listing\n" * 20
    first, _ = m.process_result("ls", "c1", text, True)
    second, info = m.process_result("ls", "c2", text, True)
    assert first == text and info.repeat_of == "c1" and 'read_result(result_id="c1")' in second
    other, _ = m.process_result("cat", "c3", text, True)  # another tool: not a repeat
    assert other == text


def test_unused_rule():
    c = [ToolCall(f"c{i}", "search", "{}") for i in range(3)]
    msgs = [
        U("q"),
        A(c[0]),
        T("c0", "Order A-1042 shipped to Berlin"),
        A(c[1]),
        T("c1", "Weather in Oslo: 3C"),
        A(c[2], text="order a-1042 is in Berlin"),
        T("c2", "x"),
        A(text="a"),
        U("next"),
        A(text="b"),
    ]
    s = _session(msgs)
    meta = {ev.seq: ev for ev in s.events if isinstance(ev, ToolEvent)}
    out = unused_results(s.base_entries(), meta, 2, set())
    marked = {meta[k].result_id for k in out}
    assert marked == {"c1"}  # c0 was quoted later, c2 has no salient term and too few later turns
    assert "a-1042" in salient_terms("Order A-1042 shipped") and "shipped" not in salient_terms("Order shipped")


def test_clearing_keeps_newest_and_runs_in_batches(store, tmp_path):
    reg = ToolRegistry()

    @tool
    def fetch(page: int) -> str:
        """Fetch a page.

        Args:
            page: page number
        """
        return f"Page {page}: " + " ".join(f"Fact{page}-{i}" for i in range(150))

    reg.register(fetch)
    reader = ResultReader()
    reg.register(reader.tool())
    replies = [A(call("fetch", {"page": i}, f"p{i}"), text=f"Fact{i}-0") for i in range(14)] + ["done"]
    cfg = CompactionConfig(
        results_dir=tmp_path, window_tokens=4096, keep_recent_results=3, drop_unused=False, policy="eager"
    )
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    agent = Agent(
        s,
        ScriptedBackend(replies),
        reg,
        AgentConfig(compaction=cfg, max_iterations=30),
        counter=TokenCounter(estimate_tokens, "estimate"),
    )
    r = agent.run("read the pages")
    assert r.stop_reason == "final_answer"
    comps = [ev for ev in s.events if isinstance(ev, CompactionEvent)]
    assert comps and all(ev.layer == "clearing" for ev in comps)
    idx = [ev.call_index or 0 for ev in comps]
    assert all(b - a >= cfg.min_calls_between for a, b in itertools.pairwise(idx))  # batches, not every turn
    assert len(comps) < len(replies) // 3
    tools = [m for m in s.trajectory() if m.role == "tool"]
    assert all(not t.content.startswith("[cleared") for t in tools[-1:])
    cleared = [t for t in tools if t.content.startswith("[cleared fetch result")]
    assert cleared and 'read_result(result_id="p0")' in cleared[0].content
    assert "Fact0-149" in reader.read("p0", 0, 8000)  # restorable: nothing lost
    assert max(c.prompt_tokens or 0 for c in r.calls) <= 4096
    audited = [c for c in r.calls if c.cause == "compaction"]
    assert len(audited) == len(comps)  # the audit names each compaction
    assert violations([m for _, m in s.recorded_messages()], s.trajectory()) == []
    assert [m.canonical() for m in Session.resume(store, s.id).messages()] == [m.canonical() for m in s.messages()]


def test_resume_over_window_trims_to_fit(store, tmp_path):
    s = Session.start(Prefix.build("sys"), store=store)
    s.add_user("the task")
    for i in range(30):
        c = ToolCall(f"c{i}", "search", "{}")
        s.add_assistant(A(c))
        s.add_tool_result(
            c.id, f"[ctxwright: placeholder {i}] " + "w " * 200, tool_name="search", budget=BudgetRecord(c.id)
        )
    s.add_assistant(A(text="done"))
    resumed = Session.resume(store, s.id)
    resumed.add_user("and now?")
    m = _manager(tmp_path, window=2048, keep_recent_results=30)
    m.bind(resumed)
    reports = m.before_call(resumed, 100)
    assert [r.layer for r in reports][-1] == "trim"
    view = resumed.trajectory()
    assert m.request_tokens(resumed) <= m.effective_window
    assert view[0].content == "the task" and view[-1].content == "and now?"
    assert "removed here to fit the context window" in view[1].content
    assert violations([mm for _, mm in resumed.recorded_messages()], view) == []
    assert len(store.events(s.id)) == len(resumed.events)  # nothing lost, the compaction is one more event


def test_nothing_fits_is_a_clear_error_and_loses_nothing(store, tmp_path):
    s = Session.start(Prefix.build("sys"), store=store)
    a = Agent(
        s,
        ScriptedBackend(["never"]),
        ToolRegistry(),
        AgentConfig(compaction=CompactionConfig(results_dir=tmp_path, window_tokens=600, reserve_output_tokens=100)),
        counter=TokenCounter(estimate_tokens, "estimate"),
    )
    r = a.run("word " * 3000)
    assert r.stop_reason == "backend_error" and "nothing more can be removed" in r.error
    assert [e.kind for e in store.events(s.id)] == ["user"]


def test_compaction_config_caps_one_result_to_a_share_of_the_window():
    cfg = CompactionConfig()
    assert cfg.cap_for("x", 7680) == 1152 and cfg.cap_for("x", 1_000_000) == 25_000
    cfg.per_tool_cap["x"] = 500
    assert cfg.cap_for("x", 1_000_000) == 500


def test_event_payload_is_json(tmp_path):
    m = _manager(tmp_path)
    s = Session.start(Prefix.build("sys"))
    m.bind(s)
    body, info = m.process_result("t", "c1", "y" * 100_000, True)
    json.dumps(s.add_tool_result("c1", body, tool_name="t", budget=info).to_payload())


def test_clearing_keeps_newest_by_count_and_by_token_share():
    c = [ToolCall(f"c{i}", "fetch", "{}") for i in range(6)]
    msgs = [U("q")]
    for i, cc in enumerate(c):
        msgs += [A(cc), T(cc.id, f"r{i} " + "w " * 400)]  # ~200 tokens each
    s = _session(msgs)
    meta = {ev.seq: ev for ev in s.events if isinstance(ev, ToolEvent)}
    by_count = clear_old_results(s.base_entries(), meta, 4, 10, estimate_tokens, set())
    by_share = clear_old_results(s.base_entries(), meta, 4, 10, estimate_tokens, set(), keep_tokens=450)
    assert len(by_count) == 2 and len(by_share) == 4  # 450 tokens hold the newest two only
    assert all("read_result" in v for v in by_share.values())


def test_offline_audit_of_an_export_rebuilds_the_compacted_requests_that_were_sent(store, tmp_path):
    from ctxwright.audit.logs import requests_from_export
    from ctxwright.store.export import session_export

    reg = ToolRegistry()

    @tool
    def fetch(page: int) -> str:
        """Fetch a page.

        Args:
            page: page number
        """
        return f"Page {page}: " + " ".join(f"Fact{page}-{i}" for i in range(150))

    reg.register(fetch)
    replies = [A(call("fetch", {"page": i}, f"p{i}")) for i in range(14)] + ["done"]
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    backend = ScriptedBackend(replies)
    Agent(
        s,
        backend,
        reg,
        AgentConfig(compaction=CompactionConfig(results_dir=tmp_path, window_tokens=2048, keep_recent_results=2)),
        counter=TokenCounter(estimate_tokens, "estimate"),
    ).run("read the pages")
    assert any(isinstance(ev, CompactionEvent) for ev in s.events)
    rebuilt = [req for req, problem in requests_from_export(session_export(store, s.id)) if req is not None]
    sent = [[m.to_wire() for m in r.messages[1:]] for r in backend.requests]
    assert [list(r.messages) for r in rebuilt] == sent
    compacted_calls = {ev.call_index for ev in s.events if isinstance(ev, CompactionEvent)}
    assert [r.marker for r in rebuilt].count("compaction") == len(compacted_calls)
