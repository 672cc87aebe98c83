"""Recovery files: events the database refused, kept until the session is resumed.

Why: a model reply has been paid for (and a tool may have changed something) by the time it
is stored. When the store cannot take it -- another process held the write lock longer than
ctxwright waits, the disk is full, the file turned read-only -- dropping it loses work that
cannot be replayed. So the event (and the model call's record) goes to a recovery file
instead, one JSON object per line, private (``store/private.py``: 0600 in a 0700 folder) since
it holds what the agent read. Once one event of a session went there, every later one does
too: the store must never hold event ``n + 1`` without event ``n``.

Where: ``ctxwright-recovery/<session id>.jsonl`` next to the database (a PostgreSQL store has
no file to be next to: its recovery files go under the user's data folder, one folder per
server and database, ``Store.recovery_dir``); if that cannot be
written either (a read-only folder), a fresh private temporary folder, whose path the error
prints. Resuming the session (:func:`import_pending`, called by the harness once it holds
the session's lease) appends the file's events after the stored ones, in order, and its
call records, then removes the file.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwright.core.events import Event, event_from_row
from ctxwright.core.messages import canonical_json
from ctxwright.core.records import CallRecord
from ctxwright.store.private import open_private, private_dir

if TYPE_CHECKING:
    from ctxwright.store.sessions import Store

FOLDER = "ctxwright-recovery"


def recovery_path(folder: Path, session_id: str) -> Path:
    """Where a session's recovery file lives in the store's recovery folder
    (``Store.recovery_dir``) when that folder is writable."""
    return folder / f"{session_id}.jsonl"


class RecoveryLog:
    """The recovery file of one session, chosen on the first write."""

    def __init__(self, folder: Path, session_id: str) -> None:
        self.session_id = session_id
        self.standard = recovery_path(folder, session_id)
        self.path: Path | None = None

    def _write(self, record: Mapping[str, Any]) -> Path:
        line = (canonical_json(dict(record)) + "\n").encode("utf-8", "surrogatepass")
        candidates = [self.path] if self.path is not None else [self.standard, None]
        last: OSError | None = None
        for path in candidates:
            try:
                if path is None:  # a fresh private folder (0700): nothing planted can be followed
                    path = Path(tempfile.mkdtemp(prefix="ctxwright-recovery-")) / f"{self.session_id}.jsonl"
                private_dir(path.parent)
                with open_private(path, append=True) as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                last = exc
                continue
            self.path = path
            return path
        assert last is not None
        raise last

    def save_event(self, session_id: str, event: Event) -> Path:
        return self._write(
            {
                "type": "event",
                "session_id": session_id,
                "seq": event.seq,
                "kind": event.kind,
                "created_at": event.created_at,
                "payload": event.to_payload(),
            }
        )

    def save_call(self, record: CallRecord) -> Path:
        row = record.to_dict()
        del row["session_id"], row["call_index"]
        return self._write(
            {"type": "call", "session_id": record.session_id, "call_index": record.call_index, "row": row}
        )

    def how_to_import(self) -> str:
        """The sentence telling the user what resuming does with the file."""
        if self.path is None:
            return ""
        if self.path == self.standard:
            return f'saved in {self.path}; `ctxwright run --resume {self.session_id} "..."` imports it'
        return (
            f"saved in {self.path}; move it to {self.standard} and `ctxwright run --resume {self.session_id} "
            '"..."` imports it'
        )


def pending(folder: Path, session_id: str) -> Path | None:
    p = recovery_path(folder, session_id)
    return p if p.exists() else None


def import_pending(store: Store, session_id: str) -> int:
    """Append the session's recovered events after its stored ones (and store its recovered
    call records); returns how many events were imported. The file is removed when all of
    it is in the store, else renamed ``*.unimported`` (events that do not follow the stored
    ones) and kept."""
    path = pending(store.recovery_dir, session_id)
    if path is None:
        return 0
    events: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    with path.open("r", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash while it was written
            if rec.get("session_id") != session_id:
                continue
            (events if rec.get("type") == "event" else calls).append(rec)
    stored = len(store.events(session_id))
    imported = 0
    left = False
    for rec in sorted(events, key=lambda r: int(r["seq"])):
        seq = int(rec["seq"])
        if seq < stored:
            continue  # already stored (the write may have succeeded after all)
        if seq != stored:
            left = True
            break
        ev = event_from_row(seq, rec["kind"], float(rec["created_at"]), rec["payload"])
        store.append_event(session_id, ev)
        stored += 1
        imported += 1
    have = {c.call_index for c in store.calls(session_id)}
    for rec in calls:
        if rec["call_index"] not in have:
            row = {**rec["row"], "session_id": session_id, "call_index": int(rec["call_index"])}
            store.record_call(CallRecord.from_dict(row))
    if left:
        path.rename(path.with_name(path.name + ".unimported"))
    else:
        path.unlink()
    return imported


__all__ = ["FOLDER", "RecoveryLog", "import_pending", "pending", "recovery_path"]
