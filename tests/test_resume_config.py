"""``--resume`` (and ``--continue``) run the session with the configuration it recorded:
backend, server, model and every option that shapes a request; a flag given again
overrides it and is remembered; another backend or model is refused with one clear line."""

from __future__ import annotations

import json

import pytest

from ctxwright import CompactionConfig, Harness
from ctxwright.cli.main import main
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

FLAGS = [
    "--max-tokens",
    "77",
    "--max-iterations",
    "7",
    "--max-tool-rounds",
    "2",
    "--tool-timeout",
    "5",
    "--timestamps",
    "--status-mode",
    "append",
    "--cache-price-ratio",
    "0.3",
    "--result-cap",
    "3000",
    "--keep-results",
    "2",
    "--clear-at",
    "0.5",
    "--no-summaries",
    "--window",
    "32000",
    "--api-key-env",
    "MY_SERVER_KEY",
]


def _start(db, url, *flags: str, prompt: str = "first") -> str:
    rc = main(["--db", str(db), "run", "--backend", "openai", "--model", "fake", "--base-url", url, *flags, prompt])
    assert rc == 0
    return Store(db).list_sessions()[0]["id"]


def test_resume_runs_with_every_option_the_session_recorded(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MY_SERVER_KEY", "sk-local-1")
    db = tmp_path / "c.db"
    with F([F.reply_text("one"), F.reply_text("two")]) as srv:
        sid = _start(db, srv.url, *FLAGS)
        # no --backend, --base-url, --model or any other flag: all of it is the session's
        assert main(["--db", str(db), "run", "--resume", sid, "second"]) == 0
        _first, second = srv.recorded
    assert second.json["model"] == "fake" and second.json["max_tokens"] == 77
    assert second.headers["authorization"] == "Bearer sk-local-1"  # the key from the recorded variable
    user = [m["content"] for m in second.json["messages"] if m["role"] == "user"]
    assert user[-2].startswith("[20") and user[-2].endswith("] second")  # --timestamps kept
    statuses = [c for c in user if c.startswith("<agent_status>")]
    assert len(statuses) == 2  # append mode kept: the first run's status is still there
    meta = Store(db).get_session(sid).meta["harness"]
    assert "sk-local-1" not in json.dumps(meta) and meta["model"]["api_key_env"] == "MY_SERVER_KEY"
    with Harness.resume(sid, db=db) as h:  # what the CLI resumed with, as a library sees it
        c = h.agent.config
        assert (c.max_tokens, c.max_iterations, c.max_tool_rounds, c.tool_timeout_s, c.timestamps) == (
            77,
            7,
            2,
            5,
            True,
        )
        assert h.agent.status is not None and h.agent.status.config.mode == "append"
        assert h.agent.status.config.alpha == 0.3
        comp = c.compaction
        assert comp is not None and (comp.result_cap_tokens, comp.keep_recent_results, comp.trigger_ratio) == (
            3000,
            2,
            0.5,
        )
        assert not comp.archival_summaries and not comp.full_compaction  # --no-summaries, on a served model
        assert h.agent.context is not None and h.agent.context.window_tokens == 32000


def test_a_flag_given_again_overrides_and_is_remembered(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text("one"), F.reply_text("two"), F.reply_text("three")]) as srv:
        sid = _start(db, srv.url, "--max-tokens", "77", "--keep-results", "2")
        assert main(["--db", str(db), "run", "--resume", sid, "--max-tokens", "99", "second"]) == 0
        assert main(["--db", str(db), "run", "--continue", "third"]) == 0
        assert [r["max_tokens"] for r in srv.requests] == [77, 99, 99]
    with Harness.resume(sid, db=db, compaction={"result_cap_tokens": 1234}) as h:  # one field over the record
        comp = h.agent.config.compaction
        assert comp is not None and (comp.result_cap_tokens, comp.keep_recent_results) == (1234, 2)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "other-model"], "ran on model 'fake'"),
        (["--backend", "embedded"], "ran on the openai backend"),
        (["--gguf", "some.gguf"], "ran on the openai backend"),
    ],
    ids=["model", "backend", "gguf"],
)
def test_another_backend_or_model_is_refused(tmp_path, capsys, flags, message):
    db = tmp_path / "c.db"
    with F([F.reply_text("one"), F.reply_text("never")]) as srv:
        sid = _start(db, srv.url)
        before = len(Store(db).events(sid))
        capsys.readouterr()
        assert main(["--db", str(db), "run", "--resume", sid, *flags, "second"]) == 2
        err = capsys.readouterr().err
        assert len(srv.requests) == 1  # nothing was sent
    assert len(err.strip().splitlines()) == 1 and err.startswith("ctxwright: ") and message in err
    assert sid in err and "start a new session" in err and "Traceback" not in err
    assert len(Store(db).events(sid)) == before


def test_the_library_refuses_another_model_too(tmp_path):
    from ctxwright import ConfigError, ScriptedBackend

    db = tmp_path / "a.db"
    with Harness(backend=ScriptedBackend(["x"], model="m1"), db=db) as h:
        sid = h.session_id
    with pytest.raises(ConfigError, match="ran on model 'm1'"):
        Harness.resume(sid, backend=ScriptedBackend(["x"], model="m2"), db=db)


def test_a_recorded_compaction_config_wins_over_the_backend_defaults(tmp_path):
    from ctxwright import ScriptedBackend

    db = tmp_path / "a.db"
    given = CompactionConfig(result_cap_tokens=1500, keep_recent_results=1)
    with Harness(backend=ScriptedBackend(["x"]), db=db, compaction=given, summaries=False) as h:
        sid = h.session_id
    with Harness.resume(sid, backend=ScriptedBackend(["y"]), db=db) as h2:
        comp = h2.agent.config.compaction
        assert comp is not None and (comp.result_cap_tokens, comp.keep_recent_results) == (1500, 1)
        assert not comp.archival_summaries  # a served backend's default would switch summaries on
    with Harness(backend=ScriptedBackend(["x"]), db=db, compaction=False) as off:
        sid_off = off.session_id
    with Harness.resume(sid_off, backend=ScriptedBackend(["y"]), db=db) as h3:
        assert h3.agent.context is None  # compaction stays off


def test_continue_takes_the_session_used_last(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text(t) for t in ("a1", "b1", "a2", "a3")]) as srv:
        a = _start(db, srv.url, prompt="session a")
        b = _start(db, srv.url, prompt="session b")
        assert main(["--db", str(db), "run", "--resume", a, "back to a"]) == 0  # a is now the one used last
        Store(db).create_session({"system_prompt": "child", "tools": []}, "x" * 64, parent_id=a)  # a sub-agent's
        assert main(["--db", str(db), "run", "--continue", "still a?"]) == 0
        last = srv.requests[-1]["messages"]
    assert any(m.get("content") == "back to a" for m in last) and b != a
    assert Store(db).latest_session() == a


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--continue", "x"], "no session to continue in"),
        (["run", "--continue"], "--continue needs a follow-up message"),
        (["run", "--continue", "--resume", "abc", "x"], "give one of them"),
    ],
)
def test_continue_errors_are_one_line(tmp_path, capsys, argv, message):
    db = tmp_path / "empty.db"
    if "needs a follow-up" in message:
        with F([F.reply_text("one")]) as srv:
            _start(db, srv.url)
        capsys.readouterr()
    assert main(["--db", str(db), *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err
