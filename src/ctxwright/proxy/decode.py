"""Undoing a recorded body's ``Content-Encoding`` without ever holding more than the cap.

Why a bound on the *decoded* size: a compressed body is small on the wire and may be huge
decoded -- deflate reaches about 1,000:1, brotli and zstd far more -- so a 1.5 MB request
can expand to 1.5 GB, and decoding it in one call (``zlib.decompress``) takes that much
memory before anything can look at it. Here every codec is driven step by step with a limit
on what one step may produce (zlib's ``max_length``, brotli's ``output_buffer_limit``, small
input slices for zstandard, whose streaming object has no output limit), the stages of a
chained encoding (``gzip, br``) are lazy generators passing bounded pieces to each other, and
decoding stops at the first piece past the cap. So memory holds at most the cap plus one
step whatever the ratio, and the time spent is bounded by the cap too: a bomb is recognised
as "over the cap", never expanded to the end.

gzip and deflate are undone with the standard library; br when the ``brotli`` (or
``brotlicffi``) package is importable in a version that can limit its output (1.2 or later);
zstd when ``zstandard`` is importable, its window limited to 8 MB (RFC 9659: an HTTP decoder
need not accept more, and a frame may otherwise ask for a 2 GB window). Another encoding, or
bytes that do not decode, give no body: the recording then keeps size and hash only.
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ctxwright.errors import UndecodableBody

#: the most one decoding step may produce (zlib, brotli), and the slice of input it gets
STEP = 64 * 1024
#: zstandard's streaming object has no output limit: it gets input in slices this small, so
#: one step yields at most ~2 MB (a 3-byte RLE block header expands to 128 KB)
ZSTD_SLICE = 64
#: the largest zstd window accepted (RFC 9659 §3)
ZSTD_MAX_WINDOW = 8 * 1024 * 1024
#: more codings than this in one ``Content-Encoding`` is an attack, not a body (urllib3 stops at 5)
MAX_CODINGS = 4


@dataclass(frozen=True)
class Decoded:
    """A body without its ``Content-Encoding``: ``data``, or ``None`` with the reason --
    ``over_cap`` (the decoded body is larger than the recording cap) or not decodable."""

    data: bytes | None
    over_cap: bool = False


def decode_body(raw: bytes | bytearray, encoding: str | None, cap: int) -> Decoded:
    """``raw`` with its ``Content-Encoding`` undone, if that gives at most ``cap`` bytes."""
    codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip() and c.strip() != "identity"]
    if not codings:
        return Decoded(bytes(raw)) if len(raw) <= cap else Decoded(None, over_cap=True)
    if len(codings) > MAX_CODINGS:
        return Decoded(None)
    pieces: Iterator[bytes | memoryview] = _slices(memoryview(raw), STEP)
    for coding in reversed(codings):  # applied in the order listed, so undone from the last
        stage = _stage(coding)
        if stage is None:
            return Decoded(None)
        pieces = stage(pieces)
    out = bytearray()
    try:
        for piece in pieces:
            if len(out) + len(piece) > cap:
                return Decoded(None, over_cap=True)
            out += piece
    except UndecodableBody:
        return Decoded(None)
    return Decoded(bytes(out))


def _slices(data: memoryview, size: int) -> Iterator[memoryview]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


Stage = Callable[[Iterator[bytes | memoryview]], Iterator[bytes]]


def _stage(coding: str) -> Stage | None:
    if coding in ("gzip", "x-gzip"):
        return _gzip
    if coding == "deflate":
        return _deflate
    if coding == "br":
        return _brotli if _brotli_module() is not None else None
    if coding == "zstd":
        return _zstd if _zstd_module() is not None else None
    return None


def _zlib(pieces: Iterable[bytes | memoryview], wbits: int) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits)
    try:
        for piece in pieces:
            data: bytes | memoryview = piece
            while data and not d.eof:
                out = d.decompress(data, STEP)
                data = d.unconsumed_tail
                if out:
                    yield out
                while len(out) == STEP and not data:  # output may still be pending inside zlib
                    out = d.decompress(b"", STEP)
                    if out:
                        yield out
            if d.eof:
                return  # what follows the end of the stream is not part of it
    except zlib.error as exc:
        raise UndecodableBody(str(exc)) from None
    raise UndecodableBody("the compressed stream ends before its end")


def _gzip(pieces: Iterator[bytes | memoryview]) -> Iterator[bytes]:
    return _zlib(pieces, 16 + zlib.MAX_WBITS)


def _deflate(pieces: Iterator[bytes | memoryview]) -> Iterator[bytes]:
    """HTTP's ``deflate`` is the zlib format (RFC 9110 §8.4.1.2), but some servers send raw
    deflate: the two-byte zlib header tells them apart (compression method 8 and a header
    check that is a multiple of 31), which is what zlib itself checks first."""
    head = b""
    rest: list[bytes | memoryview] = []
    for piece in pieces:
        rest.append(piece)
        head += bytes(piece[: 2 - len(head)])
        if len(head) >= 2:
            break
    is_zlib = len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
    yield from _zlib(_chain(rest, pieces), zlib.MAX_WBITS if is_zlib else -zlib.MAX_WBITS)


def _chain(first: list[bytes | memoryview], then: Iterator[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    yield from first
    yield from then


def _brotli_module() -> Any:
    for name in ("brotli", "brotlicffi"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def _brotli(pieces: Iterator[bytes | memoryview]) -> Iterator[bytes]:
    mod = _brotli_module()
    d = mod.Decompressor()
    try:
        for piece in pieces:
            data = bytes(piece)
            while True:
                # before brotli 1.2 there is no limit: TypeError, and the body is not decoded
                out = d.process(data, output_buffer_limit=STEP)
                data = b""
                if out:
                    yield out
                if d.can_accept_more_data():
                    break
        while not d.is_finished():  # the input is all in: what it still holds comes out
            out = d.process(b"", output_buffer_limit=STEP)
            if not out:
                break
            yield out
        finished = d.is_finished()
    except (mod.error, TypeError) as exc:
        raise UndecodableBody(str(exc)) from None
    if not finished:
        raise UndecodableBody("the brotli stream ends before its end")


def _zstd_module() -> Any:
    try:
        return importlib.import_module("zstandard")
    except ImportError:
        return None


def _zstd(pieces: Iterator[bytes | memoryview]) -> Iterator[bytes]:
    mod = _zstd_module()
    d = mod.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj(write_size=STEP)
    try:
        for piece in pieces:
            view = memoryview(piece)
            for i in range(0, len(view), ZSTD_SLICE):
                if d.eof:
                    return  # one frame, as gzip is one member; what follows is not part of it
                out = d.decompress(view[i : i + ZSTD_SLICE])
                if out:
                    yield out
        eof = d.eof
    except mod.ZstdError as exc:
        raise UndecodableBody(str(exc)) from None
    if not eof:
        raise UndecodableBody("the zstd frame ends before its end")


__all__ = ["Decoded", "decode_body"]
