"""A session stored by the release before the recipe and the components (commit d253c0e)
resumes under this code: the same prefix bytes, the options it recorded, a follow-up request
that only appends to the last one it sent, and its record migrated to version 2.

``tests/fixtures/harness_r1.db`` was written by that release with the script in
``tests/fixtures/README.md``; it is frozen: do not regenerate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.fakeserver import FakeOpenAIServer as F

from ctxwright import Harness, tool
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.store.sessions import Store

FIXTURES = Path(__file__).parent / "fixtures"
EXPECT: dict[str, Any] = json.loads((FIXTURES / "harness_r1.json").read_text())


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return ("value of " + key + " ") * 3


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "harness_r1.db"
    shutil.copy(FIXTURES / "harness_r1.db", db)
    return db


def _appends(old: list[Any], new: list[Any]) -> bool:
    return new[: len(old)] == old


def test_the_fixture_holds_version_1_records(tmp_path: Path) -> None:
    store = Store(_copy(tmp_path))
    for exp in EXPECT.values():
        assert "version" not in store.get_session(exp["id"]).meta["harness"]
    store.close()


def test_a_scripted_session_of_the_last_release_resumes_as_it_was_started(tmp_path: Path) -> None:
    exp = EXPECT["a"]
    db = _copy(tmp_path)
    backend = ScriptedBackend(["still value of a"], model="m-a")
    with Harness.resume(exp["id"], [lookup], backend=backend, db=db) as h:
        assert h.session.prefix.sha256 == exp["prefix_sha256"]
        assert list(h.tools.names()) == exp["tools"]  # the skill tools too: the frozen catalog, folder gone
        c = h.agent.config
        assert (c.max_tokens, c.max_iterations, c.max_tool_rounds, c.tool_timeout_s) == (
            exp["max_tokens"],
            exp["max_iterations"],
            exp["max_tool_rounds"],
            exp["tool_timeout"],
        )
        assert h.agent.status is not None and h.agent.status.config.mode == exp["status_mode"]
        assert h.agent.status.config.alpha == exp["alpha"]
        comp = c.compaction
        assert comp is not None and (comp.result_cap_tokens, comp.keep_recent_results) == (
            exp["result_cap_tokens"],
            exp["keep_recent_results"],
        )
        assert h.defence.level == exp["defence"] and h.gate is not None
        assert h.skills_catalog == "prefix" and h.todo is not None
        assert h.run("and again?").final_answer == "still value of a"
        record = h.session.meta["harness"]
    sent = [m.to_wire() for m in backend.requests[0].messages]
    assert _appends(exp["last_request"], sent)  # the follow-up only appends (status: append mode)
    assert record["version"] == 2 and record["todo"]["enabled"] is True
    assert Store(db).get_session(exp["id"]).meta["harness"]["version"] == 2  # stored migrated


def test_a_served_session_of_the_last_release_resumes_with_its_deferred_tools(tmp_path: Path, monkeypatch: Any) -> None:
    exp = EXPECT["b"]
    db = _copy(tmp_path)
    monkeypatch.setenv("MY_KEY", "sk-again")
    with F([F.reply_text("b again")]) as srv:
        with Harness.resume(exp["id"], [lookup], db=db, base_url=srv.url) as h:
            assert h.session.prefix.sha256 == exp["prefix_sha256"]
            assert [t.name for t in h.tools.specs()] == exp["tools"]  # lookup still deferred
            assert h.deferred is not None and h.agent.config.max_tokens == exp["max_tokens"]
            assert h.run("and b?").final_answer == "b again"
        req = srv.recorded[0]
    assert req.json["model"] == "fake" and req.headers["authorization"] == "Bearer sk-again"  # api_key_env kept
    assert _appends(exp["last_request"], req.json["messages"])
