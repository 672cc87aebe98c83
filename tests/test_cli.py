"""The command line end to end against our loopback OpenAI-compatible server: run, show,
sessions, resume with identical prefix bytes, and the clear errors."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from ctxwright.cli.main import main
from ctxwright.compaction.offload import file_stem
from ctxwright.defence.marking import TAGS_SECTION, unwrap
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F


def _run(db, url, *extra):
    # append-mode status: every request is an exact extension of the previous one
    return main(
        [
            "--db",
            str(db),
            "run",
            "--backend",
            "openai",
            "--base-url",
            url,
            "--model",
            "fake",
            "--status-mode",
            "append",
            *extra,
        ]
    )


def test_run_show_sessions_and_resume(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F(
        [
            F.reply_tool_calls(
                [
                    ("c1", "get_current_time", '{"timezone":"America/Vancouver"}'),
                    ("c2", "get_weather", '{"city":"Vancouver"}'),
                ],
                usage=F.usage_openai(300, 20, cached=0),
            ),
            F.reply_text("It is 10:00 and 12 °C in Vancouver.", usage=F.usage_openai(420, 15, cached=256)),
            F.reply_text("You are welcome.", usage=F.usage_openai(450, 5, cached=384)),
        ]
    ) as srv:
        assert _run(db, srv.url, "What's the time and weather in Vancouver?") == 0
        out = capsys.readouterr().out
        assert "get_weather" in out and "12 °C" in out and "final_answer" in out
        store = Store(db)
        (row,) = store.list_sessions()
        sid = row["id"]
        calls = store.calls(sid)
        assert [c.cached_tokens for c in calls] == [0, 256]
        assert main(["--db", str(db), "show", sid]) == 0
        shown = capsys.readouterr().out
        assert "get_current_time" in shown and "America/Vancouver" in shown and "256" in shown
        assert main(["--db", str(db), "sessions"]) == 0
        assert sid in capsys.readouterr().out

        assert _run(db, srv.url, "--resume", sid, "thanks!") == 0
        first, second, third = srv.requests
        # the resumed request repeats every earlier message unchanged, then appends
        n = len(second["messages"])
        assert third["messages"][:n] == second["messages"]
        assert third["messages"][0] == first["messages"][0]
        # and on the wire, byte for byte, up to the end of what the last call sent
        raw2, raw3 = srv.recorded[1].raw, srv.recorded[2].raw
        end_of_history = raw2.index(b'}],"tools"') + 1  # the closing brace of the last message
        assert raw3[:end_of_history] == raw2[:end_of_history]
        assert third["tools"] == first["tools"]
        assert third["messages"][-2] == {"role": "user", "content": "thanks!"}
        assert third["messages"][-1]["content"].startswith("<agent_status>")


def test_show_json_export_has_tool_calls(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_tool_calls([("c1", "calculator", '{"expression":"6*7"}')]), F.reply_text("42")]) as srv:
        assert _run(db, srv.url, "6*7?") == 0
    capsys.readouterr()
    sid = Store(db).list_sessions()[0]["id"]
    assert main(["--db", str(db), "show", sid, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kinds = [e["kind"] for e in data["events"]]
    assert kinds == ["user", "status", "assistant", "tool", "status", "assistant"]
    assert data["events"][3]["message"]["content"] == "42"
    assert data["events"][4]["message"]["content"].startswith("<agent_status>")


def test_unreachable_base_url_is_one_clear_message_and_keeps_no_empty_session(tmp_path, capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    db = tmp_path / "c.db"
    rc = main(
        [
            "--db",
            str(db),
            "run",
            "--backend",
            "openai",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "m",
            "hello",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("ctxwright:")]
    assert f"127.0.0.1:{port}" in line and "was not kept" in line
    assert Store(db).list_sessions() == []  # it held only the task (tests/test_cli_store_open.py)


def test_unknown_resume_id_is_clear(tmp_path, capsys):
    rc = main(
        [
            "--db",
            str(tmp_path / "c.db"),
            "run",
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--resume",
            "doesnotexist",
            "hi",
        ]
    )
    assert rc == 2
    assert "ctxwright sessions" in capsys.readouterr().err


def test_openai_backend_needs_model(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "c.db"), "run", "--backend", "openai", "hi"]) == 2
    assert "--model" in capsys.readouterr().err


def test_run_offloads_a_big_file_and_pages_it_back(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    # alternating lines: no run for the log compressor to fold, so the preview is what is sent
    (ws / "big.log").write_text("".join(f"event {i:05d} {'ok' if i % 2 else 'retried'}\n" for i in range(20_000)))
    db = tmp_path / "c.db"
    with F(
        [
            F.reply_tool_calls([("r1", "read_file", '{"path":"big.log"}')]),
            F.reply_tool_calls([("p1", "read_result", '{"result_id":"r1","offset":1200,"limit":32}')]),
            F.reply_text("The log has 20,000 events."),
        ]
    ) as srv:
        assert (
            _run(
                db,
                srv.url,
                "--workspace",
                str(ws),
                "--window",
                "8192",
                "--no-delegate",
                "How many events are in big.log?",
            )
            == 0
        )
        out = capsys.readouterr().out
        assert "final_answer" in out
        second, third = srv.requests[1], srv.requests[2]
    preview = next(m for m in second["messages"] if m["role"] == "tool")["content"]
    assert 'saved in full as result_id "r1"' in preview and len(preview) < 3000
    # a file is untrusted: its preview, and the page read back, are marked as external content
    assert preview.startswith('<external_content source="tool:read_file" id="r1">\n[ctxwright: the read_file result')
    assert preview.endswith("\n</external_content>")
    page = next(m for m in third["messages"] if m.get("tool_call_id") == "p1")["content"]
    unwrapped = unwrap(page)
    assert unwrapped is not None and unwrapped[:2] == ("read_result", "p1")
    assert unwrapped[2].startswith("[result r1: characters 1,200-1,232 of ") and "event 00" in page
    assert "read_result" in [t["function"]["name"] for t in srv.requests[0]["tools"]]
    sid = Store(db).list_sessions()[0]["id"]
    assert (db.parent / "ctxwright-results" / sid / f"{file_stem('r1')}.txt").exists()


def test_no_compaction_switch_keeps_results_whole(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text("hi")]) as srv:
        assert _run(db, srv.url, "--no-compaction", "--no-delegate", "hello") == 0
        names = [t["function"]["name"] for t in srv.requests[0]["tools"]]
    assert "read_result" not in names and "delegate" not in names


def test_compaction_strategy_summaries_go_to_their_own_requests(tmp_path, capsys):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("Alice Varga joined Helix Robotics in 2021 (ticket NL-4521). " * 60)
    db = tmp_path / "c.db"
    with F(
        [
            F.reply_tool_calls([("r1", "read_file", '{"path":"notes.txt"}')]),
            F.reply_text("Alice Varga joined Helix Robotics in 2021."),  # the summarizer's request
            F.reply_text("Alice works at Helix Robotics."),
        ]
    ) as srv:
        assert (
            _run(
                db,
                srv.url,
                "--workspace",
                str(ws),
                "--no-delegate",
                "--compaction",
                "context_aware",
                "Where does Alice work?",
            )
            == 0
        )
        first, summary_req, last = srv.requests
    assert summary_req["messages"][0]["content"].startswith("You compress text") and "tools" not in summary_req
    assert "Given the search query: Where does Alice work?" in summary_req["messages"][1]["content"]
    assert last["messages"][0] == first["messages"][0] and last["tools"] == first["tools"]  # prefix untouched
    tool_msg = next(m for m in last["messages"] if m["role"] == "tool")["content"]
    tool_msg = unwrap(tool_msg)[2]  # a file is untrusted: the summary is marked like the file
    assert tool_msg.startswith("[task-aware summary of the read_file result r1") and "NL-4521" in tool_msg


# -- your own agent without writing Python: --system, --tool, --gguf ------------------------


def test_system_is_a_file_or_the_text_itself(tmp_path, capsys):
    prompt_file = tmp_path / "system.md"
    prompt_file.write_text("You are the release bot.\nAnswer in one line.", encoding="utf-8")
    with F([F.reply_text("ok"), F.reply_text("ok")]) as srv:
        assert _run(tmp_path / "c.db", srv.url, "--system", str(prompt_file), "--no-status", "hi") == 0
        assert _run(tmp_path / "c.db", srv.url, "--system", "You are terse.", "--no-status", "hi") == 0
        from_file, literal = (r["messages"][0]["content"] for r in srv.requests)
    # read_result (untrusted pages) is on for a served model: the defence section follows the prompt
    assert from_file == "You are the release bot.\nAnswer in one line.\n\n" + TAGS_SECTION
    assert literal == "You are terse.\n\n" + TAGS_SECTION


def test_a_mistyped_system_file_is_an_error_not_the_prompt(tmp_path, monkeypatch, capsys):
    """Hostile probe: a missing file whose name looks like a path used to become the system
    prompt, silently; now one line and exit 2, before a session exists or a request is sent."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "system.md").write_text("You are the release bot.", encoding="utf-8")
    db = tmp_path / "c.db"
    with F([F.reply_text("ok")] * 4) as srv:
        for value, message in [
            ("prompts/sytem.md", "--system prompts/sytem.md: no such file"),
            ("sytem.md", "--system sytem.md: no such file"),
            ("~ctxwright-nobody/system.md", "no such file"),
            ("prompts", "--system prompts: not a file"),
            ("prompts/", "--system prompts/: not a file"),
        ]:
            assert _run(db, srv.url, "--system", value, "hi") == 2, value
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and err.startswith("ctxwright: "), err
            assert message in err and "--system-text" in err
        both = _run(db, srv.url, "--system", "prompts/system.md", "--system-text", "You are x.", "hi")
        assert both == 2 and "give one of them" in capsys.readouterr().err
        assert not srv.requests and (not db.exists() or not Store(db).list_sessions())

        long_text = " ".join(["You are a careful assistant."] * 200)  # over any file name's length limit
        assert _run(db, srv.url, "--system-text", "You are x.", "--no-status", "hi") == 0
        assert _run(db, srv.url, "--system-text", "prompts/system.md", "--no-status", "hi") == 0  # never read
        assert _run(db, srv.url, "--system", long_text, "--no-status", "hi") == 0
        assert _run(db, srv.url, "--system", "x" * 300, "--no-status", "hi") == 0  # one word, no path
        systems = [r["messages"][0]["content"].split("\n\n")[0] for r in srv.requests]
    assert systems == ["You are x.", "prompts/system.md", long_text, "x" * 300]


def test_system_text_resumes_with_the_same_text_and_refuses_another(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text("ok"), F.reply_text("ok again")]) as srv:
        assert _run(db, srv.url, "--system-text", "You are x.", "hi") == 0
        sid = Store(db).list_sessions()[0]["id"]
        assert _run(db, srv.url, "--resume", sid, "--system-text", "You are x.", "again") == 0
        assert _run(db, srv.url, "--resume", sid, "--system-text", "You are y.", "again") == 2
        assert "system prompt differs" in capsys.readouterr().err
        first, second = srv.requests
    assert second["messages"][0] == first["messages"][0]


def _module(tmp_path, monkeypatch, name: str, source: str) -> None:
    """A module of the user's in the current directory; sys.path is restored afterwards."""
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_tool_option_runs_your_function_with_its_hints_as_schema(tmp_path, monkeypatch, capsys):
    _module(
        tmp_path,
        monkeypatch,
        "cli_tools_ok",
        'def add(a: int, b: int) -> int:\n    """Add two integers.\n\n    Args:\n        a: the first\n'
        '        b: the second\n    """\n    return a + b\n',
    )
    with F([F.reply_tool_calls([("c1", "add", '{"a":2,"b":3}')]), F.reply_text("2 + 3 = 5")]) as srv:
        rc = _run(
            tmp_path / "c.db",
            srv.url,
            "--system",
            "You add numbers with the add tool.",
            "--tool",
            "cli_tools_ok:add",
            "--no-todo",
            "--no-delegate",
            "--no-read-result",
            "--no-recall",
            "What is 2 + 3?",
        )
        assert rc == 0
        first, second = srv.requests
    (spec,) = first["tools"]
    assert spec["function"]["name"] == "add" and spec["function"]["description"] == "Add two integers."
    assert spec["function"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "the first"}
    assert next(m for m in second["messages"] if m["role"] == "tool")["content"] == "5"
    assert "2 + 3 = 5" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cli_tools_bad", "write it as module:function"),
        ("cli_tools_nowhere:add", "no module named 'cli_tools_nowhere'"),
        ("cli_tools_bad:missing", "has no attribute 'missing'"),
        ("cli_tools_bad:LIMIT", "LIMIT is a int, not a function"),
        ("cli_tools_bad:undocumented", "has no description"),
        ("cli_tools_bad:untyped", "needs a type hint"),
        ("cli_tools_broken:f", "importing cli_tools_broken raised RuntimeError: no config"),
        ("cli_tools_needs:f", "importing cli_tools_needs failed: No module named 'not_installed_pkg'"),
    ],
)
def test_bad_tool_specs_are_one_clear_line(tmp_path, monkeypatch, capsys, spec, message):
    _module(
        tmp_path,
        monkeypatch,
        "cli_tools_bad",
        "LIMIT = 3\n\ndef undocumented(x: int) -> int:\n    return x\n\n"
        'def untyped(x):\n    """Has no hints."""\n    return x\n',
    )
    (tmp_path / "cli_tools_broken.py").write_text('raise RuntimeError("no config")\n')
    (tmp_path / "cli_tools_needs.py").write_text("import not_installed_pkg\n")
    rc = _run(tmp_path / "c.db", "http://127.0.0.1:9/v1", "--tool", spec, "hi")
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("ctxwright: ")
    assert message in err and spec in err


def test_missing_gguf_is_a_clear_error_without_a_model(tmp_path, capsys):
    missing = tmp_path / "nope.gguf"
    assert main(["--db", str(tmp_path / "c.db"), "run", "--gguf", str(missing), "hi"]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err
    assert not Store(tmp_path / "c.db").list_sessions()  # nothing started


@pytest.mark.slow
def test_gguf_runs_the_embedded_backend_on_the_given_file(tmp_path, capsys):
    pytest.importorskip("llama_cpp", reason="the embedded extra is not installed")
    from ctxwright.backends.embedded import find_model_file
    from ctxwright.errors import BackendUnavailable

    try:
        bundled = find_model_file()
    except BackendUnavailable as exc:
        pytest.skip(str(exc))
    other = tmp_path / "my-model.gguf"  # another name: the model is named after the file it ran
    other.symlink_to(bundled)
    rc = main(["--db", str(tmp_path / "c.db"), "run", "--gguf", str(other), "--max-tokens", "120", "What is 6*7?"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "backend embedded · model my-model" in out and "stop reason" in out
    (row,) = Store(tmp_path / "c.db").list_sessions()
    assert row["model"] == "my-model"


# -- errors at the top: one line, --debug for the traceback --------------------------------


def test_a_damaged_database_is_one_line_and_debug_shows_the_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a SQLite database, " * 200)
    assert main(["--db", str(bad), "sessions"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "is not an SQLite database" in err and str(bad) in err and "Traceback" not in err
    assert main(["--debug", "--db", str(bad), "sessions"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "migrations.py" in err
    assert err.strip().splitlines()[-1].startswith("ctxwright: ")


def test_an_unexpected_error_says_how_to_see_more(tmp_path, capsys, monkeypatch):
    import ctxwright.cli.main as cli

    def broken(args):
        raise KeyError("profile")

    monkeypatch.setattr(cli, "cmd_sessions", broken)
    assert main(["--db", str(tmp_path / "c.db"), "sessions"]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip()
        == "ctxwright: unexpected KeyError: 'profile'; rerun with --debug for the traceback, and report it if it looks like a bug"
    )
