"""The golden recording a replay answers from: every model call, grouped into conversations,
each with the reply it got.

A golden is one of:

* a request log, in the format ``ctxwright audit`` reads: JSONL of ``{"request": body,
  "response": body}`` records (a response may be the list of stream events ``ctxwright proxy``
  records; a trace written by the replay server is one too);
* a proxy session (``ctxwright proxy``'s store, ``proxy/log.py``);
* a stored ctxwright session: the records of ``ctxwright export ID --requests``.

**Conversations** are the audit's: each record is read by the audit's reader and placed by
its :class:`~ctxwright.audit.compare.Auditor` (a session of an export is one conversation;
otherwise the audit's rules -- continue the conversation whose messages this request extends,
else the one it shares most messages with, else a new one). One addition for the Responses
API: a request whose ``previous_response_id`` names an earlier recorded response continues
that response's conversation (its input holds only the new items, so no message rule sees it).
Conversations are named ``c1``, ``c2``, ... in order of their first call.

**Replies.** A call whose response is recorded is answered with it. A call without one (an
export keeps only the usage; a proxy call whose body was over the recording cap) gets the
reply the agent received, read back from the next request of its conversation -- the
assistant message that request appended. The last call of a conversation with no recorded
reply is answered with an empty assistant text and a normal stop (nothing recorded says more).

**What is left out**, each noted in :attr:`Golden.notes`: a record the audit cannot read, a
call that failed (an error answer, an HTTP status of 400 or more, a failed call of an export),
a record that is not a model call.

**Bounds.** A log file must be a regular file (a device never ends and a FIFO blocks until a
writer comes: ``open_log`` of the audit refuses the devices, this module the FIFOs too), at
most ``max_bytes`` in all and each record at most the audit's
:data:`~ctxwright.audit.logs.MAX_RECORD_BYTES`. A golden of any source holds at most
``max_calls`` records and ``max_messages`` messages in all its requests: held as Python
objects and indexed by the audit, a short message costs about a hundred times its bytes (a
36 MB request of a million one-word messages took 1.3 GB), and placing each call in its
conversation costs time per call (200,000 calls: minutes). The bound is checked as the file
is read, so a golden past it is refused at once, in one line naming the bound and the flag
that raises it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwright.audit.compare import Auditor
from ctxwright.audit.logs import MAX_RECORD_BYTES, ParseProblem, is_anthropic, open_log, read_records
from ctxwright.core.words import counted
from ctxwright.errors import CtxwrightError, GoldenUnusable
from ctxwright.replay.turns import (
    ANTHROPIC,
    APIS,
    CHAT,
    RESPONSES,
    Turn,
    api_of_response,
    as_object,
    assistant_run,
    has_reply,
    inferred_turn,
    is_error,
    turn_from_response,
)

#: the most bytes a golden log file may hold (``--max-golden-mb``)
MAX_GOLDEN_BYTES = 256 * 1024 * 1024
#: the most records (model calls) a golden may hold (``--max-golden-calls``): hundreds of
#: agent runs' worth; each costs about a millisecond to place and judge
MAX_GOLDEN_CALLS = 10_000
#: the most messages (or Responses input items) all of a golden's requests may hold together
#: (``--max-golden-messages``): about 1.4 KB of memory each once read, so about 300 MB at most
MAX_GOLDEN_MESSAGES = 200_000


@dataclass
class GoldenCall:
    """One recorded model call: its ``api``, the request ``body`` as recorded, the reply to
    give (``turn``), and where it was in the recording (``index``, 0-based arrival order)."""

    api: str
    request: dict[str, Any]
    turn: Turn
    index: int = 0


@dataclass
class GoldenConversation:
    id: str
    calls: list[GoldenCall] = field(default_factory=list)


@dataclass
class Golden:
    """A recording to replay: ``conversations`` in order of their first call; ``source``
    names where it came from; ``notes`` say what was left out and why."""

    source: str
    conversations: list[GoldenConversation]
    notes: list[str] = field(default_factory=list)

    def calls(self) -> list[GoldenCall]:
        """Every call, in the order they were recorded."""
        return sorted((c for conv in self.conversations for c in conv.calls), key=lambda c: c.index)

    def records(self) -> Iterator[dict[str, Any]]:
        """The golden as the records of a request log, in recorded order: ``{"request": body,
        "response": the reply's non-stream body}`` (what ``ctxwright audit`` reads)."""
        for call in self.calls():
            yield {"request": call.request, "response": call.turn.body}

    def models(self) -> list[str]:
        """The models the recorded requests name, in order of first use."""
        seen: dict[str, None] = {}
        for call in self.calls():
            model = call.request.get("model")
            if isinstance(model, str):
                seen.setdefault(model, None)
        return list(seen)


def load_golden(
    source: str | Path | None = None,
    *,
    proxy_session: str | None = None,
    session: str | None = None,
    store: Path | str | None = None,
    max_bytes: int = MAX_GOLDEN_BYTES,
    max_calls: int = MAX_GOLDEN_CALLS,
    max_messages: int = MAX_GOLDEN_MESSAGES,
) -> Golden:
    """The golden from exactly one of ``source`` (a request log file), ``proxy_session`` (a
    ``ctxwright proxy`` session id) or ``session`` (a stored session id), the last two from
    the database ``store`` (default: ctxwright's), within the bounds (see the module
    docstring). Raises :class:`~ctxwright.errors.GoldenUnusable` (one line) when it cannot be
    replayed."""
    given = [x for x in (source, proxy_session, session) if x is not None]
    if len(given) != 1:
        raise GoldenUnusable(
            "give exactly one golden: a request log file, --proxy-session ID or --session ID"
            + (f" (got {len(given)})" if given else "")
        )
    notes: list[str] = []
    if source is not None:
        name = str(source)
        records = list(_bounded(name, _file_records(Path(source), max_bytes, max_messages), max_calls, max_messages))
    elif proxy_session is not None:
        name, records = _proxy_records(proxy_session, store)
    else:
        assert session is not None
        name, records = _session_records(session, store, notes)
    if source is None:
        records = list(_bounded(name, records, max_calls, max_messages))
    golden = build_golden(name, records, notes)
    if not golden.conversations:
        why = f": {golden.notes[0]}" if golden.notes else ""
        raise GoldenUnusable(f"{name} holds no model call to replay{why}")
    return golden


# -- the sources ------------------------------------------------------------------------------


def _bounded(
    name: str, records: Iterable[tuple[str, Any]], max_calls: int, max_messages: int
) -> Iterator[tuple[str, Any]]:
    """``records`` up to the bounds on calls and messages; one line naming the bound past it."""
    messages = 0
    for count, (where, record) in enumerate(records, start=1):
        if count > max_calls:
            raise GoldenUnusable(
                f"{name} holds more than {counted(max_calls, 'model call')}, the most a golden may hold "
                "(raise it with --max-golden-calls N)"
            )
        body = record.get("request", record) if isinstance(record, dict) else None
        if isinstance(body, dict):
            for key in ("messages", "input"):
                if isinstance(body.get(key), list):
                    messages += len(body[key])
        if messages > max_messages:
            raise _too_many_messages(name, where, max_messages)
        yield where, record


def _too_many_messages(name: str, where: str, max_messages: int) -> GoldenUnusable:
    return GoldenUnusable(
        f"{name}: its requests hold more than {counted(max_messages, 'message')} in all ({where} "
        "passes it), the most a golden may hold (raise it with --max-golden-messages N)"
    )


def _file_records(path: Path, max_bytes: int, max_messages: int) -> Iterator[tuple[str, Any]]:
    """(where, record) of each line of a JSONL log at ``path``. Messages are counted in the
    raw bytes too, before a line is parsed -- ``"role"`` keys, which an escaped quote inside a
    string cannot fake -- against twice ``max_messages`` (a recorded reply has roles too; the
    exact count, after parsing, is :func:`_bounded`'s), so that one line of a million short
    messages is refused before it costs a gigabyte to parse."""
    roles = 0
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise GoldenUnusable(f"cannot read the golden {path}: {exc.strerror or exc}; give a request log file") from None
    if stat.S_ISFIFO(mode):
        raise GoldenUnusable(f"{path} is a FIFO: a golden must be a regular file (it is read whole, before serving)")
    try:
        f = open_log(path)
    except CtxwrightError as exc:
        raise GoldenUnusable(str(exc)) from None
    except OSError as exc:
        raise GoldenUnusable(f"cannot read the golden {path}: {exc.strerror or exc}") from None
    total = 0
    with f:
        number = 0
        while True:
            raw = f.readline(MAX_RECORD_BYTES + 2)
            if not raw:
                return
            number += 1
            total += len(raw)
            if total > max_bytes:
                raise GoldenUnusable(
                    f"{path} is larger than {max_bytes:,} bytes, the most a golden may hold "
                    "(raise it with --max-golden-mb N)"
                )
            if len(raw) > MAX_RECORD_BYTES + int(raw.endswith(b"\n")):
                raise GoldenUnusable(
                    f"{path} line {number} is longer than {MAX_RECORD_BYTES:,} bytes, the cap on one record"
                )
            line = raw.strip()
            if number == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if not line:
                continue
            roles += line.count(b'"role"')
            if roles > 2 * max_messages:
                raise _too_many_messages(str(path), f"line {number}", max_messages)
            try:
                yield f"line {number}", json.loads(line)
            except (ValueError, RecursionError):
                raise GoldenUnusable(
                    f"{path} line {number} is not JSON: a golden is a request log, one JSON "
                    '{"request": ..., "response": ...} per line (see ctxwright audit)'
                ) from None


def _open_store(store: Path | str | None) -> Any:
    from ctxwright.errors import StoreMissing
    from ctxwright.store.sessions import Store

    try:  # an existing store only: a mistyped --db creates nothing; None: the default store
        return Store.existing(store)
    except StoreMissing as exc:
        raise GoldenUnusable(str(exc)) from None


def _proxy_records(session_id: str, store: Path | str | None) -> tuple[str, list[tuple[str, Any]]]:
    from ctxwright.proxy.log import proxy_session_requests
    from ctxwright.proxy.store import ProxyLog

    db = _open_store(store)
    try:
        sid = str(ProxyLog(db).session_row(session_id)["id"])
        records = proxy_session_requests(db, sid)
    except CtxwrightError as exc:
        raise GoldenUnusable(str(exc)) from None
    finally:
        db.close()
    return f"proxy session {sid}", [(f"call {i}", r) for i, r in enumerate(records, start=1)]


def _session_records(session_id: str, store: Path | str | None, notes: list[str]) -> tuple[str, list[tuple[str, Any]]]:
    from ctxwright.store.export import request_bodies

    db = _open_store(store)
    try:
        sid, bodies, missing = request_bodies(db, session_id)
    except CtxwrightError as exc:
        raise GoldenUnusable(str(exc)) from None
    finally:
        db.close()
    if missing:
        which = f"call {missing[0]}" if len(missing) == 1 else f"calls {', '.join(map(str, missing))}"
        notes.append(f"{which} of session {sid} cannot be rebuilt; left out")
    return f"session {sid}", [(f"call {b.call_index}", b.record()) for b in bodies]


# -- building it ------------------------------------------------------------------------------


def request_api(record: dict[str, Any], body: dict[str, Any]) -> str:
    """The API a recorded call was made to: what the proxy or the replay recorded, else the
    response's shape, else the request's (``input`` is the Responses API's, Anthropic's body
    as the audit tells it)."""
    for meta in (record.get("proxy"), record.get("replay")):
        if isinstance(meta, dict) and meta.get("api") in APIS:
            return str(meta["api"])
    found = api_of_response(record.get("response"))
    if found is not None:
        return found
    if "messages" not in body and "input" in body:
        return RESPONSES
    return ANTHROPIC if is_anthropic(body) else CHAT


def _failed(record: dict[str, Any]) -> str | None:
    for key in ("proxy", "replay"):
        meta = record.get(key)
        if isinstance(meta, dict):
            status = meta.get("status")
            if isinstance(status, int) and status >= 400:
                return f"it failed (HTTP {status})"
    if is_error(record.get("response")):
        return "its response is an error"
    return None


def build_golden(source: str, records: list[tuple[str, Any]], notes: list[str] | None = None) -> Golden:
    """A golden from ``(where, record)`` pairs in recorded order (see the module docstring)."""
    notes = notes if notes is not None else []
    kept: list[tuple[str, dict[str, Any], dict[str, Any], str]] = []
    for where, record in records:
        if not isinstance(record, dict):
            notes.append(f"{where}: not a JSON object; left out")
            continue
        if "events" in record and "prefix" in record:
            notes.append(f"{where}: a whole session export, not a call; replay it with --session ID; left out")
            continue
        body = record.get("request") if "request" in record else record
        if not isinstance(body, dict):
            notes.append(f"{where}: no request body was recorded; left out")
            continue
        why = _failed(record)
        if why is not None:
            notes.append(f"{where}: {why}; left out")
            continue
        kept.append((where, record, body, request_api(record, body)))
    auditor = Auditor(keep_rows=False)
    placed: list[tuple[int, str, dict[str, Any], dict[str, Any], str]] = []
    items = read_records([r for _w, r, _b, _a in kept])
    for (where, record, body, api), item in zip(kept, items, strict=True):
        if isinstance(item, ParseProblem):
            notes.append(f"{where}: {item.message}; left out")
            continue
        number = auditor.add(item).conversation
        placed.append((number, where, record, body, api))
    # a Responses request continuing a recorded response by its id is in that response's conversation
    by_response: dict[str, int] = {}
    groups: list[int] = []
    for number, _where, record, body, _api in placed:
        prev = body.get("previous_response_id")
        if isinstance(prev, str) and prev in by_response:
            number = by_response[prev]
        groups.append(number)
        response = record.get("response")
        rid = response.get("id") if isinstance(response, dict) else None
        if isinstance(response, list):
            done = [as_object(e.get("response")) for e in response if isinstance(e, dict)]
            rid = next((d.get("id") for d in reversed(done) if d.get("id")), None)
        if isinstance(rid, str):
            by_response[rid] = number
    order: dict[int, GoldenConversation] = {}
    pending: dict[int, list[tuple[dict[str, Any], dict[str, Any], str, int]]] = {}
    for index, (number, (_n, _where, record, body, api)) in enumerate(zip(groups, placed, strict=True)):
        if number not in order:
            order[number] = GoldenConversation(f"c{len(order) + 1}")
        pending.setdefault(number, []).append((record, body, api, index))
    for number, conv in order.items():
        calls = pending[number]
        for k, (record, body, api, index) in enumerate(calls):
            nxt = calls[k + 1][1] if k + 1 < len(calls) else None
            conv.calls.append(GoldenCall(api, body, _turn(api, record, body, nxt, f"{conv.id}_{k}"), index))
    return Golden(source, list(order.values()), notes)


def entries(api: str, body: dict[str, Any]) -> list[Any]:
    """The messages of a request body (Responses: its input items; a string input is one)."""
    if api == RESPONSES:
        items = body.get("input")
        if isinstance(items, str):
            return [{"role": "user", "content": items}]
        return list(items) if isinstance(items, list) else []
    messages = body.get("messages")
    return list(messages) if isinstance(messages, list) else []


def _turn(api: str, record: dict[str, Any], body: dict[str, Any], nxt: dict[str, Any] | None, key: str) -> Turn:
    response = record.get("response")
    if has_reply(api, response):
        try:
            return turn_from_response(api, response)
        except (ValueError, TypeError):
            pass  # an unreadable reply: read it from the next request instead
    appended: list[dict[str, Any]] = []
    if nxt is not None:
        before, after = entries(api, body), entries(api, nxt)
        shared = 0
        while shared < min(len(before), len(after)) and before[shared] == after[shared]:
            shared += 1
        appended = assistant_run(api, after[shared:])
    rid = {CHAT: f"chatcmpl-replay-{key}", RESPONSES: f"resp_replay_{key}", ANTHROPIC: f"msg_replay_{key}"}[api]
    usage = response.get("usage") if isinstance(response, dict) and isinstance(response.get("usage"), dict) else None
    model = body.get("model") if isinstance(body.get("model"), str) else None
    return inferred_turn(api, appended, rid=rid, model=model, usage=usage)


__all__ = ["Golden", "GoldenCall", "GoldenConversation", "build_golden", "entries", "load_golden", "request_api"]
