"""``ctxwright proxy --compress``: each tool result in a request body replaced by its compressed
form (``compaction/compress``: a JSON listing as a table, a repeated output as a reference to
the earlier call plus the lines that differ, a log with its runs folded), for any agent.

What it protects:

* **The agent's prefix.** A provider's prompt cache matches bytes, and an agent re-sends its
  whole history on every call. So a tool result is compressed once, the first time the proxy
  sees it, and what went upstream is kept in the store (``proxy_compressed``, migration
  ``m008_proxy_compressed``): every later request that repeats the result sends the same
  bytes -- after a restart, or from another ``--workers`` process or host sharing the store.
  A result is keyed by its text together with every tool result before it in its request
  (a hash chain): that is all its compressed form depends on (the repeat rule refers only to
  results the same request holds), so a reference never names a call the upstream cannot see,
  and the stored form is what the compressors would give again (the store guards against a
  newer build compressing differently mid-session). The scope is the
  ``X-Ctxwright-Session`` header (empty without one): the relay places a request in its
  session only after the answer (``proxy/sessions.py``), so the chain does the placing here.
* **Every other byte.** The body is not re-serialized: each replaced JSON string is spliced
  into the bytes the client sent, so key order, spacing, number spelling and every other
  message stay exactly as sent -- a body that ``json.dumps`` rewrote would differ in places
  the client's own next request does not (escapes, spacing, float spelling), and break the
  cache there. The strings' positions come from the standard library's pure-Python JSON
  scanner with a string hook (:func:`_spanned`); a body nested past its recursion limit is
  relayed as it was.
* **Nothing lost.** When a result is rewritten, its original is kept under the store's folder
  (``ctxwright-originals/<sha256>.txt``); when the rule left bytes out (a folded log), the
  result names it (``full output: PATH``): an agent that reads files can read it whole. A table
  or a reference plus the differing lines holds every byte already (:data:`LOSSLESS_RULES`). A result the rewrite would not shorten goes as it
  was. A body that is not JSON, not UTF-8, over the cap, or in a ``Content-Encoding`` that
  cannot be undone within the cap goes upstream byte for byte, and the line per call says why.
* **A compressed request body** (``Content-Encoding: gzip``, ``br``, ``deflate``, ``zstd``) is
  decoded within the cap, rewritten, and sent plain without its ``Content-Encoding``: the
  providers accept a plain body, and re-compressing would add CPU for a loopback hop.

The rewrite runs on one thread of its own (a large body's scan and the store's lookups must
not hold up the event loop that relays every other client's bytes).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from json import decoder as json_decoder
from json import scanner as json_scanner
from pathlib import Path
from typing import Any

from ctxwright.compaction.compress import Compressed, Earlier, compress_result
from ctxwright.proxy.decode import decode_body
from ctxwright.store.database import is_url
from ctxwright.store.sessions import Store, recovery_dir_for

#: what the line per call says of a result's original, kept on disk
FULL_OUTPUT = "full output: {path}"
#: rules whose form holds every byte of the original: a table parses back to the listing, a
#: reference plus the differing lines rebuilds the repeat from the result it names. Naming the
#: original's file there would only add tokens to every later request; a folded log drops the
#: numbers of the lines it folds, so its file is named.
LOSSLESS_RULES = frozenset({"json_table", "repeat"})
#: where the originals of rewritten results are kept, beside the store
ORIGINALS_FOLDER = "ctxwright-originals"
#: results looked up per statement
KEYS_PER_QUERY = 500


class _Str(str):
    """A JSON string value with where it stood in the body's text (``start`` at its opening
    quote, ``end`` just past its closing one)."""

    start: int
    end: int


def _spanned_decoder() -> json.JSONDecoder:
    """A decoder whose string values are :class:`_Str` with their positions: the standard
    library's pure-Python scanner calls ``parse_string`` for every value (object keys are
    read apart, and stay plain ``str``)."""
    dec = json.JSONDecoder()

    def parse_string(s: str, end: int, strict: bool = True) -> tuple[str, int]:
        value, stop = json_decoder.scanstring(s, end, strict)  # type: ignore[attr-defined]
        out = _Str(value)
        out.start, out.end = end - 1, stop
        return out, stop

    dec.parse_string = parse_string  # type: ignore[attr-defined]
    dec.scan_once = json_scanner.py_make_scanner(dec)  # type: ignore[attr-defined]
    return dec


_DECODER = _spanned_decoder()
_DECODER_LOCK = threading.Lock()  # py_make_scanner's key memo is per scanner, not thread-safe


def _spanned(text: str) -> Any:
    with _DECODER_LOCK:
        return _DECODER.decode(text)


@dataclass(frozen=True)
class ToolResult:
    """One tool result's text in a request body: the call it answers and the string itself."""

    call_id: str
    original: _Str


def tool_results(body: Any, api: str | None) -> list[ToolResult]:
    """The tool results of a request body, in prompt order: OpenAI chat ``role: "tool"``
    messages, Anthropic ``tool_result`` blocks, Responses API ``function_call_output`` items --
    each as a string, or as text parts (``text`` / ``input_text``), one result per part (the
    second and later parts of a call numbered ``id#1``, ``id#2``...)."""
    out: list[ToolResult] = []
    if not isinstance(body, dict):
        return out

    def add(call_id: Any, content: Any, part_types: tuple[str, ...]) -> None:
        cid = call_id if isinstance(call_id, str) else ""
        if isinstance(content, _Str):
            out.append(ToolResult(cid, content))
        elif isinstance(content, list):
            n = 0
            for part in content:
                if isinstance(part, dict) and part.get("type") in part_types and isinstance(part.get("text"), _Str):
                    out.append(ToolResult(cid if n == 0 else f"{cid}#{n}", part["text"]))
                    n += 1

    if api == "openai_responses":
        items = body.get("input")
        for item in items if isinstance(items, list) else ():
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                add(item.get("call_id"), item.get("output"), ("input_text", "output_text", "text"))
        return out
    for message in body.get("messages") or ():
        if not isinstance(message, dict):
            continue
        if api == "anthropic_messages":
            content = message.get("content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    add(block.get("tool_use_id"), block.get("content"), ("text",))
        elif message.get("role") == "tool":
            add(message.get("tool_call_id"), message.get("content"), ("text",))
    return out


@dataclass(frozen=True)
class Sent:
    """What went upstream in place of one result (``text`` ``None``: the result itself)."""

    text: str | None
    rule: str
    original_chars: int
    saved_chars: int


@dataclass
class Rewritten:
    """A request body after :meth:`BodyCompressor.rewrite`.

    ``body``: the bytes to send; ``decoded``: they are the client's body with its
    ``Content-Encoding`` undone (drop the header); ``summary``: what is recorded with the call
    (results seen, rewritten, characters saved, per rule; or why nothing was done)."""

    body: bytes
    decoded: bool = False
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def note(self) -> str:
        return summary_text(self.summary)


def summary_text(summary: dict[str, Any] | None) -> str:
    """The words the line per call adds for a compressed request: ``compressed 3/5 results
    -41,200 chars (62%)``, or why the body went as it was."""
    if not summary:
        return ""
    if summary.get("skipped"):
        return f"not compressed: {summary['skipped']}"
    n, done = int(summary.get("results", 0)), int(summary.get("compressed", 0))
    if not n:
        return ""
    before, saved = int(summary.get("original_chars", 0)), int(summary.get("saved_chars", 0))
    share = f" ({saved / before:.0%})" if before else ""
    return f"compressed {done}/{n} results -{saved:,} chars{share}"


def _chain_step(chain: Any, call_id: str, original_sha: str) -> str:
    chain.update(b"\x00" + call_id.encode("utf-8", "surrogatepass") + b"\x00" + original_sha.encode("ascii"))
    return str(chain.hexdigest())


def originals_dir(target: str | Path) -> Path:
    """Where the originals of rewritten results are kept: beside an SQLite store's file, or
    beside a PostgreSQL store's recovery folder on this machine (``store/sessions.py``)."""
    if is_url(str(target)):
        rec = recovery_dir_for(target)
        return rec.parent / f"{rec.name}-originals"
    return Path(target).parent / ORIGINALS_FOLDER


class BodyCompressor:
    """Rewrites request bodies for ``--compress`` (see the module docstring).

    ``store``: the store, or its target to open on the rewriting thread (a ``--workers``
    process); ``cap``: the largest body read whole and decoded (the proxy's record cap);
    ``warn``: where a store that cannot keep what was sent is said (the bytes are computed all
    the same: the chain key makes them what any other process would compute)."""

    def __init__(self, store: Store | str, *, cap: int, warn: Callable[[str], None] | None = None) -> None:
        self._store = store if isinstance(store, Store) else None
        self._target = store.target if isinstance(store, Store) else store
        self._owns_store = False
        self.originals = originals_dir(self._target)
        self.cap = cap
        self.warn = warn or (lambda _line: None)
        self._warned = False
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxwright-compress")

    # -- the relay's side ----------------------------------------------------------------------
    async def rewrite(self, raw: bytes, *, api: str, encoding: str | None, scope: str | None) -> Rewritten:
        """:meth:`rewrite_sync` on the rewriting thread; a rewrite that fails (a compressor's
        bug) leaves the body as it came, said on the line per call, rather than failing the call."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, lambda: self.rewrite_sync(raw, api, encoding, scope))
        except Exception as exc:
            return Rewritten(raw, summary={"skipped": f"the rewrite failed ({type(exc).__name__}: {exc})"})

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._owns_store and self._store is not None:
            self._store.close()

    # -- the rewriting thread --------------------------------------------------------------------
    def rewrite_sync(self, raw: bytes, api: str, encoding: str | None, scope: str | None) -> Rewritten:
        """The body with each tool result compressed, or ``raw`` itself and why not."""
        decoded = decode_body(raw, encoding, self.cap)
        if decoded.data is None:
            why = "the decoded body is over the cap" if decoded.over_cap else f"Content-Encoding {encoding} not decoded"
            return Rewritten(raw, summary={"skipped": why})
        plain = decoded.data
        was_encoded = any(c.strip().lower() not in ("", "identity") for c in (encoding or "").split(","))
        try:
            text = plain.decode("utf-8")
            body = _spanned(text)
        except UnicodeDecodeError:
            return Rewritten(raw, summary={"skipped": "the body is not UTF-8"})
        except (ValueError, RecursionError):
            return Rewritten(raw, summary={"skipped": "the body is not JSON (or nested too deep)"})
        results = tool_results(body, api)
        if not results:
            return Rewritten(plain, decoded=was_encoded, summary={"results": 0})
        sent = self._sent(results, scope or "")
        pieces: list[str] = []
        at = 0
        summary: dict[str, Any] = {"results": len(results), "compressed": 0, "original_chars": 0, "saved_chars": 0}
        rules: dict[str, int] = {}
        for result, s in zip(results, sent, strict=True):
            summary["original_chars"] += s.original_chars
            if s.text is None:
                continue
            pieces.append(text[at : result.original.start])
            pieces.append(_json_string(s.text))
            at = result.original.end
            summary["compressed"] += 1
            summary["saved_chars"] += s.saved_chars
            rules[s.rule] = rules.get(s.rule, 0) + s.saved_chars
        summary["rules"] = rules
        if not pieces:
            return Rewritten(plain, decoded=was_encoded, summary=summary)
        pieces.append(text[at:])
        return Rewritten("".join(pieces).encode("utf-8"), decoded=was_encoded, summary=summary)

    def _sent(self, results: list[ToolResult], scope: str) -> list[Sent]:
        """What goes upstream for each result: the stored form when one was sent before, else
        compressed now (in prompt order, each seeing the results before it) and stored."""
        chain = hashlib.sha256(b"ctxwright proxy --compress")
        keys: list[str] = []
        shas: list[str] = []
        for r in results:
            sha = hashlib.sha256(r.original.encode("utf-8", "surrogatepass")).hexdigest()
            shas.append(sha)
            keys.append(_chain_step(chain, r.call_id, sha))
        known = self._lookup(scope, keys)
        earlier = Earlier()
        out: list[Sent] = []
        new: list[tuple[str, ToolResult, str, Sent]] = []
        before: set[str] = set()
        for r, key, sha in zip(results, keys, shas, strict=True):
            s = known.get(key)
            if s is None:
                s = self._compress(r, sha, earlier, name_original=sha not in before)
                new.append((key, r, sha, s))
            before.add(sha)
            earlier.add(r.call_id, str(r.original))
            out.append(s)
        if new:
            out = self._keep(scope, new, out, keys)
        return out

    def _compress(self, r: ToolResult, sha: str, earlier: Earlier, *, name_original: bool) -> Sent:
        """One result's form, its original kept on disk; named in it only when the rule leaves
        bytes out (:data:`LOSSLESS_RULES`) and no earlier result of the request has the same
        original (that one is whole, or names the same file)."""
        original = str(r.original)
        c: Compressed = compress_result(original, call_id=r.call_id, earlier=earlier)
        if c.text == original or c.rule == "none":
            return Sent(None, "none", len(original), 0)
        text = c.text
        path = self._offload(original, sha)
        if path is not None and name_original and c.rule not in LOSSLESS_RULES:
            text = f"{text}\n[{FULL_OUTPUT.format(path=path)}]"
        if len(text) >= len(original):  # the note would cost more than the rule saved
            return Sent(None, "none", len(original), 0)
        return Sent(text, c.rule, len(original), len(original) - len(text))

    def _offload(self, original: str, sha: str) -> Path | None:
        """The original, kept once under the store's folder (named by its hash); ``None`` when
        it cannot be written (said once): the result is then sent without the note."""
        path = self.originals / f"{sha}.txt"
        if path.exists():
            return path
        try:
            self.originals.mkdir(parents=True, exist_ok=True)
            tmp = self.originals / f".{sha}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_bytes(original.encode("utf-8", "surrogatepass"))
            os.replace(tmp, path)  # whole or not at all: another process may read it the moment after
        except OSError as exc:
            self._say(f"could not keep an original in {self.originals} ({exc.strerror or exc})")
            return None
        return path

    # -- the store ---------------------------------------------------------------------------------
    def _open(self) -> Store | None:
        if self._store is None:
            try:
                self._store = Store(self._target)
                self._owns_store = True
            except Exception as exc:  # the store away: computed all the same, said once
                self._say(f"could not open the store ({exc})")
                return None
        return self._store

    def _say(self, what: str) -> None:
        """One line, the first time: a store that fails fails for every request."""
        if not self._warned:
            self._warned = True
            self.warn(f"ctxwright proxy --compress: {what}; results are compressed all the same")

    def _lookup(self, scope: str, keys: list[str]) -> dict[str, Sent]:
        store = self._open()
        if store is None:
            return {}
        found: dict[str, Sent] = {}
        try:
            for part in _chunks(keys, KEYS_PER_QUERY):
                rows = store.db.fetchall(
                    "SELECT chain_sha, text, rule, original_chars, saved_chars FROM proxy_compressed "
                    f"WHERE scope=? AND chain_sha IN ({', '.join('?' * len(part))})",
                    [scope, *part],
                )
                for row in rows:
                    found[str(row["chain_sha"])] = Sent(
                        None if row["text"] is None else str(row["text"]),
                        str(row["rule"]),
                        int(row["original_chars"]),
                        int(row["saved_chars"]),
                    )
        except Exception as exc:
            self._say(f"could not read what was sent before ({exc})")
        return found

    def _keep(
        self, scope: str, new: list[tuple[str, ToolResult, str, Sent]], out: list[Sent], keys: list[str]
    ) -> list[Sent]:
        """Store the new forms; the first writer wins (``DO NOTHING``), and what a concurrent
        process stored first is what goes upstream from here too."""
        store = self._open()
        if store is None:
            return out
        cols = ("scope", "chain_sha", "call_id", "original_sha256", "text", "rule", "original_chars", "saved_chars")
        sql = (
            f"INSERT INTO proxy_compressed ({', '.join(cols)}, created_at) VALUES ({', '.join('?' * len(cols))}, ?) "
            "ON CONFLICT (scope, chain_sha) DO NOTHING"
        )
        try:
            now = time.time()
            for key, r, sha, s in new:
                store.db.execute(
                    sql, (scope, key, r.call_id, sha, s.text, s.rule, s.original_chars, s.saved_chars, now)
                )
            stored = self._lookup(scope, [k for k, *_ in new])
        except Exception as exc:
            self._say(f"could not keep what was sent ({exc})")
            return out
        return [stored.get(k, s) for k, s in zip(keys, out, strict=True)]


def _json_string(text: str) -> str:
    """``text`` as a JSON string, UTF-8 as the client's body is; with ``\\u`` escapes when it
    holds a lone surrogate (a ``\\ud800`` the client escaped), which UTF-8 cannot carry."""
    out = json.dumps(text, ensure_ascii=False)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(text)
    return out


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
