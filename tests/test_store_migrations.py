"""The store's schema version and named migrations: a store v1 database (the committed
fixture, written by the release before typed events) is migrated on open and re-renders
exactly what was sent; a file that is not SQLite, or a newer schema, is refused with one
clear error and left byte for byte as it was."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.cli.main import main
from ctxwright.core.events import event_from_row
from ctxwright.core.messages import canonical_json
from ctxwright.core.prefix import Prefix
from ctxwright.core.reasoning import install
from ctxwright.core.render import render_at
from ctxwright.core.session import Session
from ctxwright.errors import NotADatabase, SchemaTooNew, StoreUnusable
from ctxwright.status.bar import StatusBar, StatusConfig
from ctxwright.store.migrations import MIGRATIONS, SCHEMA_VERSION
from ctxwright.store.sessions import Store
from ctxwright.tools.registry import ToolRegistry, tool

FIXTURES = Path(__file__).parent / "fixtures"
SID = "065143ebd198"


def _copy(tmp_path: Path) -> Path:
    """A copy of the frozen v1 fixture (and its offloaded result) to migrate."""
    db = tmp_path / "store_v1.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    shutil.copytree(FIXTURES / "ctxwright-results", tmp_path / "ctxwright-results")
    return db


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _side_files(p: Path) -> list[str]:
    return sorted(x.name for x in p.parent.iterdir() if x.name.startswith(p.name) and x.name != p.name)


def _lookup_registry() -> ToolRegistry:
    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return ("value of " + key + " ") * (400 if key == "big" else 3)

    reg = ToolRegistry()
    reg.register(lookup)
    return reg


def test_the_fixture_is_a_v1_database():
    con = sqlite3.connect(f"file:{FIXTURES / 'store_v1.db'}?mode=ro&immutable=1", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert con.execute("PRAGMA user_version").fetchone()[0] == 0 and "_migrations" not in tables
    con.close()


def test_v1_database_migrates_and_rerenders_byte_for_byte_what_was_sent(tmp_path):
    db = _copy(tmp_path)
    store = Store(db)
    assert store.schema() == (SCHEMA_VERSION, [fn.__name__ for fn in MIGRATIONS])
    assert SCHEMA_VERSION == 8 and MIGRATIONS[-1].__name__ == "m008_proxy_compressed"
    session = Session.resume(store, SID)
    calls = store.calls(SID)
    rendered = render_at(session.prefix, session.events, session.settings(), [c.event_count for c in calls])
    rebuilt = [c.options.request(tuple(rendered[c.event_count]), session.prefix.tools).canonical_bytes() for c in calls]
    sent = (FIXTURES / "store_v1.requests.jsonl").read_text().splitlines()
    assert [json.dumps(json.loads(r), sort_keys=True, ensure_ascii=False) for r in rebuilt] == sent
    # what the stored hash proves was recovered; the rest is marked unknown, never guessed
    assert [c.tool_choice for c in calls] == ["auto"] * 5
    assert [c.model for c in calls] == ["deepseek-chat"] * 5
    assert all(c.options_unknown == ("max_tokens", "temperature", "extra") for c in calls)
    assert [c.event_count for c in calls] == [2, 6, 9, 12, 16]
    store.close()
    again = Store(db)  # a second open finds nothing to do
    assert again.schema() == (SCHEMA_VERSION, [fn.__name__ for fn in MIGRATIONS])
    assert again.calls(SID) == calls


def test_every_v1_row_parses_and_writes_back_the_same_payload(tmp_path):
    db = _copy(tmp_path)
    Store(db).close()
    con = sqlite3.connect(db)
    rows = con.execute("SELECT seq, kind, created_at, payload_json FROM events ORDER BY seq").fetchall()
    con.close()
    assert {r[1] for r in rows} == {"user", "status", "assistant", "tool", "compaction"}
    for seq, kind, created, payload in rows:
        ev = event_from_row(seq, kind, created, json.loads(payload))
        assert type(ev).__name__ != "UnknownEvent" and ev.kind == kind
        assert canonical_json(ev.to_payload()) == payload


def test_follow_up_run_on_the_migrated_fixture_is_audited_as_append(tmp_path):
    db = _copy(tmp_path)
    session = Session.resume(Store(db), SID)
    install(session)  # the recorded mode (strip): the fixture's replies carry reasoning_content
    agent = Agent(
        session,
        ScriptedBackend(["all three found"], model="deepseek-chat"),
        _lookup_registry(),
        AgentConfig(compaction=None, max_tokens=64),
        status=StatusBar(StatusConfig(mode="append", items=("counters", "error", "budget"))),
    )
    assert len(agent.auditor.rows) == 5  # the five calls, rebuilt from the migrated store
    r = agent.run("Thanks, that is all.")
    assert [c.cause for c in r.calls] == ["append"]
    assert (r.calls[0].reusable_tokens or 0) > 0
    new = Store(db).calls(SID)[-1]
    assert (new.call_index, new.max_tokens, new.options_unknown) == (5, 64, ())


def test_a_file_that_is_not_sqlite_is_refused_and_left_as_it_was(tmp_path, capsys):
    p = tmp_path / "notes.db"
    p.write_text("my notes, not a database\n" * 40)
    before = _digest(p)
    with pytest.raises(NotADatabase, match=r"not an SQLite database.*not changed"):
        Store(p)
    assert _digest(p) == before and _side_files(p) == []
    assert main(["--db", str(p), "sessions"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not an SQLite database" in err and "--db" in err
    assert _digest(p) == before and _side_files(p) == []


def test_a_damaged_sqlite_file_is_refused_and_left_as_it_was(tmp_path):
    p = tmp_path / "damaged.db"
    p.write_bytes((FIXTURES / "store_v1.db").read_bytes()[:100] + b"\x07" * 8000)
    before = _digest(p)
    with pytest.raises(StoreUnusable):
        Store(p)
    assert _digest(p) == before and _side_files(p) == []


def _newer(tmp_path: Path, how: str) -> Path:
    db = _copy(tmp_path)
    Store(db).close()
    con = sqlite3.connect(db)
    if how == "user_version":
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    else:  # a newer writer's migration with the version this build knows (e.g. a branch)
        con.execute("INSERT INTO _migrations (name, applied_at) VALUES ('m003_from_a_newer_release', 0)")
    con.commit()
    con.close()
    assert _side_files(db) == []
    return db


@pytest.mark.parametrize("how", ["user_version", "migration_name"])
def test_a_newer_schema_is_refused_and_left_as_it_was(tmp_path, capsys, how):
    db = _newer(tmp_path, how)
    before = _digest(db)
    with pytest.raises(SchemaTooNew, match=r"newer ctxwright.*not changed.*Upgrade"):
        Store(db)
    assert _digest(db) == before and _side_files(db) == []
    assert main(["--db", str(db), "show", SID]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "newer ctxwright" in err
    assert _digest(db) == before and _side_files(db) == []


def test_a_new_store_has_every_migration_and_records_request_options(tmp_path):
    store = Store(tmp_path / "new.db")
    assert store.schema() == (SCHEMA_VERSION, [fn.__name__ for fn in MIGRATIONS])
    s = Session.start(Prefix.build("sys", _lookup_registry().specs()), store=store, model="m")
    s.add_user("q")
    req = s.build_request(tool_choice="lookup", max_tokens=12, temperature=0.5, extra={"seed": 7})
    s.add_user("recorded after the request was built: not part of it")
    s.record_call(req, None, model="served-name")
    (call,) = store.calls(s.id)
    assert call.options.body(req.messages, req.tools) == req.openai_body("served-name")
    assert (call.event_count, call.tool_choice, call.extra) == (1, "lookup", {"seed": 7})
