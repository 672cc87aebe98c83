"""``ctxwright.lock``: the frozen prefix of an agent's requests, one line per segment, checked in CI.

Why a file: a prompt change that re-writes the cache on every call is a one-line diff nobody
prices (a per-session URL in a tool description, a timestamp in the system prompt, tools
sorted differently). Committed next to the prompt, the lock makes that cost part of the diff
a reviewer reads -- each system-prompt section and each tool schema is one line with its
tokens and hash, in the order the provider caches them (``ci/segments.py``), so a changed
line re-writes itself *and every line below it* -- and ``ctxwright lock --check`` fails the
build when the prefix changed and the lock was not regenerated.

**Which prefix.** A source (a request log or golden trace, a stored Harness session, a proxy
session) may hold several prefixes: a subagent with its own prompt, a second task. The lock
holds one: the prefix of the first request of the first conversation, the one every call of
the agent's main loop repeats. The others are counted and reported, not locked: a prefix that
changes *within* a run is a regression of the run, which the gate's append-only check names;
locking each of them would make the lock churn with every task a trace happens to contain.

**Format.** TOML, read back with ``tomllib``, written only by :func:`render_lock`::

    # ctxwright.lock -- ... how to regenerate it ...
    version = 2
    provider = "openai"
    model = "gpt-4.1"
    order = "system, tools"
    tokenizer = "estimate"
    tokens = 1234
    segments = [
      { kind = "system", name = "system § '# Rules'", tokens = 120, sha256 = "…" },
      { kind = "tool", name = "tool 'read_file'", tokens = 80, sha256 = "…", description_sha256 = "…" },
    ]

**Approved descriptions.** Each tool line also pins ``description_sha256``, the hash of the
tool's descriptions alone (its own and its parameters', ``audit/rules/mcp_rug_pull.py``): a tool
description is instructions the model follows, and an MCP server can change it after a user
approved it ("rug pull"). ``--check`` names such a tool as a rug pull, apart from a schema change
that left its descriptions alone. A version 1 lock (no description hashes) is still read and
checked as before; regenerating it adds them.

Anything else -- a key it never writes, a hash that is not one, a file that is not TOML, too
large, a FIFO or a device -- is refused with one line saying to regenerate it
(:class:`~ctxwright.errors.LockFileError`): a lock read wrong would pass a changed prefix.

**Cost.** A changed prefix costs, on every call, the tokens from the first changed segment on
(in cache order) and every message after the prefix, written to the cache again instead of
read. The check prices the prefix part, when the model has a price (``cache/prices.py``), at
the 5-minute write price (Anthropic's, GPT-5.6's) or the input price (older OpenAI models,
where a write costs what uncached input costs) instead of the cached read price.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ctxwright.audit.compare import AuditRequest, utf8
from ctxwright.audit.logs import MAX_RECORD_BYTES, LogItem, ParseProblem, open_log, read_records, read_stream
from ctxwright.audit.rules.base import Finding
from ctxwright.audit.rules.mcp_rug_pull import description_sha256, pinned_changes
from ctxwright.ci.segments import (
    Segment,
    SegmentChange,
    cache_break,
    cache_order,
    diff_segments,
    infer_provider,
    prefix_segments,
    spoken,
    tools_first,
)
from ctxwright.core.messages import canonical_json
from ctxwright.core.tokens import TokenCounter
from ctxwright.core.toml_file import TomlRefusal, read_bounded_toml
from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError, LockFileError, LogUnreadable

if TYPE_CHECKING:
    from ctxwright.cache.prices import ModelPrice, Pricing

LOCK_FILE = "ctxwright.lock"
LOCK_VERSION = 2
#: the versions read: 1 had no ``description_sha256``
_VERSIONS = (1, 2)
#: a lock larger than this is refused: one line per segment is ~150 bytes, so this is tens of
#: thousands of segments, and ``tomllib`` holds the whole file (and more) in memory
MAX_LOCK_BYTES = 4 * 1024 * 1024
#: distinct other prefixes a source is searched for (a count past it is reported as "at least")
_OTHERS_CAP = 10_000
_ORDERS = ("system, tools", "tools, system")
_TOP_KEYS = frozenset({"version", "provider", "model", "order", "tokenizer", "tokens", "segments"})
_SEGMENT_KEYS = frozenset({"kind", "name", "tokens", "sha256"})
#: what a tool's line may hold besides (version 2)
_TOOL_KEYS = _SEGMENT_KEYS | {"description_sha256"}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class LockedSegment:
    """One line of a lock: a segment's name, kind, tokens and the sha256 of its bytes."""

    name: str
    part: str
    tokens: int
    sha256: str
    #: a tool's :func:`~ctxwright.audit.rules.mcp_rug_pull.description_sha256` (``None``: a system
    #: section, or a version 1 lock)
    description_sha256: str | None = None


@dataclass(frozen=True)
class Lock:
    """A ``ctxwright.lock``: the segments in cache order (``order``), the model and provider
    they were taken from, the total tokens and the tokenizer that counted them."""

    segments: tuple[LockedSegment, ...]
    provider: str | None = None
    model: str | None = None
    order: str = "system, tools"
    tokenizer: str = "estimate"

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.segments)


@dataclass(frozen=True)
class PrefixSource:
    """The prefix a source holds (see the module docstring: the first request's), with what
    else was seen: how many requests, how many other distinct prefixes, and problems met."""

    system: str
    tools: Sequence[Any]
    provider: str | None
    model: str | None
    #: the source in words ("golden.jsonl", "session 3f2a...", "proxy session 9c...")
    source: str
    requests: int = 1
    other_prefixes: int = 0
    problems: int = 0

    def segments(self, counter: TokenCounter | None = None) -> list[Segment]:
        return prefix_segments(self.system, self.tools, provider=self.provider, counter=counter)


# -- reading a source -------------------------------------------------------------------------


def read_prefix(
    source: str | Path | None = None,
    *,
    session: str | None = None,
    proxy_session: str | None = None,
    store: str | Path | None = None,
    max_record: int = MAX_RECORD_BYTES,
) -> PrefixSource:
    """The prefix to lock from exactly one of: ``source`` (a request log or golden trace, JSONL,
    ``-`` for stdin; read by ``audit/logs.py``), ``session`` (a stored Harness session's frozen
    prefix) or ``proxy_session`` (a session ``ctxwright proxy`` recorded), the last two from the
    database ``store`` (default: ``$CTXWRIGHT_DB`` or the user data dir). Anything that cannot be
    read is a :class:`~ctxwright.errors.CtxwrightError` of one line."""
    given = [x for x in (source, session, proxy_session) if x is not None]
    if len(given) != 1:
        raise CtxwrightError(
            "give one source of the prefix: a request log or golden trace (FILE), --session ID or --proxy-session ID"
        )
    if session is not None:
        return _session_prefix(session, store)
    if proxy_session is not None:
        return _proxy_prefix(proxy_session, store)
    assert source is not None
    return _log_prefix(source, max_record)


def _log_prefix(source: str | Path, max_record: int) -> PrefixSource:
    name = str(source)
    try:
        f = sys.stdin.buffer if name == "-" else open_log(source)
    except OSError as e:
        raise LogUnreadable(
            f"cannot read {name}: {e.strerror or e}; give a request log or golden trace (JSONL)"
        ) from None
    with f:
        try:
            return _first_prefix(read_stream(f, max_record=max_record), "stdin" if name == "-" else name)
        except OSError as e:
            raise LogUnreadable(f"cannot read {name}: {e.strerror or e}") from None


def _store(path: str | Path | None) -> Any:
    """The store a session is read from: an existing one, or one line saying there is none
    (``Store(must_exist=True)``) -- never a new file or table made for a mistyped name."""
    from ctxwright.store.sessions import Store

    return Store.existing(path)


def _session_prefix(session: str, store_path: str | Path | None) -> PrefixSource:
    from ctxwright.core.prefix import Prefix

    store = _store(store_path)
    try:
        row = store.get_session(session)
    finally:
        store.close()
    prefix = Prefix.from_dict(row.prefix)
    if prefix.sha256 != row.prefix_sha256:
        raise CtxwrightError(
            f"session {row.id}: the stored prefix no longer hashes to {row.prefix_sha256[:12]}; the database was "
            "edited or is damaged"
        )
    # the tools as every request of the session sent them (core/request.py ChatRequest.to_wire)
    tools = [t.to_wire() for t in prefix.tools]
    return PrefixSource(prefix.system_prompt, tools, row.backend or None, row.model or None, f"session {row.id}")


def _proxy_prefix(session: str, store_path: str | Path | None) -> PrefixSource:
    from ctxwright.proxy.log import proxy_session_requests

    store = _store(store_path)
    try:
        records = proxy_session_requests(store, session)
    finally:
        store.close()
    sid = records[0]["proxy"]["session_id"] if records else session
    return _first_prefix(read_records(records), f"proxy session {sid}")


def _first_prefix(items: Iterable[LogItem], name: str) -> PrefixSource:
    """The first request's prefix, and the distinct other prefixes after it, counted."""
    first: AuditRequest | None = None
    first_problem: ParseProblem | None = None
    requests = problems = 0
    seen: set[bytes] = set()
    last_tools: tuple[int, bytes] | None = None  # a log repeats one tool list object
    for item in items:
        if isinstance(item, ParseProblem):
            problems += 1
            first_problem = first_problem or item
            continue
        requests += 1
        if last_tools is None or last_tools[0] != id(item.tools):
            last_tools = (id(item.tools), utf8(canonical_json(list(item.tools))))
        key = hashlib.blake2b(utf8(item.system) + b"\0" + last_tools[1], digest_size=16).digest()
        if first is None:
            first = item
        if len(seen) <= _OTHERS_CAP:
            seen.add(key)
    if first is None:
        why = f"; line {first_problem.line}: {first_problem.message}" if first_problem is not None else ""
        raise LogUnreadable(
            f"{name}: no request to take the prefix from ({counted(problems, 'record')} unreadable{why})"
        )
    provider = infer_provider(first.provider, first.tools)
    return PrefixSource(first.system, first.tools, provider, first.model, name, requests, len(seen) - 1, problems)


# -- writing and reading the lock -------------------------------------------------------------


def lock_of(prefix: PrefixSource, counter: TokenCounter | None = None) -> tuple[Lock, list[Segment]]:
    """The lock of ``prefix``, and its segments (with their text)."""
    counter = counter or TokenCounter()
    segs = prefix.segments(counter)
    order = "tools, system" if tools_first(prefix.provider) else "system, tools"
    tools = _tools_by_segment(segs, prefix.tools)
    locked = tuple(
        LockedSegment(
            s.name, s.part, s.tokens, s.sha256, description_sha256(tools[s.name]) if s.name in tools else None
        )
        for s in segs
    )
    return Lock(locked, prefix.provider, prefix.model, order, counter.source), segs


def _tools_by_segment(segs: Sequence[Segment], tools: Sequence[Any]) -> dict[str, Any]:
    """Each tool segment's name → its tool schema (a tool segment's path is ``$.tools[i]``)."""
    out: dict[str, Any] = {}
    for s in segs:
        if s.part == "tool" and s.path.startswith("$.tools["):
            out[s.name] = tools[int(s.path[len("$.tools[") : -1])]
    return out


def _toml_str(text: str) -> str:
    """``text`` as a TOML basic string: JSON's escapes are TOML's, and a character TOML forbids
    raw (DEL) or cannot hold at all (a lone surrogate) is escaped or replaced."""
    clean = text.encode("utf-8", "replace").decode("utf-8")
    return json.dumps(clean, ensure_ascii=False).replace("\x7f", "\\u007f")


def _comment(text: str) -> str:
    return _CONTROL.sub("?", text)


def render_lock(lock: Lock, *, command: str = "ctxwright lock SOURCE") -> str:
    """The lock as TOML text, one line per segment; ``command`` is how it was made (the
    header says how to regenerate and check it)."""
    cmd = _comment(command)
    lines = [
        "# ctxwright.lock -- the frozen prefix (system prompt and tools) of the agent's requests.",
        "# One line per segment, in the order the provider's cache reads them, with its tokens and sha256.",
        "# A changed line makes that segment and every one below it (and every message after the prefix)",
        "# a cache write again on every call: review this file's diff as a cost.",
        f"# Regenerate: {cmd}",
        f"# Check (CI): {cmd} --check",
        f"version = {LOCK_VERSION}",
    ]
    if lock.provider is not None:
        lines.append(f"provider = {_toml_str(lock.provider)}")
    if lock.model is not None:
        lines.append(f"model = {_toml_str(lock.model)}")
    lines += [
        f"order = {_toml_str(lock.order)}",
        f"tokenizer = {_toml_str(lock.tokenizer)}",
        f"tokens = {lock.tokens}",
        "segments = [",
    ]
    for s in lock.segments:
        described = "" if s.description_sha256 is None else f", description_sha256 = {_toml_str(s.description_sha256)}"
        lines.append(
            f"  {{ kind = {_toml_str(s.part)}, name = {_toml_str(s.name)}, tokens = {s.tokens}, "
            f"sha256 = {_toml_str(s.sha256)}{described} }},"
        )
    lines.append("]")
    return "\n".join(lines) + "\n"


def write_lock(path: str | Path, text: str) -> bool:
    """Write the lock ``text`` to ``path`` (replaced whole, never half-written); ``False`` when
    the file already holds exactly it (left untouched). Only a regular file is replaced: a
    path that is a device, a FIFO or a folder is refused."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise LockFileError(f"{p}: cannot write the lock ({e.strerror or e})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise LockFileError(f"{p}: not a regular file; give a file path for the lock, e.g. ctxwright.lock")
    data = text.encode("utf-8")
    if st is not None and st.st_size == len(data):
        try:
            if p.read_bytes() == data:
                return False
        except OSError:
            pass
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise LockFileError(
            f"{p}: cannot write the lock ({e.strerror or e}); check the folder exists and is writable"
        ) from None
    return True


def read_lock(path: str | Path, *, regenerate: str = "ctxwright lock SOURCE") -> Lock:
    """The lock at ``path``, checked to be exactly what :func:`render_lock` writes; anything
    else is one line (:class:`~ctxwright.errors.LockFileError`) saying to run ``regenerate``."""
    p = Path(path)
    fix = f"regenerate it with `{_comment(regenerate)}`"

    def refuse(kind: TomlRefusal, detail: str) -> NoReturn:
        if kind == "unreadable" and not p.exists() and not p.is_symlink():
            raise LockFileError(f"{p}: no lock file; write it with `{_comment(regenerate)}` and commit it") from None
        raise LockFileError(
            {
                "unreadable": f"{p}: cannot read the lock ({detail}); {fix}",
                "not_regular": f"{p}: not a regular file (a FIFO, a device or a folder); give the lock file's path",
                "too_large": f"{p}: larger than {MAX_LOCK_BYTES:,} bytes, not a lock ctxwright wrote; {fix}",
                "not_utf8": f"{p}: not UTF-8 text, not a lock ctxwright wrote; {fix}",
                "not_toml": f"{p}: not TOML ({' '.join(detail.split())}); {fix}",
                "too_deep": f"{p}: nests too deep to be a lock; {fix}",
            }[kind]
        ) from None

    data = read_bounded_toml(p, MAX_LOCK_BYTES, refuse)

    def bad(what: str) -> NoReturn:
        raise LockFileError(f"{p}: {what}: edited by hand or damaged; {fix}")

    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        bad(f"unknown {'key' if len(unknown) == 1 else 'keys'} {', '.join(unknown)}")
    version = data.get("version")
    if version not in _VERSIONS or isinstance(version, bool):
        bad(f"version is {version!r}, not {' or '.join(map(str, _VERSIONS))}")
    for key in ("provider", "model", "tokenizer", "order"):
        if key in data and not isinstance(data[key], str):
            bad(f"{key} is not a string")
    order = data.get("order", "system, tools")
    if order not in _ORDERS:
        bad(f"order is {order!r}, not one of {', '.join(map(repr, _ORDERS))}")
    segs = data.get("segments")
    if not isinstance(segs, list):
        bad("no segments list")
    out: list[LockedSegment] = []
    for i, s in enumerate(segs):
        allowed = _TOOL_KEYS if version >= 2 and isinstance(s, dict) and s.get("kind") == "tool" else _SEGMENT_KEYS
        if not isinstance(s, dict) or not _SEGMENT_KEYS <= set(s) <= allowed:
            bad(
                f"segments[{i}] is not {{ kind, name, tokens, sha256 }}"
                + (" (+ description_sha256)" if version >= 2 else "")
            )
        kind, name, tokens, sha = s["kind"], s["name"], s["tokens"], s["sha256"]
        if kind not in ("system", "tool"):
            bad(f"segments[{i}].kind is {kind!r}, not 'system' or 'tool'")
        if not isinstance(name, str) or not name:
            bad(f"segments[{i}].name is not a name")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            bad(f"segments[{i}].tokens is not a count")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            bad(f"segments[{i}].sha256 is not a sha256 hex digest")
        described = s.get("description_sha256")
        if described is not None and (not isinstance(described, str) or not _SHA256.fullmatch(described)):
            bad(f"segments[{i}].description_sha256 is not a sha256 hex digest")
        out.append(LockedSegment(name, kind, tokens, sha, described))
    if len({s.name for s in out}) != len(out):
        bad("two segments have one name")
    lock = Lock(tuple(out), data.get("provider"), data.get("model"), order, data.get("tokenizer", "estimate"))
    total = data.get("tokens")
    if isinstance(total, bool) or not isinstance(total, int) or total != lock.tokens:
        bad(f"tokens = {total!r} is not the sum of the segments' ({lock.tokens})")
    return lock


# -- checking a prefix against the lock -------------------------------------------------------


@dataclass(frozen=True)
class LockCheck:
    """What ``ctxwright lock --check`` found: the changes (``[]``: the prefix matches), the
    first segment a cache of the locked prefix cannot serve and the tokens from it on (per
    call), the order assumed, and the price of that per call when the model has one."""

    changes: list[SegmentChange]
    order: str
    broken_at: str | None = None
    invalidated_tokens: int = 0
    price: ModelPrice | None = None
    extra_cost_per_call: float | None = None
    notes: list[str] = field(default_factory=list)
    #: the tools whose descriptions changed after the lock approved them (the rule ``mcp_rug_pull``)
    rug_pulls: list[Finding] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.changes

    def cost_line(self) -> str:
        """One line: what the change costs per call."""
        if self.broken_at is None:
            head = (
                "cost per call: the locked prefix is still served up to its end, but every message after it is "
                f"written again (cache order assumed: {self.order})"
            )
        else:
            head = (
                f"cost per call: {counted(self.invalidated_tokens, 'prefix token')}, from {spoken(self.broken_at)} "
                f"on, {'is' if self.invalidated_tokens == 1 else 'are'} no longer reusable, nor is any message after "
                f"the prefix (cache order assumed: {self.order})"
            )
        p = self.price
        if p is None or self.extra_cost_per_call is None:
            return head + "; no price known for this model (give --prices FILE or --price-input X --price-cached Y)"
        return (
            f"{head}; +{self.extra_cost_per_call:.6f} USD per call at {p.model or 'the given'} prices (re-written at "
            f"{p.cache_write_5m:g} instead of read at {p.cached_read:g} USD per million tokens)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "match" if self.matches else "changed",
            "changes": [{"segment": c.segment, "kind": c.change, "path": c.path, "line": c.line} for c in self.changes],
            "order": self.order,
            "broken_at": self.broken_at,
            "invalidated_tokens": self.invalidated_tokens,
            "extra_cost_per_call_usd": self.extra_cost_per_call,
            "price_model": self.price.model if self.price is not None else None,
            "notes": self.notes,
            "rug_pulls": [f.to_json() for f in self.rug_pulls],
        }


def _regroup(segments: Sequence[LockedSegment], tools_before: bool) -> list[LockedSegment]:
    """The lock's segments in the order the current provider's cache reads them."""
    tools = [s for s in segments if s.part == "tool"]
    system = [s for s in segments if s.part == "system"]
    return tools + system if tools_before else system + tools


def check_lock(lock: Lock, prefix: PrefixSource, *, pricing: Pricing | None = None) -> LockCheck:
    """``prefix`` (the source's) judged against ``lock``."""
    current = prefix.segments(TokenCounter())
    first_tools = tools_first(prefix.provider)
    order = cache_order(prefix.provider)
    notes: list[str] = []
    if lock.model and prefix.model and lock.model != prefix.model:
        notes.append(
            f"the lock was taken from model {lock.model}, the source uses {prefix.model}: caches are per model"
        )
    if prefix.other_prefixes:
        notes.append(
            f"{prefix.source} holds {prefix.other_prefixes:,}{'+' if prefix.other_prefixes >= _OTHERS_CAP else ''} "
            "other prefix(es) after the first request's; only the first is locked and checked"
        )
    locked = _regroup(lock.segments, first_tools)
    changes = diff_segments(locked, current)
    if not changes:
        return LockCheck([], order, notes=notes)
    at, tokens = cache_break(locked, current)
    broken = current[at].name if at is not None else None
    price = pricing.price(prefix.provider, prefix.model) if pricing is not None else None
    extra = tokens * max(price.cache_write_5m - price.cached_read, 0.0) / 1e6 if price is not None else None
    pinned = {s.name: s.description_sha256 for s in lock.segments if s.description_sha256 is not None}
    rug = pinned_changes(pinned, _tools_by_segment(current, prefix.tools))
    return LockCheck(changes, order, broken, tokens, price, extra, notes, rug)


__all__ = [
    "LOCK_FILE",
    "MAX_LOCK_BYTES",
    "Lock",
    "LockCheck",
    "LockedSegment",
    "PrefixSource",
    "check_lock",
    "lock_of",
    "read_lock",
    "read_prefix",
    "render_lock",
    "write_lock",
]
