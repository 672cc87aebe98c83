"""What a person at a terminal sees: text that looks like console markup printed as it is,
feedback while a model call or a tool runs, a per-call table that fits 80 columns, a
30 MB answer echoed in part (and stored whole), repeated tool calls pointed out and
stopped, the status bar's last error with timestamps on, and the small CLI options
(``--version``, ``--db``/``--debug`` after the command, ``--result-cap``'s help)."""

from __future__ import annotations

import io
import json
import platform
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.agent.loop import CallReport
from ctxwright.agent.progress import AssistantReply
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main
from ctxwright.cli.progress import RunPrinter, calls_table, status_echo
from ctxwright.cli.show import render_session
from ctxwright.compaction import CompactionConfig
from ctxwright.core.events import AssistantEvent, StatusEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.progress import BackendFailed, RequestSent, StatusShown, Token, ToolDone, ToolStart, UserInput
from ctxwright.core.repeats import repeat_counts
from ctxwright.core.tokens import Ledger
from ctxwright.errors import ConfigError
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

HOSTILE = ["[/INST]", "[/etc/hosts]", "[bold]", "[red]x[/red]", "[/]", "trailing \\"]


def _consoles(width: int = 10_000, terminal: bool = False) -> tuple[Console, Console, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return (
        Console(file=out, width=width, highlight=False, color_system=None),
        Console(file=err, width=width, highlight=False, force_terminal=terminal, color_system=None),
        out,
        err,
    )


def _A(*calls: ToolCall, text: str | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(calls))


# -- item 11: markup-like text is printed literally ------------------------------------------


def _tool_module(tmp_path, monkeypatch) -> None:
    (tmp_path / "hostile_tools.py").write_text(
        "def echo(text: str) -> str:\n"
        '    """Echo the text.\n\n    Args:\n        text: what to echo\n    """\n'
        '    return f"got {text} [/] [bold]"\n\n\n'
        "def fail(text: str) -> str:\n"
        '    """Always fails.\n\n    Args:\n        text: anything\n    """\n'
        '    raise ValueError(f"bad [/oops] {text}")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)


def test_markup_like_text_prints_literally_in_run_show_sessions_and_audit(tmp_path, monkeypatch, capsys):
    """A prompt, tool arguments, tool results, a tool error, an answer and a model name that
    all look like rich markup: ``run`` finishes and prints them as they are, and so do
    ``show``, ``sessions`` and ``audit`` of the session's export afterwards."""
    _tool_module(tmp_path, monkeypatch)
    db = tmp_path / "c.db"
    prompt = "[/INST] what is in [/etc/hosts]? [bold]now"
    answer = "[/INST] done: [red]x[/red] and [/] \\"
    with F(
        [
            F.reply_tool_calls(
                [("c1", "echo", '{"text": "[red]x[/red]"}'), ("c2", "fail", '{"text": "[/b]"}')],
                usage=F.usage_openai(300, 20, cached=0),
            ),
            F.reply_text(answer, usage=F.usage_openai(420, 15, cached=256)),
        ]
    ) as srv:
        rc = main(
            [
                "--db",
                str(db),
                "run",
                "--base-url",
                srv.url,
                "--model",
                "[red]model",
                "--tool",
                "hostile_tools:echo",
                "--tool",
                "hostile_tools:fail",
                "--status-mode",
                "append",
                prompt,
            ]
        )
    out = capsys.readouterr().out
    assert rc == 0, out
    for text in (prompt, answer, "[red]model", '{"text": "[red]x[/red]"}', "got [red]x[/red] [/] [bold]", "[/oops]"):
        assert text in out, text
    sid = Store(db).list_sessions()[0]["id"]

    assert main(["--db", str(db), "show", sid]) == 0
    shown = capsys.readouterr().out
    for text in (prompt, answer, "[red]model", '{"text": "[red]x[/red]"}', "got [red]x[/red] [/] [bold]", "[/oops]"):
        assert text in shown, text

    assert main(["--db", str(db), "sessions"]) == 0
    listed = capsys.readouterr().out
    assert "[red]model" in listed and "[/INST] what is in" in listed

    assert main(["--db", str(db), "show", sid, "--json"]) == 0
    export = tmp_path / "export.json"
    export.write_text(capsys.readouterr().out)
    assert main(["audit", str(export)]) == 0
    assert "prefix-cache audit" in capsys.readouterr().out

    assert main(["--db", str(db), "show", "[/nope]"]) == 2  # an error that quotes markup-like input
    err = capsys.readouterr().err
    assert "[/nope]" in err and len(err.strip().splitlines()) == 1


def test_audit_prints_a_markup_like_field_name_literally(tmp_path, capsys):
    """The first-divergence column names the message field that changed; in a foreign log
    that name can be anything."""
    base = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
        ],
    }
    edited = json.loads(json.dumps(base))  # the same conversation (its first message kept), one field added
    edited["messages"][2]["[/x]"] = "[red]y"
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps(base) + "\n" + json.dumps(edited) + "\n")
    console = Console(file=io.StringIO(), width=300, highlight=False)
    from ctxwright.cli.audit import run_audit

    assert run_audit(log, as_json=False, prices=None, console=console) == 0
    assert "msg#2 [/x] @0" in console.file.getvalue()


_BRACKETS = st.text(alphabet="[]/\\ab #=@:", min_size=1, max_size=40).filter(lambda s: s.strip() == s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_BRACKETS)
def test_any_bracket_text_is_printed_as_it_is(text):
    """Random strings of brackets, slashes and backslashes through every line ``run`` prints
    and through ``show``: each comes out exactly as it went in."""
    con, err_con, out, err = _consoles()
    printer = RunPrinter(con, err_con, live=False)
    tc = ToolCall("id1", "echo", json.dumps({"text": text}))
    printer(UserInput(content=text))
    printer(RequestSent(index=0, messages=2))
    printer(AssistantReply(message=_A(tc), report=_report(0, "cold start")))
    printer(ToolStart(call=tc))
    printer(ToolDone(call=tc, content=text, ok=False, elapsed_ms=1.0))
    printer(StatusShown(content=f"<agent_status>\nlast_error: {text}\n</agent_status>"))
    printer(RequestSent(index=1, messages=4))
    printer(AssistantReply(message=_A(text=text), report=_report(1, "append")))
    printer(BackendFailed(error=text))
    printer.close()
    printed = out.getvalue()
    assert printed.count(text) >= 4 and json.dumps({"text": text}) in printed
    assert text in err.getvalue()

    store = Store(":memory:")
    try:
        with Harness(
            "sys",
            [_echo_tool()],
            backend=ScriptedBackend([_A(tc), text]),
            db=store,
            compaction=False,
            status=False,
        ) as h:
            h.run(text)
            con, _, out, _ = _consoles()
            render_session(store, h.session_id, con)
        shown = out.getvalue()
        assert shown.count(text) >= 3 and json.dumps({"text": text}) in shown
    finally:
        store.close()


def _echo_tool():
    @tool
    def echo(text: str) -> str:
        """Echo the text.

        Args:
            text: what to echo
        """
        return text

    return echo


# -- item 12: the live line, streamed tokens, the 80-column table, the echo cap -----------------


@tool
def slow(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: how long
    """
    time.sleep(seconds)
    return f"slept {seconds}"


def _slow_run(printer: RunPrinter) -> None:
    backend = ScriptedBackend([_A(call("slow", {"seconds": 0.6}, "s1")), "rested"])
    with Harness("sys", [slow], backend=backend, db=None, compaction=False, status=False, on_event=printer) as h:
        printer.session_id = h.session_id
        try:
            assert h.run("rest a while").final_answer == "rested"
        finally:
            printer.close()


def test_a_terminal_gets_a_live_line_with_the_elapsed_time(tmp_path):
    """On a terminal the running step is shown on stderr with its elapsed time, redrawn in
    place and erased when it ends; stdout keeps only the record."""
    con, err_con, out, err = _consoles(width=80, terminal=True)
    printer = RunPrinter(con, err_con)
    assert printer.live
    _slow_run(printer)
    live = err.getvalue()
    assert "tool slow · 0." in live and "model call 0" in live  # the clock moved while the tool slept
    assert "\x1b[" in live  # redrawn in place (cursor movement)
    assert "tool slow ·" not in out.getvalue() and "answer rested" in out.getvalue()


def test_a_log_gets_one_plain_line_per_step_and_no_animation(tmp_path):
    """Not a terminal (CI, ``| tee``): one line per model call and tool, no escape codes,
    no carriage returns."""
    con, err_con, out, err = _consoles(width=80, terminal=False)
    printer = RunPrinter(con, err_con)
    assert not printer.live
    _slow_run(printer)
    log = err.getvalue()
    assert log.splitlines() == ["… model call 0", "… tool slow", "… model call 1"]  # as the table numbers them
    assert "\x1b" not in log + out.getvalue() and "\r" not in log + out.getvalue()


def test_streamed_tokens_are_printed_as_they_come_and_not_again():
    """A backend that streams delivers ``token`` events during its call: they are printed
    at once (here: before the call returns), and the finished answer is not repeated."""
    con, err_con, out, _ = _consoles()
    printer = RunPrinter(con, err_con, live=False)
    seen_during_call: list[str] = []

    def streaming(request):
        for piece in ("Hel", "lo [/b] ", "world\\"):
            printer(Token(text=piece))
        seen_during_call.append(out.getvalue())
        return "Hello [/b] world\\"

    with Harness("sys", [], backend=ScriptedBackend([streaming]), db=None, on_event=printer, status=False) as h:
        h.run("hi")
    printer.close()
    assert "answer Hello [/b] world\\" in seen_during_call[0]
    assert out.getvalue().count("Hello [/b] world\\") == 1


def test_a_backend_without_streaming_still_gets_its_answer_printed():
    con, err_con, out, _ = _consoles()
    printer = RunPrinter(con, err_con, live=False)
    with Harness("sys", [], backend=ScriptedBackend(["plain [/answer]"]), db=None, on_event=printer) as h:
        h.run("hi")
    assert "answer plain [/answer]" in out.getvalue()


def _report(i: int, cause: str) -> CallReport:
    return CallReport(
        i,
        prompt_tokens=128_000,
        cached_tokens=127_488,
        completion_tokens=4_096,
        prefill_ms=98_765.4,
        decode_ms=24_691.2,
        ledger=Ledger(12_345, 98_765, 15_000, 1_890),
        tool_calls=3,
        reusable_tokens=127_900,
        cause=cause,
    )


def _no_line_over(text: str, width: int) -> list[str]:
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    return lines


def test_the_per_call_table_fits_80_columns_without_folding():
    """The widest values a call can have, every cause: each row is one line of at most 80
    characters, each cell whole."""
    causes = ["first", "append", "compaction", "status_replaced", "history_removed", "system_changed"]
    console = Console(width=80, record=True, file=io.StringIO(), highlight=False)
    console.print(calls_table([_report(i + 100, c) for i, c in enumerate(causes)]))
    lines = _no_line_over(console.export_text(), 80)
    for i, cause in enumerate(causes):
        row = next(line for line in lines if f" {i + 100} " in line)
        for cell in ("128,000", "127,488/127,900", cause, "123,457", "4,096"):
            assert cell in row, (cell, row)
    wide = Console(width=200, record=True, file=io.StringIO(), highlight=False)
    wide.print(calls_table([_report(1, "append")], wide=True))
    text = wide.export_text()
    assert "latest user" in text and "98,765 (77%)" in text


def test_shows_calls_table_fits_80_columns(tmp_path):
    store = Store(tmp_path / "s.db")
    with Harness(
        "sys", [_echo_tool()], backend=ScriptedBackend([_A(call("echo", {"text": "x"}, "e1")), "ok"]), db=store
    ) as h:
        h.run("go")
        console = Console(width=80, record=True, file=io.StringIO(), highlight=False)
        render_session(store, h.session_id, console)
    text = console.export_text().splitlines()
    title = next(i for i, line in enumerate(text) if line.strip() == "calls")
    end = next(i for i, line in enumerate(text) if i > title and line.startswith("└"))
    lines = _no_line_over("\n".join(text[title : end + 1]), 80)
    assert any("cached/reusable" in line for line in lines)
    assert sum(1 for line in lines if line.lstrip("│ ").startswith(("0 ", "1 "))) == 2  # one line per call
    store.close()


def test_a_30_mb_answer_is_echoed_in_part_and_stored_whole(tmp_path, capsys):
    """The terminal gets the start and the end of a 30 MB answer and one line saying how
    much it did not show and where it is; the store has every byte, and ``show`` prints it."""
    size = 30 * 1024 * 1024
    answer = "START " + "lorem ipsum [dolor] sit amet\n" * (size // 29) + " THE END"
    db = tmp_path / "big.db"
    con, err_con, out, _ = _consoles(width=80)
    printer = RunPrinter(con, err_con, live=False)
    with Harness("sys", [], backend=ScriptedBackend([answer]), db=db, on_event=printer, status=False) as h:
        printer.session_id = h.session_id
        t0 = time.perf_counter()
        assert h.run("write a lot").final_answer == answer
        echo_s = time.perf_counter() - t0
        sid = h.session_id
    echoed = out.getvalue()
    assert len(echoed) < 200_000, f"{len(echoed):,} characters echoed"
    assert "answer START lorem" in echoed and echoed.rstrip().endswith("THE END")
    assert f"bytes not shown; `ctxwright show {sid}` has it all" in echoed
    assert echo_s < 60  # it took six minutes; benchmarks/terminal.py measures it
    store = Store(db)
    (ev,) = [e for e in store.events(sid) if isinstance(e, AssistantEvent)]
    assert ev.message.content == answer
    store.close()
    capsys.readouterr()
    t0 = time.perf_counter()
    assert main(["--db", str(db), "show", sid]) == 0
    show_s = time.perf_counter() - t0
    assert answer in capsys.readouterr().out  # all of it
    assert show_s < 60


def test_a_30_mb_streamed_answer_is_echoed_in_part():
    size = 30 * 1024 * 1024
    con, err_con, out, _ = _consoles(width=80)
    printer = RunPrinter(con, err_con, live=False)
    printer.session_id = "abc"
    piece = "0123456789 [/x] " * 4096  # 64 KiB per token event
    for _ in range(size // len(piece)):
        printer(Token(text=piece))
    printer(Token(text="THE END"))
    printer(AssistantReply(message=_A(text="(the whole answer)"), report=_report(0, "cold start")))
    echoed = out.getvalue()
    assert len(echoed) < 200_000 and echoed.rstrip().endswith("THE END")
    assert "bytes not shown; `ctxwright show abc` has it all" in echoed and "(the whole answer)" not in echoed


# -- item 17: repeated tool calls -----------------------------------------------------------------


def _counting_lookup():
    runs: list[int] = []

    @tool
    def lookup(q: int) -> str:
        """Look something up.

        Args:
            q: the query
        """
        runs.append(q)
        return f"answer to {q}"

    return lookup, runs


def test_a_tool_called_identically_again_and_again_is_pointed_out_then_stopped(tmp_path):
    """Limit 3: three identical calls run as usual, the fourth runs and its result says so,
    the fifth is not run (answered with a ``repeated_tool_call`` error) and the run ends
    with that stop reason; every event stays, and the session can go on."""
    lookup, runs = _counting_lookup()
    same = [_A(call("lookup", {"q": 7}, f"c{i}")) for i in range(8)]
    db = tmp_path / "r.db"
    with Harness("sys", [lookup], backend=ScriptedBackend(same), db=db, status=True, max_repeats=3) as h:
        r = h.run("go")
        sid = h.session_id
        assert r.stop_reason == "repeated_tool_call" and r.iterations == 5
        assert runs == [7, 7, 7, 7]
        results = [e for e in h.session.events if isinstance(e, ToolEvent)]
        assert len(results) == 5
        assert all("same arguments" not in (e.message.content or "") for e in results[:3])
        assert "lookup was called with these same arguments 4 times in a row (limit 3)" in results[3].message.content
        last = json.loads(results[4].message.content)["error"]
        assert last["type"] == "repeated_tool_call" and not results[4].ok
        statuses = [e.message.content for e in h.session.events if isinstance(e, StatusEvent)]
        assert 'repeated_call: lookup {"q":7} called 4 times in a row (limit 3)' in statuses[-1]
        assert all("repeated_call" not in s for s in statuses[:-1])
    lookup2, _ = _counting_lookup()
    with Harness.resume(sid, [lookup2], db=db, backend=ScriptedBackend(["fine"])) as h2:
        assert h2.run("something else?").final_answer == "fine"  # every call was answered


def test_repeats_count_identical_arguments_in_a_row_since_the_user_message():
    """Spacing and key order do not make two calls differ; other arguments or another tool
    break the row; a new user message starts afresh."""
    lookup, _ = _counting_lookup()
    replies = [
        _A(call("lookup", '{"q": 1}', "a")),
        _A(call("lookup", '{"q":1}', "b"), call("lookup", '{ "q" : 1 }', "c")),
        _A(call("lookup", {"q": 2}, "d")),
        _A(call("lookup", {"q": 2}, "e")),
        "done",
    ]
    with Harness("sys", [lookup], backend=ScriptedBackend(replies), db=None, status=False) as h:
        h.run("go")
        assert [n for _, n in repeat_counts(h.session.events)] == [1, 2, 3, 1, 2]
        h.session.add_user("again")
        assert repeat_counts(h.session.events) == []


def test_max_repeats_zero_means_no_limit_and_a_negative_one_is_refused():
    lookup, runs = _counting_lookup()
    replies = [_A(call("lookup", {"q": 1}, f"c{i}")) for i in range(6)] + ["done"]
    with Harness("sys", [lookup], backend=ScriptedBackend(replies), db=None, max_repeats=0) as h:
        assert h.run("go").stop_reason == "final_answer" and len(runs) == 6
    with pytest.raises(ConfigError, match="max_repeats=-1"):
        Harness("sys", [lookup], backend=ScriptedBackend(["x"]), db=None, max_repeats=-1)


def test_the_cli_takes_max_repeats_and_says_why_it_stopped(tmp_path, capsys):
    same = ("c", "get_weather", '{"city":"Paris"}')
    with F([F.reply_tool_calls([(f"{same[0]}{i}", same[1], same[2])]) for i in range(3)]) as srv:
        rc = main(
            ["--db", str(tmp_path / "c.db"), "run", "--base-url", srv.url, "--model", "m", "--max-repeats", "1", "go"]
        )
    out = capsys.readouterr().out
    assert rc == 0
    assert "repeated [ctxwright: get_weather was called with these same arguments 2 times in a row" in out
    assert "stop reason: repeated_tool_call" in out


def test_a_run_echoes_the_environment_once_short_status_lines_and_each_repeat_warning_once(tmp_path, capsys):
    """The status bar the model reads before every call holds the environment (over 300
    characters with the clock and timings); the terminal shows the environment once and a
    short line per call, and the repeated-call warning once, while the model still gets it all."""
    same = ("c", "get_weather", '{"city":"Paris"}')
    with F([F.reply_tool_calls([(f"{same[0]}{i}", same[1], same[2])]) for i in range(3)]) as srv:
        rc = main(
            ["--db", str(tmp_path / "c.db"), "run", "--base-url", srv.url, "--model", "m", "--max-repeats", "1", "go"]
        )
        sent = [r["messages"][-1]["content"] for r in srv.requests]
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    env = [line for line in lines if line.startswith("environment  ")]
    status = [line for line in lines if line.startswith("status  ")]
    assert len(env) == 1 and f"python: {platform.python_version()}" in env[0] and "shell: " in env[0]
    assert len(status) == 3, status
    for line in status:
        assert len(line) < 120, line
        for key in (
            "cwd:",
            "os:",
            "shell:",
            "python:",
            "time_now:",
            "last_calls:",
            "last_error: none",
            "repeated_call",
        ):
            assert key not in line, (key, line)
    assert "calls.get_weather: 2 calls" in status[2]
    assert out.count("was called with these same arguments 2 times in a row") == 1
    # what the model is sent is unchanged: the whole status, the environment in each
    for content in sent:
        assert content.startswith("<agent_status>") and "\nos: " in content and "\npython: " in content
    assert "\nrepeated_call: get_weather" in sent[2] and "\nlast_error: none" in sent[0]


def test_status_echo_keeps_what_changes_and_an_error():
    text = (
        "<agent_status>\ncalls.f: 1 call\ntime_now: 2026-01-01 00:00:00\nlast_error: f: timeout: [/] hung\n"
        "cwd: /x\nos: Linux 6\nlast_calls: f: 3 ms\niterations_left: 4\n</agent_status>"
    )
    assert status_echo(text) == (
        "cwd: /x · os: Linux 6",
        "calls.f: 1 call · last_error: f: timeout: [/] hung · iterations_left: 4",
    )
    out_console, err_console, out, _ = _consoles()
    printer = RunPrinter(out_console, err_console, live=False)
    for _ in range(3):
        printer(StatusShown(content=text))
    printed = out.getvalue().splitlines()
    assert printed == ["environment  cwd: /x · os: Linux 6"] + ["status  " + status_echo(text)[1]] * 3


# -- item 17: the status bar with timestamps, and the small options ---------------------------------


def test_with_timestamps_the_status_bar_keeps_the_last_errors_type_and_message():
    @tool
    def fail(path: str) -> str:
        """Fail.

        Args:
            path: a path
        """
        raise ValueError(f"disk [/full] at {path}")

    replies = [_A(call("fail", {"path": "/tmp"}, "f1")), "gave up"]
    with Harness("sys", [fail], backend=ScriptedBackend(replies), db=None, status=True, timestamps=True) as h:
        h.run("try")
        tool_ev = next(e for e in h.session.events if isinstance(e, ToolEvent))
        assert tool_ev.message.content.startswith("[20")  # the timestamp is there
        status = [e.message.content for e in h.session.events if isinstance(e, StatusEvent)][-1]
    assert "last_error: fail: ValueError: disk [/full] at /tmp" in status


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    from ctxwright import __version__

    assert capsys.readouterr().out.strip() == f"ctxwright {__version__}"


def test_global_options_work_after_the_command_too(tmp_path, capsys):
    db = tmp_path / "g.db"
    with Harness("sys", [], backend=ScriptedBackend(["hi"]), db=db, status=False) as h:
        h.run("hello")
        sid = h.session_id
    capsys.readouterr()
    assert main(["show", sid, "--db", str(db)]) == 0
    assert f"session {sid}" in capsys.readouterr().out
    assert main(["--db", str(tmp_path / "other.db"), "sessions", "--db", str(db)]) == 0  # the later one wins
    assert sid in capsys.readouterr().out
    assert main(["--db", str(db), "sessions"]) == 0  # before the command, as always
    assert sid in capsys.readouterr().out
    assert main(["show", "nope", "--db", str(db), "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
    assert main(["export", sid, "--db", str(db)]) == 0


def test_result_cap_help_says_what_the_code_does(capsys):
    """The help's numbers are the ones ``CompactionConfig.cap_for`` and the loop use."""
    from ctxwright.agent.loop import AgentConfig

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    c = CompactionConfig()
    effective = 8192 - c.reserve_output_tokens
    for fact in (
        f"default {c.result_cap_tokens:,}",
        f"{c.max_result_share:.0%} of the window less the {c.reserve_output_tokens:,} tokens",
        f"{c.cap_for('any', effective):,} on the embedded model's 8,192-token window",
        f"first {c.preview_head_chars:,} and last {c.preview_tail_chars:,} characters",
        f"No effect with --no-compaction, which cuts every result to {AgentConfig().max_result_chars:,} characters",
    ):
        assert fact in text, fact
