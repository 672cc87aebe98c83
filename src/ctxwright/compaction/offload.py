"""Full tool results on disk, paged back by character offset.

Why a file per result with a small index: a 50 MB output must be held in memory once (the
string the tool returned) -- it is written in 1 MB slices, each encoded on its own, and
the byte position of every slice start is recorded, so reading a page later seeks
straight to it instead of decoding the whole file. Nothing offloaded is ever lost: the
preview in the context says how to read the rest (restorable compression).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SLICE = 1 << 20  # characters per written slice (and index entry)
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Offloaded:
    result_id: str
    path: str
    chars: int
    bytes: int


class ResultFiles:
    """The offloaded results of one session, in one folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _paths(self, result_id: str) -> tuple[Path, Path]:
        name = _SAFE.sub("_", result_id)[:120] or "result"
        return self.folder / f"{name}.txt", self.folder / f"{name}.idx.json"

    def save(self, result_id: str, text: str) -> Offloaded:
        return self.save_pieces(result_id, (text[start : start + SLICE] for start in range(0, len(text), SLICE)))

    def save_pieces(self, result_id: str, pieces: Iterable[str]) -> Offloaded:
        """Save a text that arrives in pieces of any length (a large bytes result decoded a
        slice at a time, ``budget.py``): the file is the same as :meth:`save` of the joined
        text, and the whole text is never held."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path, idx_path = self._paths(result_id)
        offsets: list[int] = []
        pos = chars = 0
        pending = ""
        with open(path, "wb") as f:

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
        idx_path.write_text(json.dumps({"chars": chars, "bytes": pos, "slice": SLICE, "offsets": offsets}))
        return Offloaded(result_id, str(path), chars, pos)

    def discard(self, result_id: str) -> None:
        """Remove a saved result that turned out not to need offloading."""
        for path in self._paths(result_id):
            path.unlink(missing_ok=True)

    def exists(self, result_id: str) -> bool:
        return self._paths(result_id)[1].exists()

    def read(self, result_id: str, offset: int, limit: int) -> tuple[str, int]:
        """``limit`` characters from ``offset``, and the total length in characters."""
        path, idx_path = self._paths(result_id)
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
