"""One verdict per call, live and offline: the cause the live audit gave a call (``Step.report``),
the one ``ctxwright show ID --json`` prints, the report's (``report/data.py``), the one the
resumed session's rebuilt audit gives (``audit/live.py: past_requests``) and the one
``ctxwright audit`` gives of ``ctxwright export ID --requests`` are the same, request options
included -- over many recorded sessions: scripted ones with random ``tool_choice`` and sampling
changes, compactions, replaced status bars and interrupted-then-continued runs (hypothesis), the
embedded model, and a ``Context`` loop against llama-cpp-python's own server.

Why a property test: the live audit built its request from the ``ChatRequest`` without the
options while the offline audit read them from the body, so a ``tool_choice`` ``"auto"`` →
``"none"`` (which llama.cpp's function-calling formats render as a shorter prompt) was an
``append`` live and ``options_changed`` offline; no single scripted session finds every such
split, many random ones do.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxwright.agent.context import Context
from ctxwright.audit.compare import Auditor
from ctxwright.audit.live import past_requests
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.compaction import CompactionConfig
from ctxwright.core.messages import Message, canonical_json
from ctxwright.core.session import Session
from ctxwright.core.tokens import Ledger, TokenCounter
from ctxwright.report.data import from_store
from ctxwright.store.sessions import Store


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def echo(text: str) -> str:
    """Repeat the text back (long results fill the window, so compaction runs)."""
    return text


TOOLS = [add, echo]
CHOICES = ("auto", "required", "none", "add")


Verdict = tuple[str, tuple[str, ...]]  # (cause, the options named as changed)


def verdicts(db: Path, sid: str, capsys: pytest.CaptureFixture[str], tmp: Path) -> dict[str, list[Verdict]]:
    """Each call's cause and changed options as every reader gives them, in call order (failed
    calls left out: no reader audits a request that got no reply)."""
    store = Store(db)
    try:
        calls = [c for c in store.calls(sid) if c.error is None]
        session = Session.resume(store, sid)
        rebuilt = Auditor(TokenCounter())
        past = [(row.cause, row.options_changed) for row in map(rebuilt.add, past_requests(session))]
        report = [(c.cause, tuple(c.options_changed)) for c in from_store(store, sid).sessions[0].calls]
    finally:
        store.close()
    capsys.readouterr()
    assert main(["--db", str(db), "show", sid, "--json"]) == 0
    shown = [
        (c["audit"]["cause"], tuple(c["audit"]["options_changed"]))
        for c in json.loads(capsys.readouterr().out)["calls"]
        if c.get("error") is None
    ]
    assert main(["--db", str(db), "export", sid, "--requests"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    records = [r for r in records if r["ctxwright"].get("error") is None]
    path = tmp / f"{sid}.jsonl"
    path.write_text("".join(canonical_json(r) + "\n" for r in records))
    assert main(["audit", str(path), "--json"]) == 0
    offline = [(r["cause"], tuple(r["options_changed"])) for r in json.loads(capsys.readouterr().out)["requests"]]
    assert main(["--db", str(db), "export", sid]) == 0  # the session file: events and call records
    (tmp / f"{sid}.json").write_text(capsys.readouterr().out)
    assert main(["audit", str(tmp / f"{sid}.json"), "--json"]) == 0
    session_file = [(r["cause"], tuple(r["options_changed"])) for r in json.loads(capsys.readouterr().out)["requests"]]
    stored = [(c.audit.cause or "", tuple(c.audit.options_changed)) for c in calls]
    return {
        "stored": stored,
        "show": shown,
        "report": report,
        "rebuilt": past,
        "offline": offline,
        "session file": session_file,
        "wire": wire(records),
    }


def wire(records: list[dict[str, Any]]) -> list[Verdict]:
    """What the bodies themselves say, read without the audit: the fields besides the messages
    and tools that differ from the previous body's (the cause is not known from here: ``?``)."""
    out: list[Verdict] = []
    prev: dict[str, Any] | None = None
    for r in records:
        body = {k: v for k, v in r["request"].items() if k not in ("messages", "tools")}
        changed = () if prev is None else tuple(sorted(k for k in set(prev) | set(body) if prev.get(k) != body.get(k)))
        out.append(("?", changed))
        prev = body
    return out


def assert_one_verdict(live: list[str], found: dict[str, list[Verdict]]) -> None:
    """Every reader gives the live cause, and names the options the bodies show changed."""
    options = [o for _, o in found["wire"]]
    for name, got in found.items():
        causes = [c for c, _ in got]
        if name != "wire":
            assert causes == live, f"{name} disagrees with the live audit:\n live    {live}\n {name:7} {causes}"
        assert [o for _, o in got] == options, f"{name} names other options than the bodies show:\n{got}\n{options}"


def ledger_adds_up(db: Path, sid: str) -> None:
    """Every stored ledger's parts add up to ctxwright's count (``total``), and with the chat
    template and tokenizer difference, a part of its own, to the prompt the backend counted;
    ``show`` and the report show that part, and their parts add up the same way."""
    store = Store(db)
    try:
        calls = [c for c in store.calls(sid) if c.error is None and c.ledger]
        for c in calls:
            assert sum(int(c.ledger.get(k) or 0) for k in Ledger.PARTS) == c.ledger["total"]
            if c.prompt_tokens is not None:
                assert sum(int(c.ledger.get(k) or 0) for k in Ledger.SHOWN) == c.prompt_tokens, c.ledger
            else:
                assert c.ledger["template_difference"] is None
        report = from_store(store, sid).sessions[0].calls
        for c, r in zip(calls, report, strict=True):
            if c.prompt_tokens is not None:
                assert sum(r.parts.values()) == c.prompt_tokens
                assert r.parts["template_difference"] == c.ledger["template_difference"]
    finally:
        store.close()


# -- scripted sessions -------------------------------------------------------------------------

#: one model call: the tool_choice asked for, a sampling change, and the reply
calls_st = st.tuples(
    st.sampled_from(CHOICES),
    st.sampled_from((None, 0.0, 0.7)),  # temperature: None keeps the config's
    st.sampled_from((None, 64, 200)),  # max_tokens: None keeps the config's
    st.sampled_from(("text", "add", "echo")),
)
#: one user turn: its calls, and whether the run is interrupted after it (and how)
turn_st = st.tuples(
    st.lists(calls_st, min_size=1, max_size=3),
    st.sampled_from(("none", "none", "before_reply", "before_tools", "closed")),
)
session_st = st.tuples(
    st.lists(turn_st, min_size=1, max_size=4),
    st.sampled_from(("off", "append", "replace")),  # the status bar
    st.booleans(),  # a small window: compactions
)


def _reply(kind: str, i: int) -> Message:
    if kind == "add":
        return Message(role="assistant", tool_calls=(call("add", {"a": i, "b": 1}, f"c{i}"),))
    if kind == "echo":
        return Message(role="assistant", tool_calls=(call("echo", {"text": f"line {i} " * 60}, f"c{i}"),))
    return Message(role="assistant", content=f"answer {i}")


def _open(db: Path, tmp: Path, sid: str | None, status: str, small: bool) -> Context:
    opts: dict[str, Any] = {"db": db, "backend": ScriptedBackend(["unused"])}
    opts.update(status=status != "off", status_mode=status if status != "off" else None)
    if small:
        opts["compaction"] = CompactionConfig(
            results_dir=tmp / "results", window_tokens=2000, reserve_output_tokens=100, keep_recent_results=1
        )
    if sid is None:
        return Context(system="You add numbers and echo text.", tools=TOOLS, **opts)
    return Context.resume(sid, tools=TOOLS, **opts)


def run_scripted(db: Path, tmp: Path, spec: Any) -> tuple[str, list[str]]:
    """Drive a Context by hand through ``spec`` (each call's options chosen by the test), closing
    and resuming it where a turn is interrupted. Returns the session id and the live causes."""
    turns, status, small = spec
    live: list[str] = []
    ctx = _open(db, tmp, None, status, small)
    sid = ctx.session_id
    n = 0
    try:
        for t, (calls, stop) in enumerate(turns):
            ctx.add_user(f"question {t}")
            for j, (choice, temperature, max_tokens, kind) in enumerate(calls):
                if temperature is not None:
                    ctx.config.temperature = temperature
                if max_tokens is not None:
                    ctx.config.max_tokens = max_tokens
                request = ctx.prepare(choice)
                if stop == "before_reply" and j == len(calls) - 1:
                    break  # Ctrl-C while the model was answering: the request got no reply
                n += 1
                completion = ScriptedBackend([_reply(kind, n)]).complete(request)
                step = ctx.record(completion)
                assert step.report.cause is not None
                live.append(step.report.cause)
                if step.tool_calls and not (stop == "before_tools" and j == len(calls) - 1):
                    ctx.run_tools(step)
            if stop != "none":  # the process ends here; the user continues the session
                ctx.close()
                ctx = _open(db, tmp, sid, status, small)
    finally:
        ctx.close()
    return sid, live


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=session_st)
def test_scripted_sessions_get_one_verdict_live_and_offline(spec: Any, tmp_path_factory, capsys) -> None:
    tmp = tmp_path_factory.mktemp("s")
    db = tmp / "a.db"
    sid, live = run_scripted(db, tmp, spec)
    for cause in sorted(set(live)):  # what the examples cover (--hypothesis-show-statistics)
        event(cause)
    assert_one_verdict(live, verdicts(db, sid, capsys, tmp))
    ledger_adds_up(db, sid)


def test_a_tool_choice_change_is_one_verdict_across_an_interrupted_session(tmp_path, capsys) -> None:
    """The fixed case the property test found first: ``auto`` → ``none`` (a tool budget) is
    ``options_changed`` everywhere, and so is ``required`` → ``auto`` over an interrupted and
    continued session -- and a compaction and a replaced status keep their names."""
    spec = (
        [
            ([("required", None, None, "add"), ("auto", None, None, "add"), ("none", None, None, "text")], "closed"),
            ([("required", None, None, "echo"), ("auto", 0.7, None, "echo")], "before_tools"),
            ([("auto", None, None, "echo"), ("auto", None, 200, "text")], "before_reply"),
            ([("add", None, None, "add"), ("auto", None, None, "text")], "none"),
        ],
        "append",
        True,
    )
    sid, live = run_scripted(tmp_path / "a.db", tmp_path, spec)
    assert live.count("options_changed") >= 3 and "compaction" in live, live
    assert_one_verdict(live, verdicts(tmp_path / "a.db", sid, capsys, tmp_path))
    ledger_adds_up(tmp_path / "a.db", sid)


# -- the CLI: ctxwright run, interrupted and continued ------------------------------------------


def test_run_and_continue_give_one_verdict(tmp_path, capsys) -> None:
    """``ctxwright run`` with a forced first tool call and a tool budget, then ``--continue``:
    required → none → required, each ``options_changed`` live, in show, the report and the audit
    of the export."""
    from fakeserver import FakeOpenAIServer as F

    db = tmp_path / "c.db"
    tool_round = F.reply_tool_calls([("c1", "now", "{}")])
    with F([tool_round, F.reply_text("42"), tool_round, F.reply_text("43")]) as srv:
        base = ["--db", str(db), "run", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        first = ("--tool-choice-first", "required", "--max-tool-rounds", "1", "--status-mode", "append")
        assert main([*base, *first, "what time is it?"]) == 0
        assert main([*base, *first, "--continue", "and now?"]) == 0
    store = Store(db)
    sid = store.list_sessions()[0]["id"]
    live = [c.audit.cause or "" for c in store.calls(sid)]
    store.close()
    assert_one_verdict(live, verdicts(db, sid, capsys, tmp_path))
    assert live == ["first", "options_changed", "options_changed", "options_changed"], live


@pytest.mark.slow
def test_ctrl_c_then_continue_gives_one_verdict(tmp_path, capsys) -> None:
    """``ctxwright run`` stopped by Ctrl-C (SIGINT to its process group) while the server is
    answering its second call -- the tool budget's ``"none"`` -- then ``ctxwright run
    --continue``: every reader gives every answered call the live cause."""
    from fakeserver import FakeOpenAIServer as F

    db = tmp_path / "c.db"
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src, "NO_PROXY": "127.0.0.1,localhost"}
    tool_round = F.reply_tool_calls([("c1", "now", "{}")])
    with F([tool_round, F.reply_text("never seen", delay_s=30), tool_round, F.reply_text("43")]) as srv:
        args = ["--db", str(db), "run", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        args += ["--status-mode", "append", "--max-tool-rounds", "1"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwright.cli.main", *args, "--tool-choice-first", "required", "what time?"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while len(srv.requests) < 2:  # the second call is being answered (slowly)
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode != 0
        assert main([*args, "--continue", "and now?"]) == 0
    store = Store(db)
    sid = store.list_sessions()[0]["id"]
    live = [c.audit.cause or "" for c in store.calls(sid) if c.error is None]
    store.close()
    assert len(live) >= 3 and "options_changed" in live, live
    assert_one_verdict(live, verdicts(db, sid, capsys, tmp_path))
    ledger_adds_up(db, sid)


# -- the embedded model and llama-cpp-python's server ------------------------------------------


@pytest.mark.slow
def test_embedded_sessions_get_one_verdict(tmp_path, capsys) -> None:
    """The embedded model (its own tokenizer counts the prompt): tool budget and a resume."""
    from ctxwright.harness import Harness

    db = tmp_path / "e.db"
    with Harness(
        "You add numbers. Use the add tool.", [add], backend="embedded", db=db, max_tool_rounds=1, max_tokens=48
    ) as h:
        h.run("What is 2 + 3?")
        sid = h.session_id
    with Harness(
        "You add numbers. Use the add tool.", [add], backend="embedded", db=db, resume=sid, max_tool_rounds=1
    ) as h:
        h.run("And 4 + 4?")
    store = Store(db)
    live = [c.audit.cause or "" for c in store.calls(sid) if c.error is None]
    store.close()
    assert_one_verdict(live, verdicts(db, sid, capsys, tmp_path))
    ledger_adds_up(db, sid)


@pytest.mark.slow
def test_context_loop_against_llama_cpp_server_gets_one_verdict(tmp_path, capsys) -> None:
    """The loop of the README against llama-cpp-python's server, a tool budget of one round
    (tool_choice ``auto`` → ``none``: the server renders the tools only when it is not
    ``"none"``), then the session interrupted and continued with ``Context.resume``."""
    from openai import OpenAI

    from llamaserver import LlamaServer

    db = tmp_path / "a.db"
    live: list[str] = []

    def drive(ctx: Context, client: OpenAI, question: str) -> None:
        ctx.add_user(question)
        for _ in range(4):
            reply = client.chat.completions.create(model="smollm2", **ctx.request())
            step = ctx.record(reply)
            live.append(step.report.cause or "")
            if not step.tool_calls:
                return
            ctx.run_tools(step)

    # tool_choice "required" is refused by chatml-function-calling (an assert: HTTP 500)
    opts: dict[str, Any] = {"db": db, "max_tool_rounds": 1, "max_tokens": 200}
    with LlamaServer(tmp_path / "server.log") as srv:
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        with Context(system="You add numbers.", tools=[add], **opts) as ctx:
            drive(ctx, client, "What is 2 + 3? Use the add tool.")
            sid = ctx.session_id
            ctx.add_user("Interrupted before its reply")
            ctx.request()  # Ctrl-C while the server answers: no reply recorded
        with Context.resume(sid, tools=[add], **opts) as ctx2:
            drive(ctx2, client, "And 4 + 4?")
    assert "options_changed" in live, live
    assert_one_verdict(live, verdicts(db, sid, capsys, tmp_path))
    ledger_adds_up(db, sid)


def test_the_exported_lines_carry_the_options_the_live_audit_compared(tmp_path, capsys) -> None:
    """Each exported line's options (``tool_choice``, ``temperature``, ``max_tokens``) are the
    ones the call was sent with: the offline audit compares what the live one compared."""
    spec = ([([("required", None, None, "add"), ("none", 0.7, 64, "text")], "none")], "off", False)
    sid, live = run_scripted(tmp_path / "a.db", tmp_path, spec)
    capsys.readouterr()
    assert main(["--db", str(tmp_path / "a.db"), "export", sid, "--requests"]) == 0
    bodies = [json.loads(line)["request"] for line in capsys.readouterr().out.splitlines()]
    assert bodies[0]["tool_choice"] == "required" and bodies[0]["temperature"] == 0.0
    assert (bodies[1]["tool_choice"], bodies[1]["temperature"], bodies[1]["max_tokens"]) == ("none", 0.7, 64)
    assert live == ["first", "options_changed"]
    assert canonical_json(bodies[0]["tools"]) == canonical_json(bodies[1]["tools"])
