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
import errno
import json
import os
import stat
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

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
MIB = 1024 * 1024
#: The longest line a spool holds (one exchange, its two bodies as base64). The writer refuses
#: a longer one (said lost) and a reader skips it, reading it in chunks: a planted or corrupt
#: file of hundreds of MB without a newline must not be read into memory whole.
SPOOL_LINE_MAX = 256 * MIB
_CHUNK = MIB
_HEADER = "spool"
#: digits of the header's ``done`` offset, fixed so it is rewritten in place (:meth:`Spool.mark_done`)
_DONE_WIDTH = 20


def _header(store: str) -> bytes:
    return _line({"type": _HEADER, "store": store, "done": "0" * _DONE_WIDTH})


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


def _line(record: Mapping[str, Any]) -> bytes:
    return (canonical_json(dict(record)) + "\n").encode("utf-8", "surrogatepass")


def _lines(f: BinaryIO) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
    """``(offset, end offset, record)`` for each line from ``f``'s position on; ``None`` for a line that is
    not a record -- cut short by a crash while it was written (the last one, no newline), not
    JSON or not UTF-8 (garbage), or over :data:`SPOOL_LINE_MAX` (read past in chunks).
    Memory: one line of at most :data:`SPOOL_LINE_MAX` bytes."""
    pos = f.tell()
    while True:
        line = f.readline(SPOOL_LINE_MAX + 1)
        if not line:
            return
        at, pos = pos, pos + len(line)
        if not line.endswith(b"\n"):
            if len(line) <= SPOOL_LINE_MAX:
                yield at, pos, None  # the file's last line, cut short
                return
            del line
            while chunk := f.readline(_CHUNK):
                pos += len(chunk)
                if chunk.endswith(b"\n"):
                    break
            yield at, pos, None
            continue
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the parser's depth
            rec = None
        yield at, pos, rec if isinstance(rec, dict) else None


class Spool:
    """A JSON-lines file of records a process could not store yet, held locked while it is
    open (see the module docstring). Made by its writer (:meth:`__init__`, the file is created
    on the first :meth:`add`) or taken over from a writer that is gone (:func:`claim_spools`).

    ``store``: which store the records are for. Two SQLite files in one folder share its
    recovery folder, so the file's first line names its store and an importer passes over the
    files of another one (a file without that line, from an earlier version, is imported).

    ``count``: records in the file. :meth:`records` reads them back in order, one line in
    memory at a time; ``skipped`` counts the lines it could not read. :meth:`keep` (or
    :meth:`keep_rest`) leaves only the ones not imported (a new file renamed over the old one,
    locked before the rename: no other process ever opens it unlocked), removing the file when
    none is left."""

    def __init__(self, folder: Path, prefix: str, store: str = "") -> None:
        self.folder = folder
        self.prefix = prefix
        self.store = store
        self.path: Path | None = None
        self.count = 0
        self.skipped = 0
        self._fd: int | None = None
        self._at = 0
        self._end = 0
        self._done = 0
        self._done_at: int | None = None

    @classmethod
    def _taken(cls, path: Path, fd: int, store: str) -> Spool:
        spool = cls(path.parent, path.name.split("-", 1)[0], store)
        spool.path, spool._fd = path, fd
        spool.count = sum(1 for _ in spool.records())
        return spool

    def _open(self) -> int:
        """Create this process's file, locked, its first line naming the store: in the store's
        folder, else (a read-only folder) in a fresh private temporary one, whose path the
        caller says. What a failed attempt created is removed: on a full disk a file can still
        be created but not written, and each exchange lost would leave an empty file (and a
        temporary folder) behind."""
        name = f"{self.prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        last: OSError | None = None
        for folder in (self.folder, None):
            fd = -1
            made: Path | None = None
            path: Path | None = None
            try:
                if folder is None:
                    where = made = Path(tempfile.mkdtemp(prefix="ctxwright-recovery-"))
                else:
                    where = private_dir(folder)
                with open_private(where / name, append=True) as f:
                    path = where / name
                    fd = os.dup(f.fileno())
                _lock(fd, wait=True)  # a new name: nobody else holds it
                self._write(fd, _header(self.store))
            except OSError as exc:
                last = exc
                if fd >= 0:
                    os.close(fd)
                with contextlib.suppress(OSError):
                    if path is not None:
                        path.unlink()
                    if made is not None:
                        made.rmdir()
                continue
            assert path is not None
            self.path, self._fd = path, fd
            return fd
        assert last is not None
        raise last

    @staticmethod
    def _write(fd: int, line: bytes) -> None:
        """Append ``line`` durably, or leave the file as it was: a write cut short by a full
        disk would otherwise glue the next record to half of this one, losing both."""
        size = os.fstat(fd).st_size
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise

    def add(self, record: Mapping[str, Any]) -> Path:
        """Append one record and make it durable (``fsync``) before returning; its file.
        ``OSError`` when it cannot be kept (a full disk, a record over :data:`SPOOL_LINE_MAX`)."""
        line = _line(record)
        if len(line) > SPOOL_LINE_MAX:
            raise OSError(
                errno.EFBIG,
                f"a record of {len(line) / MIB:,.0f} MB is over the {SPOOL_LINE_MAX // MIB} MB a recovery file's line "
                "holds (a lower --record-cap keeps it under)",
            )
        fd = self._fd if self._fd is not None else self._open()
        self._write(fd, line)
        self.count += 1
        assert self.path is not None
        return self.path

    def _reader(self) -> BinaryIO:
        assert self.path is not None
        return open(os.open(self.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC), "rb")

    def records(self) -> Iterator[dict[str, Any]]:
        """The records in the file, in order, read one at a time; the lines that are not
        records (see :func:`_lines`) are counted in ``skipped``, each once."""
        if self._fd is None or self.path is None:
            return
        self.skipped = 0
        with self._reader() as f:
            self._read_header(f)
            for at, end, rec in _lines(f):
                if at < self._done:
                    continue  # in the store already: an import killed midway noted it
                if rec is None:
                    self.skipped += 1
                elif rec.get("type") != _HEADER:
                    self._at, self._end = at, end
                    yield rec

    def _read_header(self, f: BinaryIO) -> None:
        """The ``done`` offset of the file's first line, and where its digits are."""
        first = f.readline(64 * 1024)
        f.seek(0)
        self._done, self._done_at = 0, None
        with contextlib.suppress(ValueError, RecursionError):
            rec = json.loads(first)
            key = b'"done":"'
            where = first.find(key)
            if isinstance(rec, dict) and rec.get("type") == _HEADER and where >= 0:
                self._done = int(str(rec.get("done")))
                self._done_at = where + len(key)

    def mark_done(self) -> None:
        """Note in the file's first line that the records up to the last one :meth:`records`
        yielded are in the store: a process killed mid-import leaves a file the next one
        resumes after, instead of recording those exchanges twice. The digits are overwritten
        in place (no new disk space: a full disk does not stop it) and ``fsync``-ed, as the
        store's own write is. ``OSError`` when it cannot be written."""
        if self._done_at is None or self.path is None:
            return
        fd = os.open(self.path, os.O_WRONLY | _NOFOLLOW | _CLOEXEC)
        try:
            os.pwrite(fd, b"%0*d" % (_DONE_WIDTH, self._end), self._done_at)
            os.fsync(fd)
        finally:
            os.close(fd)

    def keep(self, records: Sequence[Mapping[str, Any]] | Iterator[Mapping[str, Any]]) -> None:
        """Leave only ``records`` in the file; with none left the file is removed and closed."""
        if self._fd is None or self.path is None:
            return
        fresh = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:8]}")
        fd = -1
        n = 0
        try:
            with open_private(fresh) as f:
                fd = os.dup(f.fileno())
                _lock(fd, wait=True)
                f.write(_header(self.store))
                for rec in records:
                    f.write(_line(rec))
                    n += 1
                f.flush()
                os.fsync(f.fileno())
            if n:
                os.replace(fresh, self.path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(OSError):
                fresh.unlink()
            raise
        if not n:
            fresh.unlink()
            os.close(fd)
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.count = 0
            self.close()
            return
        os.close(self._fd)
        self._fd, self.count = fd, n

    def keep_rest(self) -> None:
        """Leave in the file the record :meth:`records` yielded last and those after it (the
        store failed on it), streamed: never the whole file in memory."""
        if self._fd is None or self.path is None:
            return
        with self._reader() as f:
            f.seek(self._at)
            rest = (rec for rec in self._rest(f))
            self.keep(rest)

    def _rest(self, f: BinaryIO) -> Iterator[dict[str, Any]]:
        for _, _, rec in _lines(f):
            if rec is None:
                self.skipped += 1
            elif rec.get("type") != _HEADER:
                yield rec

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


def _store_of(fd: int) -> str | None:
    """The store named by a spool's first line; ``None`` when it has no such line."""
    with open(os.dup(fd), "rb") as f:
        f.seek(0)
        first = f.readline(64 * 1024)
    with contextlib.suppress(ValueError, RecursionError):
        rec = json.loads(first)
        if isinstance(rec, dict) and rec.get("type") == _HEADER:
            return str(rec.get("store") or "")
    return None


#: how old a half-written copy (:meth:`Spool.keep`) must be before an importer removes it
STALE_COPY_S = 60.0


def _remove_stale_copy(path: Path) -> None:
    """Remove the copy :meth:`Spool.keep` was writing when its process was killed: the
    original is whole (the copy replaces it only once complete), so the copy only takes disk
    space. Only an old one, no longer locked, and never through a symlink: a copy is locked
    an instant after it is created, and a younger one may be in that instant."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or time.time() - st.st_mtime < STALE_COPY_S:
            return
        fd = os.open(path, os.O_RDWR | _NOFOLLOW | _CLOEXEC)
    except OSError:
        return
    try:
        if _lock(fd, wait=False) and os.lstat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()
    except OSError:
        pass
    finally:
        os.close(fd)


def claim_spools(
    folder: Path, prefix: str, store: str = "", problem: Callable[[str], None] | None = None
) -> Iterator[Spool]:
    """The spools of ``prefix`` for ``store`` in ``folder`` whose writers are gone, oldest
    first, each locked by this process until closed (a file another importer took
    meanwhile, or removed once imported, is passed over, and so is another store's file).

    ``problem`` receives one line for each file left alone that the user should look at: not
    a regular file (a symlink is never followed, nor removed), another user's, or not
    readable. The listing is read once: thousands of files cost one stat each."""
    say = problem or (lambda _line: None)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return
    except OSError as exc:
        say(f"cannot list {folder} ({exc.strerror or exc}): its recovery files are not imported; make it readable")
        return
    found: list[tuple[float, str]] = []
    for name in names:
        if name.startswith(f".{prefix}-") and ".jsonl." in name:
            _remove_stale_copy(folder / name)
            continue
        if not (name.startswith(f"{prefix}-") and name.endswith(".jsonl")):
            continue
        try:
            st = os.lstat(folder / name)
        except OSError:
            continue  # imported and removed by another process since the listing
        if not stat.S_ISREG(st.st_mode):
            say(f"{folder / name} is not a regular file (a symlink?): left alone, not followed; remove it")
            continue
        found.append((st.st_mtime, name))
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for _, name in sorted(found):
        path = folder / name
        try:
            fd = os.open(path, os.O_RDWR | _NOFOLLOW | _CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            say(
                f"cannot open {path} ({exc.strerror or exc}): its exchanges are not recorded; "
                "make it readable and writable by this user, or run this on the store as its owner"
            )
            continue
        try:
            if not _lock(fd, wait=False):
                os.close(fd)  # its writer is alive
                continue
            st = os.fstat(fd)
            if st.st_nlink == 0 or os.lstat(path).st_ino != st.st_ino or not stat.S_ISREG(st.st_mode):
                os.close(fd)  # imported (or rewritten) by another process since it was listed
                continue
            if uid is not None and st.st_uid != uid:
                os.close(fd)
                say(
                    f"{path} belongs to another user (uid {st.st_uid}): left alone (a recovery file is written by "
                    "its own user); chown it to import it"
                )
                continue
            owner = _store_of(fd)
            if owner is not None and store and owner != store:
                os.close(fd)  # another store's file, in a folder they share
                continue
            spool = Spool._taken(path, fd, store)
        except OSError as exc:
            os.close(fd)
            say(f"cannot read {path} ({exc.strerror or exc}): its exchanges are not recorded; check the file")
            continue
        yield spool


__all__ = [
    "FOLDER",
    "SPOOL_LINE_MAX",
    "RecoveryLog",
    "Spool",
    "claim_spools",
    "import_pending",
    "pending",
    "recovery_path",
]
