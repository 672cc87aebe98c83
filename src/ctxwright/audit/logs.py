"""Reading any agent's request log into :class:`~ctxwright.audit.compare.AuditRequest` s, offline.

Why this module exists: the cache audit is only useful if it runs on the logs people
already have, whatever agent wrote them. So the reader accepts what agents actually
log and normalises it to one shape (system text, tool list, message dicts, usage):

* JSONL of OpenAI chat-completions request bodies -- the system prompt is the first
  message of role ``system`` or ``developer`` -- or of ``{"request": body, "response":
  response_body}`` pairs, whose usage gives cached / prompt / completion tokens;
* Anthropic Messages request bodies (top-level ``system``, ``input_schema`` tools,
  content blocks), in either of the two line forms above;
* ctxwright's own session export (``ctxwright show ID --json``), one object for the
  whole file (pretty-printed or not) or one per JSONL line, expanded into one request
  per model call.

Messages of a request log are kept exactly as logged, never re-serialised or "cleaned": the
cache matches bytes, so normalising them would hide the very differences the audit looks
for. A session export is different: it holds events, not requests, and its requests are
rendered by the same renderer that rendered the live ones (``core/render.py``).

A log is evidence, not input we control: a bad line is reported as a
:class:`ParseProblem` with its 1-based line number and skipped, never raised.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxwright.audit.compare import AuditRequest
from ctxwright.core.events import Event, event_from_dict
from ctxwright.core.messages import Message
from ctxwright.core.render import RenderSettings, replay_calls
from ctxwright.core.usage import as_object, first_int, read_usage
from ctxwright.errors import CtxwrightError, EventFormatError, LogRecordRejected

_SYSTEM_ROLES = ("system", "developer")
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result"})
_BOM = b"\xef\xbb\xbf"
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")
_ONLY_SPACE = re.compile(rb"[ \t\r\n]*\Z")

_NO_MESSAGES = (
    "no 'messages' list: expected a chat request body, "
    '{"request": body, "response": body}, or a ctxwright session export'
)


@dataclass(frozen=True)
class ParseProblem:
    """One part of the log that could not be read; ``line`` is 1-based."""

    line: int
    message: str


# -- entry points ---------------------------------------------------------------------------


def load_requests(path: str | Path) -> tuple[list[AuditRequest], list[ParseProblem]]:
    """Every request in the log at ``path``, in order, and the problems met on the way.

    Raises ``OSError`` only when the file itself cannot be read; anything wrong inside
    it becomes a :class:`ParseProblem`.
    """
    return parse_log(Path(path).read_bytes())


def parse_log(data: bytes) -> tuple[list[AuditRequest], list[ParseProblem]]:
    """:func:`load_requests` on bytes already in memory.

    The file stays bytes and is decoded line by line: one line with CJK text would
    otherwise widen a whole decoded log to two or four bytes a character, and one line
    of bad UTF-8 would sink the file instead of being one problem.
    """
    reader = _Reader()
    doc = _whole_document(data)
    if doc is not None:
        reader.read_document(doc)
    else:
        reader.read_lines(_lines(data))
    return reader.requests, reader.problems


def _whole_document(data: bytes) -> list[Any] | dict[str, Any] | None:
    """The file's content if it is exactly one JSON object or array, else ``None``.

    A pretty-printed session export spans many lines; JSONL has one value per line. If
    the first line parses on its own, the file is JSONL (unless it is its only line), so
    a large log is never parsed twice.
    """
    lead = _LEADING_SPACE.match(data, len(_BOM) if data.startswith(_BOM) else 0)
    start = lead.end() if lead is not None else 0  # the pattern matches the empty string: never None
    if start >= len(data) or data[start] not in b"{[":
        return None
    end = data.find(b"\n", start)
    if end >= 0 and not _ONLY_SPACE.match(data, end):
        try:
            json.loads(data[start:end])
            return None  # a complete value on the first line, more lines after: JSONL
        except (ValueError, RecursionError):
            pass
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based number, line) pairs, sliced one at a time so a big log is not copied whole."""
    pos, n, number = 0, len(data), 0
    while pos < n:
        end = data.find(b"\n", pos)
        if end < 0:
            end = n
        number += 1
        yield number, data[pos:end]
        pos = end + 1


# -- the reader -----------------------------------------------------------------------------


class _Reader:
    """Accumulates requests and problems; shares unchanged messages between requests.

    An append-only log repeats its whole history on every line. Reusing the previous
    request's message objects where they are equal keeps memory proportional to the
    distinct text, not to the file size.
    """

    def __init__(self) -> None:
        self.requests: list[AuditRequest] = []
        self.problems: list[ParseProblem] = []
        self._prev_messages: list[dict[str, Any]] = []

    def problem(self, line: int, message: str) -> None:
        self.problems.append(ParseProblem(line, message))

    def read_lines(self, lines: Iterator[tuple[int, bytes]]) -> None:
        for number, line in lines:
            if not line or line.isspace():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                self.problem(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            except UnicodeDecodeError:
                self.problem(number, "not valid UTF-8")
                continue
            except (ValueError, RecursionError) as exc:
                self.problem(number, f"not valid JSON ({type(exc).__name__})")
                continue
            self.read_record(value, number)

    def read_document(self, doc: list[Any] | dict[str, Any]) -> None:
        """A whole-file JSON value: one record, or an array of records (all on line 1)."""
        if isinstance(doc, list):
            for i, item in enumerate(doc, start=1):
                self.read_record(item, 1, where=f"item {i}: ")
        else:
            self.read_record(doc, 1)

    def read_record(self, value: Any, line: int, where: str = "") -> None:
        """One JSON value: a session export, a request/response pair or a bare body."""
        try:
            if not isinstance(value, dict):
                raise LogRecordRejected(f"a JSON {_json_type(value)}, not an object")
            if "events" in value and "prefix" in value:
                for req, issue in requests_from_export(value):
                    if issue is not None:
                        self.problem(line, where + issue)
                    if req is not None:
                        self.add(req)
                return
            self.add(request_from_record(value))
        except LogRecordRejected as exc:
            self.problem(line, where + str(exc))

    def add(self, req: AuditRequest) -> None:
        shared = _share_prefix(list(req.messages), self._prev_messages)
        self._prev_messages = shared
        self.requests.append(replace(req, messages=shared))


def _share_prefix(messages: list[dict[str, Any]], prev: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with its leading run of messages equal to ``prev``'s swapped for prev's objects."""
    for i in range(min(len(messages), len(prev))):
        if messages[i] is prev[i]:
            continue
        if messages[i] != prev[i]:  # deep comparison in C, no Python loop over text
            break
        messages[i] = prev[i]
    return messages


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


# -- request bodies -------------------------------------------------------------------------


def request_from_record(record: dict[str, Any]) -> AuditRequest:
    """A bare request body, or ``{"request": body, "response": body}`` (usage from the response).

    A ``response`` next to a bare body's ``messages`` is read too, since some loggers
    store both side by side.
    """
    if "request" in record and "messages" not in record:
        body = record["request"]
        if not isinstance(body, dict):
            raise LogRecordRejected(f"'request' is a JSON {_json_type(body)}, not an object")
    else:
        body = record
    usage = usage_of(record.get("response"))
    system, messages = split_body(body)
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        raise LogRecordRejected(f"'tools' is a JSON {_json_type(tools)}, not an array")
    return AuditRequest(
        system=system,
        tools=tools,
        messages=messages,
        cached_tokens=usage["cached_tokens"],
        prompt_tokens=usage["prompt_tokens"],
        completion_tokens=usage["completion_tokens"],
    )


def usage_of(response: Any) -> dict[str, int | None]:
    """Token counts from a logged response; all ``None`` (unknown) when it has none.

    A streamed response logged as its list of chunks reports usage in its last chunk
    that has any.
    """
    if isinstance(response, list):
        response = next((c for c in reversed(response) if isinstance(c, dict) and c.get("usage")), None)
    if not isinstance(response, dict):
        return {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
    return read_usage(response)


def is_anthropic(body: dict[str, Any]) -> bool:
    """Whether ``body`` is an Anthropic Messages request rather than an OpenAI chat one."""
    if "system" in body or "anthropic_version" in body:
        return True
    for m in body.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") in _ANTHROPIC_BLOCKS for b in content
        ):
            return True
    return False


def split_body(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, the other messages) of either provider's request body.

    The system prompt is message 0 for both: OpenAI's leading ``system``/``developer``
    message is taken out of the list, Anthropic's top-level ``system`` is used as is. A
    body without one has an empty system prompt, still counted as message 0.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise LogRecordRejected(_NO_MESSAGES)
    if not messages:
        raise LogRecordRejected("'messages' is empty: a request needs at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise LogRecordRejected(f"message {i} is a JSON {_json_type(m)}, not an object")
    if is_anthropic(body):
        return text_of(body.get("system")), messages
    if messages[0].get("role") in _SYSTEM_ROLES:
        return text_of(messages[0].get("content")), messages[1:]
    return "", messages


def text_of(value: Any) -> str:
    """A system prompt's text: a string as is, a list of text blocks/parts joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# -- ctxwright session exports --------------------------------------------------------------


def requests_from_export(export: dict[str, Any]) -> Iterator[tuple[AuditRequest | None, str | None]]:
    """One request per model call of a session export (and of its child sessions).

    The events are parsed by ``core/events.py`` and replayed by the one renderer
    (``core/render.py``, the code that rendered the live requests) with the settings the
    export's ``meta`` records: the ``assistant`` event with ``call_index`` k answered the
    request rendered from every event before it. A ``compaction`` event, or a ``status`` event
    in ``replace`` mode, since the previous reply marks the next request, so the audit reports
    the change as intended rather than as an edit. Yields ``(request, None)`` or
    ``(None, problem)``.
    """
    sid = export.get("id") or "?"
    prefix = export.get("prefix")
    raw_events = export.get("events")
    if not isinstance(prefix, dict) or not isinstance(raw_events, list):
        yield None, f"session {sid}: 'prefix' must be an object and 'events' an array"
        return
    system = text_of(prefix.get("system"))
    tools: list[Any] = prefix["tools"] if isinstance(prefix.get("tools"), list) else []
    calls = {c.get("call_index"): c for c in export.get("calls") or () if isinstance(c, dict)}
    events: list[Event] = []
    for i, data in enumerate(raw_events):
        if not isinstance(data, dict):
            yield None, f"session {sid}: event {i} is not an object; skipped"
            continue
        try:
            events.append(event_from_dict(data, default_seq=i))
        except EventFormatError as exc:
            yield None, f"session {sid}: {exc}; skipped"
    try:
        settings = RenderSettings.from_meta(as_object(export.get("meta")))
    except ValueError as exc:
        yield None, f"session {sid}: {exc}; rendered as recorded"
        settings = RenderSettings()
    produced = 0
    wire = WireCache()
    try:
        for rc in replay_calls(events, settings, tools_in_use=bool(tools)):
            call = calls.get(rc.reply.call_index) or {}
            yield _export_request(system, tools, rc.messages, wire, call, rc.marker), None
            produced += 1
    except CtxwrightError as exc:  # e.g. a reasoning policy the recorded messages violate
        yield None, f"session {sid}: {exc}"
    if not produced:
        yield None, f"session {sid}: no model calls (no assistant event with a call_index)"
    for child in export.get("children") or ():
        if isinstance(child, dict):
            yield from requests_from_export(child)


class WireCache:
    """One wire dict per message object: the renderer hands back the same objects for the
    unchanged part of every request, so a long session is converted once, not once per call."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[Message, dict[str, Any]]] = {}

    def __call__(self, m: Message) -> dict[str, Any]:
        hit = self._by_id.get(id(m))
        if hit is None or hit[0] is not m:
            hit = (m, m.to_wire())
            self._by_id[id(m)] = hit
        return hit[1]


def _export_request(
    system: str,
    tools: list[Any],
    messages: list[Message],
    wire: Callable[[Message], dict[str, Any]],
    call: dict[str, Any],
    marker: str | None,
) -> AuditRequest:
    """The request of one call; exact reusable tokens if the backend recorded them."""
    usage = as_object(call.get("usage"))
    raw = as_object(usage.get("raw"))
    return AuditRequest(
        system=system,
        tools=tools,
        messages=[wire(m) for m in messages],
        cached_tokens=first_int(call.get("cached_tokens")),
        prompt_tokens=first_int(call.get("prompt_tokens")),
        completion_tokens=first_int(call.get("completion_tokens")),
        marker=marker,
        reusable_tokens_hint=first_int(raw.get("reusable_tokens")),
        message_bytes=[m.canonical_utf8 for m in messages],
    )
