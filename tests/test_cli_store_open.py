"""Which commands create a store, and what a run that reached no model leaves behind, through
the real command line.

A command that only reads (``sessions``, ``show``, ``export``, ``audit``, ``report``, ``lock``,
``gate``, ``attention``, ``proxy --list``) opens an existing store or says in one line that there
is none -- a mistyped ``--db`` used to leave a new database and its folders behind. Only what
records (``run``, ``proxy``) creates one. A run whose model call got no answer is one line on
stderr, no empty per-call table, and no session that holds only the task. The anthropic backend
without its SDK is one line naming the extra."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
import sys
import tomllib
from pathlib import Path

import pytest

from ctxwright.cli.main import main
from ctxwright.errors import ConfigError, StoreLocked, StoreMissing, StoreUnusable
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

ROOT = Path(__file__).resolve().parents[1]
#: every command that reads a store, with a session ID it does not hold
READERS = {
    "sessions": ["sessions"],
    "show": ["show", "abc123"],
    "export": ["export", "abc123"],
    "audit": ["audit", "abc123"],
    "audit --proxy-session": ["audit", "--proxy-session", "abc123"],
    "report": ["report", "abc123", "-o", "REPORT"],
    "lock": ["lock", "--session", "abc123", "--file", "LOCK"],
    "gate": ["gate", "--session", "abc123", "--", sys.executable, "-c", "pass"],
    "attention": ["attention", "abc123"],
    "proxy --list": ["proxy", "--list"],
}


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("ctxwright: ", "ctxwright gate: ")) and "Traceback" not in err
    return lines[0]


def _argv(command: str, tmp_path: Path) -> list[str]:
    out = {"REPORT": str(tmp_path / "r.html"), "LOCK": str(tmp_path / "ctxwright.lock")}
    return [out.get(a, a) for a in READERS[command]]


def _refused_port() -> int:
    """A loopback port nothing listens on: bound, then closed (the connection is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- 4. a reader never creates a store ---------------------------------------------------------------


@pytest.mark.parametrize("command", list(READERS))
def test_a_reader_given_a_missing_store_says_so_and_creates_nothing(tmp_path, capsys, command):
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    assert main(["--db", str(db), *_argv(command, tmp_path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"no ctxwright database at {db}" in line and "nothing was created" in line
    assert "ctxwright run" in line  # how to create one
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no folder, no file, no report


@pytest.mark.parametrize("command", [["sessions"], ["replay", "serve", "--session", "abc"]])
def test_a_missing_default_store_says_what_chose_it_not_to_check_a_db_never_given(
    tmp_path, monkeypatch, capsys, command
):
    """No --db: the line names the default's source -- the user data dir, or CTXWRIGHT_DB when
    it is set -- and sends the user to --db only when one was given."""
    monkeypatch.delenv("CTXWRIGHT_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # platformdirs' user data dir
    assert main(command) == 2
    line = _one_line(capsys.readouterr().err)
    default = tmp_path / "data" / "ctxwright" / "ctxwright.db"
    assert f"no ctxwright database at {default}" in line
    assert "No --db was given and CTXWRIGHT_DB is not set, so this is the default store in the user data dir" in line
    assert "Check --db" not in line and "ctxwright run" in line

    env_db = tmp_path / "env" / "x.db"
    monkeypatch.setenv("CTXWRIGHT_DB", str(env_db))
    assert main(command) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"no ctxwright database at {env_db}" in line
    assert "No --db was given, so this is the store CTXWRIGHT_DB names: check CTXWRIGHT_DB, or give --db" in line

    given = tmp_path / "given.db"  # --db given (CTXWRIGHT_DB still set): the --db is what to check
    assert main(["--db", str(given), *command]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"no ctxwright database at {given}" in line and "Check --db (or CTXWRIGHT_DB)" in line
    assert list(tmp_path.iterdir()) == []  # nothing created anywhere


def test_a_mistyped_db_in_the_current_folder_leaves_no_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["show", "abc", "--db", "typo.db"]) == 2
    assert "no ctxwright database at typo.db" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


def test_continue_without_a_store_creates_none(tmp_path, capsys):
    db = tmp_path / "none" / "x.db"
    assert main(["--db", str(db), "run", "--continue", "more"]) == 2
    assert "no session to continue in" in _one_line(capsys.readouterr().err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["empty file", "another program's database"])
def test_a_database_without_ctxwright_tables_is_refused_and_left_as_it_was(tmp_path, capsys, kind):
    db = tmp_path / "other.db"
    if kind == "empty file":
        db.write_bytes(b"")
    else:
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE notes (t TEXT)")
        con.commit()
        con.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    assert main(["--db", str(db), "sessions"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{db} holds no ctxwright store" in line and "not changed" in line
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]  # no -wal, no -shm


def test_a_reader_opens_an_existing_store_and_a_writer_still_creates_one(tmp_path, capsys):
    db = tmp_path / "new" / "c.db"
    with F([F.reply_text("It is 10:00.")]) as srv:
        argv = ["--db", str(db), "run", "--backend", "openai", "--base-url", srv.url, "--model", "m", "hi"]
        assert main(argv) == 0
    assert db.is_file()
    capsys.readouterr()
    assert main(["--db", str(db), "sessions", "--json"]) == 0
    assert "hi" in capsys.readouterr().out
    assert Store(db, must_exist=True).list_sessions()[0]["first_user"] == "hi"


def test_the_store_layer_refuses_a_missing_store_only_when_asked(tmp_path):
    missing = tmp_path / "a" / "b.db"
    with pytest.raises(StoreMissing, match="no ctxwright database at"):
        Store(missing, must_exist=True)
    assert not (tmp_path / "a").exists()
    Store(missing).close()  # a writer creates it, folders included
    assert missing.is_file()
    Store(missing, must_exist=True).close()


def test_a_postgresql_database_without_the_tables_is_not_given_them_by_a_reader(pg_server, capsys):
    url = pg_server.new_database()
    assert main(["--db", url, "sessions"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "holds no ctxwright store" in line
    name = url.rsplit("/", 1)[1]
    tables = "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
    assert pg_server.psql(tables, name) == "[(0,)]"
    Store(url).close()  # a writer creates the tables; a reader then opens them
    assert main(["--db", url, "sessions", "--json"]) == 0


# -- 5. a run that reached no model ------------------------------------------------------------------


def test_a_refused_base_url_is_one_error_no_table_and_no_session_left(tmp_path, capsys):
    port = _refused_port()
    db = tmp_path / "c.db"
    argv = ["--db", str(db), "run", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}/v1"]
    assert main([*argv, "--model", "m", "hello"]) == 2
    out, err = capsys.readouterr()
    errors = [ln for ln in err.splitlines() if ln.startswith("ctxwright:")]
    assert len(errors) == 1, err
    assert err.count("cannot connect to") == 1 and f"127.0.0.1:{port}" in errors[0]
    assert "was not kept" in errors[0] and "--resume" not in errors[0]
    assert "model calls" not in out and "stop reason" not in out  # no empty table, no summary
    store = Store(db)
    assert store.list_sessions() == []
    assert store.db.fetchall("SELECT session_id FROM events") == []
    assert store.db.fetchall("SELECT session_id FROM calls") == []
    store.close()


def test_a_resumed_session_that_reaches_no_model_is_kept_whole(tmp_path, capsys):
    db = tmp_path / "c.db"
    with F([F.reply_text("It is 10:00.")]) as srv:
        argv = ["--db", str(db), "run", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        assert main([*argv, "--max-retries", "0", "what time is it?"]) == 0
    store = Store(db)
    (row,) = store.list_sessions()
    kinds = [e.kind for e in store.events(row["id"])]
    store.close()
    capsys.readouterr()
    dead = f"http://127.0.0.1:{_refused_port()}/v1"
    assert main(["--db", str(db), "run", "--resume", row["id"], "--base-url", dead, "and now?"]) == 2
    out, err = capsys.readouterr()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("ctxwright:")]
    assert err.count("cannot connect to") == 1 and f'ctxwright run --resume {row["id"]} "..."' in line
    assert "model calls" not in out
    store = Store(db)
    after = [e.kind for e in store.events(row["id"])]
    assert after[: len(kinds)] == kinds and "user" in after[len(kinds) :]  # nothing lost, the new task kept
    store.close()


def test_a_session_with_more_than_its_opening_is_never_discarded(tmp_path):
    from ctxwright.core.messages import Message
    from ctxwright.core.prefix import Prefix
    from ctxwright.core.session import Session

    store = Store(tmp_path / "c.db")
    bare = Session.start(Prefix.build("S", ()), store=store)
    bare.add_user("hello")
    answered = Session.start(Prefix.build("S", ()), store=store)
    answered.add_user("hello")
    answered.add_assistant(Message(role="assistant", content="hi"))
    assert not store.discard_unanswered(answered.id)
    assert store.discard_unanswered(bare.id)
    assert [r["id"] for r in store.list_sessions()] == [answered.id]
    store.close()


# -- 6. the anthropic backend without its SDK ------------------------------------------------------


def test_the_anthropic_backend_without_its_sdk_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic", None)  # `import anthropic` fails, as when not installed
    monkeypatch.delitem(sys.modules, "ctxwright.backends.anthropic", raising=False)
    db = tmp_path / "new" / "c.db"
    argv = ["--db", str(db), "run", "--backend", "anthropic", "--model", "claude-sonnet-4-5", "hi"]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "pip install 'ctxwright[anthropic]'" in line
    assert list(tmp_path.iterdir()) == []  # refused before a store was made
    from ctxwright import Harness

    with pytest.raises(ConfigError, match=r"ctxwright\[anthropic\]"):
        Harness(backend="anthropic", model="claude-sonnet-4-5", db=None)


def test_the_anthropic_extra_brings_the_sdk():
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    assert any(req.startswith("anthropic>=") for req in extras["anthropic"])


# -- what a new user tripped over ------------------------------------------------------------------


def test_run_without_a_task_is_refused_not_answered_with_a_demo_question(tmp_path, capsys):
    db = tmp_path / "c.db"
    assert main(["--db", str(db), "run", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert 'ctxwright run "the task"' in line
    assert not db.exists()


def test_a_one_word_system_value_that_is_no_file_is_warned_about(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with F([F.reply_text("ok")]) as srv:
        argv = ["--db", "c.db", "run", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        assert main([*argv, "--system", "myprompt", "hi"]) == 0
        sent = srv.requests[0]["messages"][0]
    err = capsys.readouterr().err
    (warning,) = [ln for ln in err.splitlines() if "--system myprompt" in ln]
    assert "warning" in warning and "no file of that name" in warning and "--system-text" in warning
    assert sent["role"] == "system" and sent["content"].startswith("myprompt\n")  # still used as given
    with F([F.reply_text("ok")]) as srv:  # a sentence is a prompt: no warning
        argv = ["--db", "c.db", "run", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        assert main([*argv, "--system", "You are terse.", "hi"]) == 0
    assert "warning" not in capsys.readouterr().err


# -- PostgreSQL's two cancellations, worded apart ------------------------------------------------------


class _PgError(Exception):
    def __init__(self, sqlstate: str, text: str) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


def test_a_lock_wait_and_a_cancelled_statement_are_told_apart():
    from ctxwright.store.postgres import describe_problem

    lock = describe_problem("pg", _PgError("55P03", "canceling statement due to lock timeout"))
    assert isinstance(lock, StoreLocked) and "lock another process holds" in str(lock)
    timeout = describe_problem("pg", _PgError("57014", "canceling statement due to statement timeout"))
    assert not isinstance(timeout, StoreLocked) and "statement_timeout" in str(timeout) and "lock" not in str(timeout)
    asked = describe_problem("pg", _PgError("57014", "canceling statement due to user request"))
    assert not isinstance(asked, StoreLocked) and "on request" in str(asked) and "lock" not in str(asked)


def test_a_server_statement_timeout_is_worded_as_one(pg_server):
    url = pg_server.new_database()
    Store(url).close()  # the tables, made before the limit is set
    name = url.rsplit("/", 1)[1]
    pg_server.psql(f"ALTER DATABASE {name} SET statement_timeout = '200ms'")
    store = Store(url)
    try:
        with pytest.raises(StoreUnusable) as caught:
            store.db.fetchone("SELECT pg_sleep(2)")
    finally:
        store.close()
    assert not isinstance(caught.value, StoreLocked)
    assert "statement_timeout" in str(caught.value) and "another process" not in str(caught.value)
