"""The per-turn caches (``core/incremental.py`` and its users) give exactly what the full
recomputation gives: over random lists, and over a whole session with compactions, replaced
statuses, reasoning stripped and a skills catalog -- request hashes, ledgers, audit rows,
repeat counts, status readings and rendered messages compared call by call."""

from __future__ import annotations

import hashlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctxwright.audit.compare import Auditor
from ctxwright.audit.live import LiveRequests, audit_record, audit_request, past_requests
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.core.events import Event, UserEvent
from ctxwright.core.incremental import EventFold, PrefixScan, common_prefix_len
from ctxwright.core.messages import Message, Usage
from ctxwright.core.prefix import Prefix
from ctxwright.core.render import render
from ctxwright.core.repeats import RepeatTracker, repeat_counts
from ctxwright.core.request import ChatRequest, RequestHasher, ToolSpec
from ctxwright.core.session import Session
from ctxwright.core.tokens import LedgerBuilder, TokenCounter, build_ledger
from ctxwright.harness import Harness
from ctxwright.status.bar import StatusBar, StatusConfig
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import tool
from ctxwright.tools.workers import Workers


def _reference_prefix(a: list[int], b: list[int]) -> int:
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return i


def test_common_prefix_len_matches_a_plain_scan() -> None:
    rng = random.Random(3)
    for _ in range(3000):
        a = [rng.randint(0, 2) for _ in range(rng.randint(0, 40))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 2) for _ in range(rng.randint(0, 6))]
        assert common_prefix_len(a, b) == _reference_prefix(a, b)
        assert common_prefix_len(b, a) == _reference_prefix(b, a)


def test_prefix_scan_equals_a_fold_from_scratch() -> None:
    rng = random.Random(5)
    scan: PrefixScan[int, int] = PrefixScan(0, lambda acc, x: acc * 3 + x)
    items: list[int] = []
    for _ in range(400):
        if items and rng.random() < 0.2:
            items[rng.randrange(len(items))] = rng.randint(0, 9)  # a change in the middle
        else:
            items.append(rng.randint(0, 9))
        if rng.random() < 0.1:
            items = items[: rng.randint(0, len(items))]
        want = 0
        for x in items:
            want = want * 3 + x
        assert scan.scan(list(items)) == want


def test_event_fold_starts_over_on_another_list() -> None:
    fold = EventFold(list, lambda state, ev: state.append(ev.seq))
    a: list[Event] = [UserEvent(message=Message(role="user", content=str(i)), seq=i) for i in range(3)]
    assert fold.over(a) == [0, 1, 2]
    a.append(UserEvent(message=Message(role="user", content="3"), seq=3))
    assert fold.over(a) == [0, 1, 2, 3]
    b = a[:2]
    assert fold.over(b) == [0, 1]


def test_request_hasher_equals_canonical_bytes() -> None:
    hasher = RequestHasher()
    tools = (ToolSpec.create("f", "d é", {"type": "object", "properties": {"x": {"type": "string"}}}),)
    msgs = [Message(role="system", content="sys ü")]
    rng = random.Random(1)
    for i in range(40):
        msgs.append(Message(role=rng.choice(["user", "assistant"]), content=f"m{i} 中"))
        if i % 7 == 3:
            msgs[2] = Message(role="user", content=f"changed {i}")
        for choice in ("auto", "none", "f"):
            for t in ((), tools):
                req = ChatRequest(messages=tuple(msgs), tools=t, tool_choice=choice, max_tokens=5)
                raw = req.canonical_bytes()
                assert hasher.digest(req) == (hashlib.sha256(raw).hexdigest(), len(raw))
    empty = ChatRequest(messages=())
    assert hasher.digest(empty) == (hashlib.sha256(empty.canonical_bytes()).hexdigest(), len(empty.canonical_bytes()))


def test_workers_reuse_threads_and_a_hung_call_does_not_starve_them() -> None:
    pool = Workers(max_idle=2)
    release = threading.Event()
    hung = pool.submit(release.wait, name="tool-hung")
    done = [pool.submit(lambda: None) for _ in range(5)]
    assert all(d.wait(5) for d in done)
    assert not hung.is_set()
    time.sleep(0.05)
    assert pool.idle <= 2
    before = threading.active_count()
    assert all(pool.submit(lambda: None).wait(5) for _ in range(20))
    assert threading.active_count() <= before  # reused, not started anew
    release.set()
    assert hung.wait(5)


def test_a_call_that_raises_leaves_its_caller_to_its_deadline() -> None:
    pool = Workers()

    def boom() -> None:
        raise RuntimeError("tool bug")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(threading, "excepthook", lambda args: None)
        assert not pool.submit(boom).wait(0.2)
    assert pool.submit(lambda: None).wait(5)


_CTRL_C_ON_THE_WORKER = """
import signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored (nohup ... &)
from ctxwright.tools.workers import Workers
started = threading.Event()
pool = Workers()
done = pool.submit(lambda: (started.set(), time.sleep(30)))
started.wait(10)
worker = next(t for t in threading.enumerate() if t is not threading.main_thread())
t0 = time.monotonic()
try:
    signal.pthread_kill(worker.ident, signal.SIGINT)  # the kernel may hand a Ctrl-C to any thread
    done.wait(20)
    print("not interrupted", round(time.monotonic() - t0, 2))
except KeyboardInterrupt:
    print("interrupted", round(time.monotonic() - t0, 2))
"""


def test_ctrl_c_delivered_to_a_worker_thread_reaches_the_waiting_loop(tmp_path: Path) -> None:
    """Python runs signal handlers in the main thread only; a Ctrl-C given to the thread running
    the tool must still interrupt the loop's wait within one slice, not at the tool's deadline."""
    import subprocess
    import sys

    src = Path(__file__).resolve().parent.parent / "src"
    out = subprocess.run(
        [sys.executable, "-c", _CTRL_C_ON_THE_WORKER],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.startswith("interrupted "), out.stdout + out.stderr
    seconds = out.stdout.split()[1]
    assert float(seconds) < 10  # within a slice (0.25 s), with room for a loaded machine


@tool
def page(n: int, size: int = 200) -> str:
    """One page.

    Args:
        n: page number
        size: characters
    """
    if n % 9 == 0:
        raise ConnectionError("reset")
    return (f"page {n}: " + "lorem ipsum " * 400)[:size]


@tool
def listing() -> str:
    """The listing."""
    return "\n".join(f"item {i}" for i in range(20))


def _plan(request: ChatRequest, state: dict[str, int]) -> Message:
    k = state["k"] = state["k"] + 1
    if k > 45:
        return Message(role="assistant", content="done")
    if k % 6 == 0:
        calls = (call("listing", {}, f"a{k}"),)  # the same call again and again: repeat counts
    elif k == 4:
        calls = (call("Skill", {"name": "notes"}, f"a{k}"),)
    else:
        calls = tuple(
            call("page", {"n": k * 3 + j, "size": 300 + 600 * (k % 4)}, f"a{k}_{j}") for j in range(1 + k % 2)
        )
    return Message(role="assistant", content=f"<think>plan {k}</think>step {k}" if k % 3 else None, tool_calls=calls)


@pytest.mark.parametrize("status_mode", ["replace", "append"])
def test_a_session_is_recorded_as_the_full_computation_would(tmp_path: Path, status_mode: Any) -> None:
    skill = tmp_path / "skills" / "notes"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: notes\ndescription: Use for notes.\n---\nWrite notes.\n")
    state = {"k": 0}
    backend = ScriptedBackend([lambda r: _plan(r, state)])
    with Harness(
        "You read pages.",
        [page, listing],
        backend=backend,
        db=tmp_path / "s.db",
        window=4096,
        compaction=True,
        status=True,
        status_mode=status_mode,
        summaries=False,  # every request the backend sees is then a call of the session
        skills=[tmp_path / "skills"],
        reasoning="strip",
        max_iterations=60,
        max_repeats=10,
    ) as h:
        result = h.run("Read the pages.")
        session, counter = h.session, h.agent.counter
        comps = [c for c in result.calls if c.compactions]
        assert comps, "the window is small enough for compactions"
        stored = session.store.calls(session.id) if session.store is not None else []
        auditor = Auditor(counter)
        for i, (req, rec) in enumerate(zip(backend.requests, stored, strict=True)):
            raw = req.canonical_bytes()
            assert rec.request_sha256 == hashlib.sha256(raw).hexdigest(), (i, len(backend.requests), len(stored))
            assert rec.request_bytes == len(raw)
            want = build_ledger(
                counter,
                session.prefix.canonical(),
                list(req.messages[1:]),
                h.agent.ctx._tools_text,
                session.prefix.tools,
            )
            got = {k: v for k, v in rec.ledger.items() if k != "mismatch"}
            assert got == want.reconciled(rec.prompt_tokens).to_dict(), i
        # the audit, rebuilt from the events by the non-incremental path (what a resume does)
        rebuilt = list(past_requests(session))
        assert [r.messages for r in rebuilt] == [audit_request(q, None).messages for q in backend.requests]
        for i, (req, rec) in enumerate(zip(rebuilt, stored, strict=True)):
            assert audit_record(auditor.add(req)) == dict(rec.audit.raw), i
        # the rendered view equals the pure renderer's, after all of it
        assert session.messages() == render(session.prefix, session.events, session.settings())
        # the repeat counts and the status readings equal a fresh scan
        assert RepeatTracker().tail(session.events, 3) == repeat_counts(session.events)[-3:]
        assert h.agent.ctx._repeat_tracker.tail(session.events, 3) == repeat_counts(session.events)[-3:]
        bar = h.agent.status
        assert bar is not None
        fresh = StatusBar(bar.config, bar.todo, clock=bar.clock, cwd=bar.cwd)
        assert bar.values(session, iteration=3) == fresh.values(session, iteration=3)
        assert bar.decide_mode(session, 40, counter.count) == fresh.decide_mode(session, 40, counter.count)


def test_live_requests_equal_audit_request() -> None:
    live = LiveRequests()
    tools = (ToolSpec.create("f", "d"),)
    msgs = [Message(role="system", content="s"), Message(role="user", content="u")]
    for i in range(20):
        msgs.append(Message(role="assistant", content=None if i % 2 else f"a{i}"))
        if i % 5 == 4:
            del msgs[2]
        req = ChatRequest(messages=tuple(msgs), tools=tools)
        a, b = live.audit_request(req, Usage(prompt_tokens=i)), audit_request(req, Usage(prompt_tokens=i))
        assert (a.system, list(a.tools), list(a.messages), list(a.message_bytes or [])) == (
            b.system,
            list(b.tools),
            list(b.messages),
            list(b.message_bytes or []),
        )


def test_ledger_builder_follows_a_counter_change() -> None:
    msgs = [Message(role="user", content="hello there"), Message(role="tool", content="x" * 50, tool_call_id="1")]
    builder = LedgerBuilder()
    a, b = TokenCounter(), TokenCounter(lambda t: len(t), source="chars")
    assert builder.build(a, "p", msgs) == build_ledger(a, "p", msgs)
    assert builder.build(b, "p", msgs) == build_ledger(b, "p", msgs)


def test_status_readings_recount_when_key_args_change(tmp_path: Path) -> None:
    s = Session.start(Prefix.build("s"), store=Store(tmp_path / "x.db"))
    s.add_user("go")
    s.add_assistant(Message(role="assistant", tool_calls=(call("page", {"n": 1}, "c1"), call("page", {"n": 2}, "c2"))))
    bar = StatusBar(StatusConfig(items=("counters",)))
    assert bar.values(s) == {"calls.page": "2 calls"}
    bar.config.key_args["page"] = "n"
    assert bar.values(s) == {"calls.page": "2 calls", "calls.page[1]": "1 call", "calls.page[2]": "1 call"}
