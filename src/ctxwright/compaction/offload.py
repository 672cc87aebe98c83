"""Full tool results on disk, paged back by character offset.

Why a file per result with a small index: a 50 MB output must be held in memory once (the
string the tool returned) -- it is written in 1 MB slices, each encoded on its own, and
the byte position of every slice start is recorded, so reading a page later seeks
straight to it instead of decoding the whole file. Nothing offloaded is ever lost: the
preview in the context says how to read the rest (restorable compression).

File names: a result id is a provider's tool-call id, any string. A name made only of its
characters allowed in file names, cut at 120 (the first release's rule), let ``call/1``
and ``call:1`` -- or two ids sharing their first 120 characters -- write the same file, and
``read_result`` then returned the other call's text. A name is now a readable prefix of
the id plus a hash of the *whole* id (:func:`file_stem`), so two ids never share a file;
each index also records the id it belongs to. Results saved under the old names
(``tests/fixtures/ctxwright-results/065143ebd198/c3.txt``) are still found.

Privacy (``store/private.py``): the files are ``0600`` and the folders made for them ``0700``.
Without a database (``ResultFiles(None)``) the folder is a fresh private temporary one
(``tempfile.mkdtemp``), made on the first save and removed when the session's files object
is gone: a fixed path under ``/tmp`` could be a symlink another local user planted there.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ctxwright.store.private import open_private, private_dir

SLICE = 1 << 20  # characters per written slice (and index entry)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
#: characters of the id kept readable in a file name (the hash makes it unique)
STEM_PREFIX = 64


@dataclass(frozen=True)
class Offloaded:
    result_id: str
    path: str
    chars: int
    bytes: int


def file_stem(result_id: str) -> str:
    """The file name (without extension) of a result: ``<safe prefix>-<16 hex of sha256(id)>``."""
    digest = hashlib.sha256(result_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{_SAFE.sub('_', result_id)[:STEM_PREFIX] or 'result'}-{digest}"


def text_sha256(text: str) -> str:
    """A result's SHA-256, of its UTF-8, hashed in 1 MB slices so a huge result is never
    encoded whole a second time (the budget layer's repeats and the compressors' share it)."""
    h = hashlib.sha256()
    for start in range(0, len(text), SLICE):
        h.update(text[start : start + SLICE].encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def legacy_stem(result_id: str) -> str:
    """The name the first release gave a result (not unique; read-only fallback)."""
    return _SAFE.sub("_", result_id)[:120] or "result"


class ResultFiles:
    """The offloaded results of one session, in one folder (``None``: a private temporary
    folder, made on the first save)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._cleanup: weakref.finalize[[str, bool], ResultFiles] | None = None

    def _folder(self) -> Path:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="ctxwright-results-"))  # 0700, a new name
            self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        return private_dir(self.folder)

    def _paths(self, stem: str) -> tuple[Path, Path]:
        assert self.folder is not None
        return self.folder / f"{stem}.txt", self.folder / f"{stem}.idx.json"

    def _find(self, result_id: str) -> tuple[Path, Path] | None:
        """The files of ``result_id``: its own name, else the first release's name."""
        if self.folder is None:
            return None
        path, idx = self._paths(file_stem(result_id))
        if idx.exists():
            return path, idx
        path, idx = self._paths(legacy_stem(result_id))
        if idx.exists():
            try:
                owner = json.loads(idx.read_text()).get("result_id")
            except (OSError, ValueError):
                return None
            if owner in (None, result_id):  # the first release recorded no id
                return path, idx
        return None

    def save(self, result_id: str, text: str) -> Offloaded:
        return self.save_pieces(result_id, (text[start : start + SLICE] for start in range(0, len(text), SLICE)))

    def save_pieces(self, result_id: str, pieces: Iterable[str]) -> Offloaded:
        """Save a text that arrives in pieces of any length (a large bytes result decoded a
        slice at a time, ``budget.py``): the file is the same as :meth:`save` of the joined
        text, and the whole text is never held."""
        folder = self._folder()
        path, idx_path = self._paths(file_stem(result_id))
        assert path.parent == folder
        offsets: list[int] = []
        pos = chars = 0
        pending = ""
        with open_private(path) as f:

            def write(chunk: str) -> None:
                nonlocal pos
                offsets.append(pos)
                data = chunk.encode("utf-8", "surrogatepass")
                f.write(data)
                pos += len(data)

            for piece in pieces:
                chars += len(piece)
                pending += piece
                while len(pending) >= SLICE:  # every indexed slice but the last is SLICE characters
                    write(pending[:SLICE])
                    pending = pending[SLICE:]
            if pending:
                write(pending)
        index = {"result_id": result_id, "chars": chars, "bytes": pos, "slice": SLICE, "offsets": offsets}
        with open_private(idx_path) as f:
            f.write(json.dumps(index).encode("utf-8"))
        return Offloaded(result_id, str(path), chars, pos)

    def discard(self, result_id: str) -> None:
        """Remove a saved result that turned out not to need offloading."""
        if self.folder is None:
            return
        for path in self._paths(file_stem(result_id)):
            path.unlink(missing_ok=True)

    def exists(self, result_id: str) -> bool:
        return self._find(result_id) is not None

    def read(self, result_id: str, offset: int, limit: int) -> tuple[str, int]:
        """``limit`` characters from ``offset``, and the total length in characters."""
        found = self._find(result_id)
        if found is None:
            raise FileNotFoundError(f"no offloaded result {result_id!r} in {self.folder}")
        path, idx_path = found
        idx = json.loads(idx_path.read_text())
        total = idx["chars"]
        offset = max(0, min(offset, total))
        end = min(total, offset + max(0, limit))
        out = []
        with open(path, "rb") as f:
            k = offset // idx["slice"]
            while offset < end and k < len(idx["offsets"]):
                f.seek(idx["offsets"][k])
                nxt = idx["offsets"][k + 1] if k + 1 < len(idx["offsets"]) else idx["bytes"]
                piece = f.read(nxt - idx["offsets"][k]).decode("utf-8", "surrogatepass")
                base = k * idx["slice"]
                out.append(piece[offset - base : end - base])
                offset = min(end, base + len(piece))
                k += 1
        return "".join(out), total
