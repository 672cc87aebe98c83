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

Spools (:class:`Spool`): the same private JSON-lines files for writers that have no session
to resume -- ``ctxwright proxy`` and the framework recorder, whose exchanges are placed in a
session only when they are stored. One file per process (``<prefix>-<pid>-<random>.jsonl``),
held under an exclusive ``flock`` for as long as its process writes it: the kernel releases
the lock when the process ends, however it ends (``kill -9`` included), so the next process
that opens the store takes over exactly the files no live writer holds
(:func:`claim_spools`) and imports them, and two processes importing at once never take the
same file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
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


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _lock(fd: int, *, wait: bool) -> bool:
    """An exclusive ``flock`` on ``fd``; ``False`` when another process holds it (and
    ``wait`` is off). Where there is no ``fcntl`` (Windows) every file counts as free."""
    try:
        import fcntl
    except ImportError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


class Spool:
    """A JSON-lines file of records a process could not store yet, held locked while it is
    open (see the module docstring). Made by its writer (:meth:`__init__`, the file is created
    on the first :meth:`add`) or taken over from a writer that is gone (:func:`claim_spools`).

    ``count``: records in the file. :meth:`records` reads them back in order; :meth:`keep`
    leaves only the ones not imported (a new file renamed over the old one, locked before the
    rename: no other process ever opens it unlocked), removing the file when none is left."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.folder = folder
        self.prefix = prefix
        self.path: Path | None = None
        self.count = 0
        self._fd: int | None = None

    @classmethod
    def _taken(cls, path: Path, fd: int, count: int) -> Spool:
        spool = cls(path.parent, path.name.split("-", 1)[0])
        spool.path, spool._fd, spool.count = path, fd, count
        return spool

    def _open(self) -> int:
        """Create this process's file, locked: in the store's folder, else (a read-only
        folder) in a fresh private temporary one, whose path the caller says."""
        name = f"{self.prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        last: OSError | None = None
        for folder in (self.folder, None):
            try:
                where = (
                    private_dir(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="ctxwright-recovery-"))
                )
                path = where / name
                with open_private(path, append=True) as f:
                    fd = os.dup(f.fileno())
                _lock(fd, wait=True)  # a new name: nobody else holds it
            except OSError as exc:
                last = exc
                continue
            self.path, self._fd = path, fd
            return fd
        assert last is not None
        raise last

    def add(self, record: Mapping[str, Any]) -> Path:
        """Append one record and make it durable (``fsync``) before returning; its file."""
        fd = self._fd if self._fd is not None else self._open()
        line = (canonical_json(dict(record)) + "\n").encode("utf-8", "surrogatepass")
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        self.count += 1
        assert self.path is not None
        return self.path

    def records(self) -> list[dict[str, Any]]:
        """The records in the file, in order (a last line cut short by a crash is left out)."""
        if self._fd is None or self.path is None:
            return []
        out: list[dict[str, Any]] = []
        with open(os.open(self.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC), "rb") as f:
            for line in f:
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if isinstance(rec, dict):
                        out.append(rec)
        return out

    def keep(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Leave only ``records`` in the file; with none left the file is removed and closed."""
        if self._fd is None or self.path is None:
            return
        if not records:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.count = 0
            self.close()
            return
        fresh = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}")
        with open_private(fresh) as f:
            fd = os.dup(f.fileno())
            _lock(fd, wait=True)
            for rec in records:
                f.write((canonical_json(dict(rec)) + "\n").encode("utf-8", "surrogatepass"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(fresh, self.path)
        os.close(self._fd)
        self._fd, self.count = fd, len(records)

    def close(self) -> None:
        """Stop writing: the lock is released, the file (if any records) stays for the next
        process that opens the store."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self.count == 0:
            self.path = None

    def how_to_import(self, what: str) -> str:
        """Where the records are and what imports them (``what``: the command that does)."""
        if self.path is None:
            return ""
        if self.path.parent == self.folder:
            return f"kept in {self.path}; the next {what} on this store imports it"
        return f"kept in {self.path}; move it to {self.folder}/ and the next {what} on this store imports it"


def claim_spools(folder: Path, prefix: str) -> Iterator[Spool]:
    """The spools of ``prefix`` in ``folder`` whose writers are gone, oldest first, each
    locked by this process until closed (a file another importer took meanwhile, or removed
    once imported, is passed over)."""
    try:
        paths = sorted(folder.glob(f"{prefix}-*.jsonl"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR | _NOFOLLOW | _CLOEXEC)
        except OSError:
            continue
        try:
            if not _lock(fd, wait=False):
                os.close(fd)  # its writer is alive
                continue
            st = os.fstat(fd)
            if st.st_nlink == 0 or path.stat().st_ino != st.st_ino:
                os.close(fd)  # imported (or rewritten) by another process since it was listed
                continue
        except OSError:
            os.close(fd)
            continue
        spool = Spool._taken(path, fd, 0)
        spool.count = len(spool.records())
        yield spool


__all__ = [
    "FOLDER",
    "RecoveryLog",
    "Spool",
    "claim_spools",
    "import_pending",
    "pending",
    "recovery_path",
]
