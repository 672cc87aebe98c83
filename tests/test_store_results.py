"""Offloaded results are stored one file per result id: ids that differ only in characters
a file name cannot hold, or that share their first 120 characters, no longer overwrite each
other, and ``read_result`` pages back each call's own text. Files written under the first
release's names (the v1 fixture) are still found after a resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ctxwright import CompactionConfig, Harness, ScriptedBackend, tool
from ctxwright.backends.scripted import call
from ctxwright.compaction import ContextManager
from ctxwright.compaction.offload import ResultFiles, file_stem, legacy_stem
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter
from ctxwright.store.sessions import Store

FIXTURES = Path(__file__).parent / "fixtures"
V1_SID = "065143ebd198"


@tool
def dump(tag: str) -> str:
    """Print a long report about one tag."""
    return "".join(f"{tag} line {i:04d}\n" for i in range(400))


COLLIDING = [
    ("call/1", "call:1"),  # differ only in characters outside [A-Za-z0-9_.-]
    ("c" * 120 + "-first", "c" * 120 + "-second"),  # share their first 120 characters
]


@pytest.mark.parametrize(("a", "b"), COLLIDING, ids=["unsafe-characters", "long-common-prefix"])
def test_ids_the_old_names_confused_get_their_own_files(tmp_path, a, b):
    assert legacy_stem(a) == legacy_stem(b)  # the first release wrote both to one file
    files = ResultFiles(tmp_path)
    files.save(a, "text of A " * 50)
    files.save(b, "text of B " * 50)
    assert file_stem(a) != file_stem(b)
    assert files.read(a, 0, 9) == ("text of A", 500)
    assert files.read(b, 0, 9) == ("text of B", 500)
    assert all(len(p.name) < 120 for p in tmp_path.iterdir())


@pytest.mark.parametrize(("a", "b"), COLLIDING, ids=["unsafe-characters", "long-common-prefix"])
def test_read_result_returns_each_calls_own_text(tmp_path, a, b):
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("dump", {"tag": "ALPHA"}, a), call("dump", {"tag": "BETA"}, b))),
            Message(
                role="assistant",
                tool_calls=(
                    call("read_result", {"result_id": a, "offset": 0, "limit": 40}, "p1"),
                    call("read_result", {"result_id": b, "offset": 0, "limit": 40}, "p2"),
                ),
            ),
            "done",
        ]
    )
    small = CompactionConfig(result_cap_tokens=100, window_tokens=8192)
    with Harness(
        tools=[dump], backend=backend, db=tmp_path / "a.db", compaction=small, read_result=True, status=False
    ) as h:
        assert h.run("dump both").stop_reason == "final_answer"
        events = h.session.events
    offloaded = [ev for ev in events if isinstance(ev, ToolEvent) and ev.offload is not None]
    assert len(offloaded) == 2 and offloaded[0].offload != offloaded[1].offload
    pages = {ev.message.tool_call_id: ev.message.content or "" for ev in events if isinstance(ev, ToolEvent)}
    assert "ALPHA line 0000" in pages["p1"] and "BETA" not in pages["p1"]
    assert "BETA line 0000" in pages["p2"] and "ALPHA" not in pages["p2"]


def test_results_offloaded_under_the_old_names_are_found_on_resume(tmp_path):
    db = tmp_path / "store_v1.db"
    shutil.copy(FIXTURES / "store_v1.db", db)
    shutil.copytree(FIXTURES / "ctxwright-results", tmp_path / "ctxwright-results")
    legacy = tmp_path / "ctxwright-results" / V1_SID / "c3.txt"
    assert legacy.exists() and not (legacy.parent / f"{file_stem('c3')}.txt").exists()
    session = Session.resume(Store(db), V1_SID)
    manager = ContextManager(CompactionConfig(), TokenCounter(), 8192)
    manager.bind(session)  # the folder next to the database, as a resumed harness binds it
    page = manager.reader.read("c3", 0, 30)
    assert page.startswith("[result c3: characters 0-30 of 5,200") and "value of big" in page
    assert manager.original_text(
        session, next(ev.seq for ev in session.events if getattr(ev, "result_id", None) == "c3")
    )
