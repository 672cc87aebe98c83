"""Bad option values, given or read from a damaged session record: one line saying what was
wrong and what to give, before anything is sent; the stored session is left as it was."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_tokens": "lots"}, "max_tokens='lots': give a whole number of at least 1"),
        ({"max_tokens": True}, "max_tokens=True: give a whole number"),
        ({"max_iterations": 0}, "max_iterations=0: give a whole number of at least 1"),
        ({"tool_timeout": -1}, "tool_timeout=-1: give a number above 0"),
        ({"window": float("nan")}, "window=nan"),
        ({"status": True, "cache_price_ratio": -0.5}, "cache_price_ratio=-0.5: give a number of at least 0"),
        ({"compaction": {"trigger_ratio": "high"}}, "trigger_ratio='high' is not a number"),
    ],
)
def test_a_bad_value_given_is_one_line(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        Harness("s", [], backend=ScriptedBackend(["x"]), **given)
    assert "\n" not in str(err.value)


def _stored(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    db = tmp_path / "s.db"
    with Harness("s", [], backend=ScriptedBackend(["hi"]), db=db, status=False) as h:
        h.run("x")
        sid = h.session_id
    con = sqlite3.connect(db)
    meta = json.loads(con.execute("SELECT meta_json FROM sessions WHERE id=?", (sid,)).fetchone()[0])
    con.close()
    return db, sid, meta


def _damage(db: Path, sid: str, meta: dict[str, Any], record: Any) -> bytes:
    con = sqlite3.connect(db)
    con.execute("UPDATE sessions SET meta_json=? WHERE id=?", (json.dumps({**meta, "harness": record}), sid))
    con.commit()
    con.close()
    return db.read_bytes()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: ["x"], "are a list, not an object"),
        (lambda r: {"version": "x"}, "version 'x'"),
        (lambda r: {"version": 2, "limits": "garbage"}, "lack or damage the section"),
        (lambda r: {**r, "limits": {**r["limits"], "max_tokens": "lots"}}, "limits.max_tokens='lots'"),
        (lambda r: {**r, "limits": {**r["limits"], "max_iterations": -3}}, "limits.max_iterations=-3"),
        (lambda r: {**r, "compaction": {**r["compaction"], "config": {"trigger_ratio": "high"}}}, "trigger_ratio"),
    ],
)
def test_a_damaged_record_is_one_line_and_the_session_stays(tmp_path: Path, damage: Any, message: str) -> None:
    db, sid, meta = _stored(tmp_path)
    before = _damage(db, sid, meta, damage(meta["harness"]))
    with pytest.raises(ConfigError, match=message) as err:
        Harness.resume(sid, [], backend=ScriptedBackend(["y"]), db=db)
    assert ("\n" not in str(err.value) and "damaged" in str(err.value)) or "trigger_ratio" in str(err.value)
    assert db.read_bytes() == before  # nothing written: the events and the record are as they were


def test_a_damaged_value_given_again_resumes(tmp_path: Path) -> None:
    db, sid, meta = _stored(tmp_path)
    rec = meta["harness"]
    _damage(db, sid, meta, {**rec, "limits": {**rec["limits"], "max_tokens": "lots"}})
    with Harness.resume(sid, [], backend=ScriptedBackend(["ok"]), db=db, max_tokens=64) as h:
        assert h.run("again").final_answer == "ok"
        assert h.session.meta["harness"]["limits"]["max_tokens"] == 64  # the repaired value is recorded


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-iterations", "0"],
        ["--max-iterations", "-1"],
        ["--window", "0"],
        ["--max-tokens", "-5"],
        ["--tool-timeout", "0"],
    ],
)
def test_nonsense_run_flags_are_one_line_and_exit_non_zero(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from ctxwright.cli.main import main

    assert main(["--db", str(tmp_path / "c.db"), "run", *flags, "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "give a" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--mcp", 'unterminated "quote'], "no closing quotation"),
        (["--mcp", "python server.py \\"], "no escaped character"),
        (["--workspace", "{tmp}/missing"], "missing does not exist; give an existing folder"),
        (["--workspace", "{tmp}/a-file"], "is a file, not a folder"),
        (["--mcp-trust", "files"], "without an MCP server: give the server too"),
    ],
)
def test_bad_mcp_commands_and_workspaces_are_one_line_and_exit_2(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Hostile probe: these ended as "unexpected ValueError" or a bare OSError that named no option."""
    from ctxwright.cli.main import main

    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    given = [f.format(tmp=tmp_path) for f in flags]
    assert main(["--db", str(tmp_path / "c.db"), "run", *given, "hi"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err and "unexpected" not in err, err
    assert flags[0].lstrip("-") in err  # the option is named


def test_a_bad_mcp_command_from_the_library_is_a_config_error() -> None:
    from ctxwright.recipe import Recipe, backend_defaults

    with pytest.raises(ConfigError, match=r"mcp_servers='srv \"x': no closing quotation"):
        Recipe.resolve({"mcp_servers": ['srv "x']}, None, backend_defaults("openai"))


def test_a_session_whose_workspace_was_removed_says_how_to_go_on(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    db = tmp_path / "c.db"
    with Harness(backend=ScriptedBackend(["ok"]), db=db, workspace=ws) as h:
        h.run("hi")
        sid = h.session_id
    ws.rmdir()
    with pytest.raises(ConfigError, match="is not an existing directory: give --workspace DIR"):
        Harness.resume(sid, backend=ScriptedBackend(["ok"]), db=db)
