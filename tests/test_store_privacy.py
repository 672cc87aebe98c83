"""What the agent read stays its owner's: the database (and its -wal/-shm), the offloaded
results and the folders made for them are created 0600/0700 whatever the umask, and a run
without a database offloads to a fresh private temporary folder, never to a fixed path under
/tmp where another user could have planted a symlink."""

from __future__ import annotations

import gc
import os
import stat
import tempfile
from pathlib import Path

import pytest

from ctxwright import CompactionConfig, Harness, ScriptedBackend, tool
from ctxwright.backends.scripted import call
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message
from ctxwright.store.private import open_private
from ctxwright.store.sessions import Store


@tool
def dump(tag: str) -> str:
    """Print a long report about one tag."""
    return "".join(f"{tag} secret line {i:04d}\n" for i in range(400))


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.lstat().st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o002], ids=["umask-000", "umask-022", "umask-002"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _offloading_run(db: Path | Store | None) -> list[ToolEvent]:
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("dump", {"tag": "A"}, "c1"),)),
            Message(role="assistant", tool_calls=(call("read_result", {"result_id": "c1", "limit": 30}, "p1"),)),
            "done",
        ]
    )
    cfg = CompactionConfig(result_cap_tokens=100, window_tokens=8192)
    with Harness(tools=[dump], backend=backend, db=db, compaction=cfg, read_result=True, status=False) as h:
        assert h.run("dump it").stop_reason == "final_answer"
        events = [ev for ev in h.session.events if isinstance(ev, ToolEvent)]
    assert events[0].offload is not None and "A secret line 0000" in (events[1].message.content or "")
    return events


def test_database_and_offloaded_results_are_private_whatever_the_umask(tmp_path, umask):
    db = tmp_path / "made" / "here" / "agent.db"
    store = Store(db)
    try:
        events = _offloading_run(store)
        side = [Path(f"{db}{s}") for s in ("", "-wal", "-shm")]  # -wal/-shm exist while it is open
        assert {p.name: oct(_mode(p)) for p in side} == {p.name: "0o600" for p in side}
    finally:
        store.close()
    for folder in (tmp_path / "made", tmp_path / "made" / "here"):
        assert _mode(folder) == 0o700, folder
    offload = events[0].offload
    assert offload is not None
    path = Path(offload.path)
    assert _mode(path) == 0o600 and _mode(path.with_suffix("").with_suffix(".idx.json")) == 0o600
    assert _mode(path.parent) == 0o700 and _mode(path.parent.parent) == 0o700  # <session>/ and ctxwright-results/


def test_an_existing_folder_keeps_its_mode(tmp_path):
    tmp_path.chmod(0o755)
    Store(tmp_path / "agent.db").close()
    assert _mode(tmp_path) == 0o755  # the user's folder: not ours to change
    assert _mode(tmp_path / "agent.db") == 0o600


def test_a_run_without_a_database_ignores_a_symlink_planted_at_the_old_temp_path(tmp_path, monkeypatch, umask):
    shared_tmp = tmp_path / "tmp"
    shared_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared_tmp))  # this test's own /tmp
    target = tmp_path / "attacker"
    target.mkdir()
    (shared_tmp / "ctxwright-results").symlink_to(target)  # where the first release wrote
    events = _offloading_run(None)
    assert list(target.iterdir()) == []  # nothing followed the planted link
    offload = events[0].offload
    assert offload is not None
    folder = Path(offload.path).parent
    assert folder.parent == shared_tmp and folder.name.startswith("ctxwright-results-")  # tempfile.mkdtemp
    assert _mode(folder) == 0o700 and _mode(Path(offload.path)) == 0o600
    del events
    gc.collect()  # the session's files object is gone: its private temporary folder with it
    assert not folder.exists()


def test_private_files_refuse_a_planted_symlink(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "result.txt"
    link.symlink_to(victim)
    with pytest.raises(OSError):
        open_private(link)
    assert victim.read_text() == "keep me"
