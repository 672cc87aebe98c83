"""Reading any agent's request log into :class:`~ctxwright.audit.compare.AuditRequest` s, offline.

Why this module exists: the cache audit is only useful if it runs on the logs people
already have, whatever agent wrote them. So the reader accepts what agents actually
log and normalises it to one shape (system text, tool list, message dicts, options, usage):

* JSONL of OpenAI chat-completions request bodies -- the system prompt is the first
  message of role ``system`` or ``developer`` -- or of ``{"request": body, "response":
  response_body}`` pairs, whose usage gives cached / prompt / completion tokens;
* Anthropic Messages request bodies (top-level ``system``, ``input_schema`` tools,
  content blocks), in either of the two line forms above;
* OpenAI Responses API request bodies (``instructions`` is the system prompt, ``input`` a
  string or a list of items -- messages, function calls and their outputs, reasoning -- each
  item one message of the audit), in either line form; a streamed response logged as its
  list of events (what ``ctxwright proxy`` records) gives its usage too;
* ctxwright's own session export (``ctxwright show ID --json``), one object for the
  whole file (pretty-printed or not) or one per JSONL line, expanded into one request
  per model call; each session (and each child session) is a conversation of its own;
* the lines of ``ctxwright export ID --requests``: request/response pairs with a
  ``ctxwright`` object that says which session and call each is (:class:`ExportedCall`),
  audited as the live session audited them.

Messages of a request log are kept exactly as logged, never re-serialised or "cleaned": the
cache matches bytes, so normalising them would hide the very differences the audit looks
for. A session export is different: it holds events, not requests, and its requests are
rendered by the same renderer that rendered the live ones (``core/render.py``), so its audit
is the audit the live session stored, the options each call recorded compared as the live audit
compared them (:func:`sent_options`).

A log is evidence, not input we control: a bad line, a bad event or a compaction record that
names events that are not there is reported as a :class:`ParseProblem` with its 1-based line
number (and the session and event seq), and the rest is still read -- nothing raises on input.

The log is read as a stream, one line at a time (:func:`read_log`): a log of any size costs
the memory of its longest line, not of the file. The one exception is a file that is a single
JSON value spread over many lines (a pretty-printed export): JSON gives no way to read part of
a value, so that file is parsed whole.

Both are capped (:data:`MAX_RECORD_BYTES`): a line, or a whole-file document, longer than the
cap stops the reading with :class:`~ctxwright.errors.LogUnreadable` naming its line, before it
is held in memory -- parsed, a record takes several times its size (a 2 GB one-line log took
11.8 GB). And a log is a regular file or a pipe (:func:`open_log`): a device is refused before
it is opened (``/dev/zero`` is one endless line).
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from ctxwright.audit.compare import AuditRequest, segment_hash, utf8
from ctxwright.audit.provider_log import breakpoint_ttls, provider_raw
from ctxwright.core.events import CompactionEvent, Event, MessageEvent, event_from_dict
from ctxwright.core.messages import Message, canonical_json
from ctxwright.core.records import CallRecord
from ctxwright.core.render import RenderSettings, replay_calls
from ctxwright.core.request import RequestOptions, ToolSpec, without_reply_only
from ctxwright.core.usage import CacheUsage, as_object, first_int, raw_cache_usage, read_usage
from ctxwright.errors import CtxwrightError, EventFormatError, LogRecordRejected, LogUnreadable

_SYSTEM_ROLES = ("system", "developer")
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result"})
_BOM = b"\xef\xbb\xbf"
#: a first line longer than this that does not parse is a broken JSONL record, not the
#: opening line of a pretty-printed document
_DOCUMENT_FIRST_LINE = 4096
#: threads of conversation whose latest request the reader remembers (see ``RecordReader``), and
#: the bytes they may hold together
_THREADS = 16
_THREAD_BYTES = 64 * 1024 * 1024
#: the longest record a log may hold: one line, or one document spread over lines (a request
#: body of a million-token context is a few MB; the proxy records bodies up to 32 MB)
MAX_RECORD_BYTES = 128 * 1024 * 1024

#: The request options compared between calls (OpenAI chat completions, Anthropic Messages,
#: llama.cpp and vLLM extensions). A positive list, not "every other key": loggers write their
#: own keys next to the body (timestamps, request ids), which would otherwise change on every
#: line. What each does to a cache: ``tool_choice``, ``parallel_tool_calls``,
#: ``response_format``, ``functions``/``function_call``, reasoning and template switches are
#: rendered into the prompt by several servers' chat templates; ``model``, ``user`` and
#: ``prompt_cache_key`` choose which cache a request is routed to; the sampling and length
#: fields do not change the prompt, but a change of them between calls of one conversation
#: means two call sites share it (a summarizer, a retry path), which is worth seeing.
OPTION_KEYS = frozenset(
    {
        "model",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "functions",
        "function_call",
        "reasoning_effort",
        "reasoning",
        "thinking",
        "chat_template_kwargs",
        "grammar",
        "json_schema",
        "user",
        "prompt_cache_key",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repeat_penalty",
        "stop",
        "stop_sequences",
        "seed",
        "n",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "service_tier",
        "verbosity",
        "modalities",
        "max_output_tokens",
        "truncation",
        "text",
    }
)

_NO_MESSAGES = (
    "no 'messages' list (nor a Responses API 'input'): expected a chat request body, "
    '{"request": body, "response": body}, or a ctxwright session export'
)


@dataclass(frozen=True)
class ParseProblem:
    """One part of the log that could not be read; ``line`` is 1-based."""

    line: int
    message: str


LogItem = AuditRequest | ParseProblem


# -- entry points ---------------------------------------------------------------------------


def read_log(path: str | Path, *, max_record: int = MAX_RECORD_BYTES) -> Iterator[LogItem]:
    """Every request in the log at ``path`` and every problem met, in file order, as read.

    Raises ``OSError`` only when the file itself cannot be opened or read, and
    :class:`~ctxwright.errors.LogUnreadable` for a file that is not a log at all (a device, a
    record over ``max_record`` bytes); anything wrong inside a record becomes a
    :class:`ParseProblem`.
    """
    with open_log(path) as f:
        yield from read_stream(f, max_record=max_record)


_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def open_log(path: str | Path) -> IO[bytes]:
    """``path`` opened for reading, if it is a regular file or a pipe (FIFO, or a ``/dev/stdin``
    that is one); else :class:`~ctxwright.errors.LogUnreadable`.

    Why the type is checked before the open, and again on the open file: a device can be
    endless (``/dev/zero``, ``/dev/urandom``) or block forever (a terminal nobody types in),
    and opening some devices has effects of its own; the second check is on what was opened,
    whatever was swapped in between. A FIFO is allowed (``audit <(cmd)``, a named pipe a
    logger writes to): its writer decides when it ends, and each line is still capped.
    """
    _refuse_non_log(os.stat(path).st_mode, path)
    f = Path(path).open("rb")  # noqa: SIM115 -- returned open: the caller closes it
    try:
        _refuse_non_log(os.fstat(f.fileno()).st_mode, path)
    except BaseException:
        f.close()
        raise
    return f


def _refuse_non_log(mode: int, path: str | Path) -> None:
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise LogUnreadable(f"{path} is a folder: give a request log file")
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise LogUnreadable(
        f"{path} is {kind}, not a log: a device can be endless; give a regular file, a pipe, or - for stdin"
    )


def read_stream(f: IO[bytes], *, max_record: int = MAX_RECORD_BYTES) -> Iterator[LogItem]:
    """:func:`read_log` on an open binary stream (a file, a pipe, bytes in memory).

    The stream stays bytes and is decoded line by line: one line with CJK text would
    otherwise widen a whole decoded log to two or four bytes a character, and one line
    of bad UTF-8 would sink the file instead of being one problem. No line (nor a
    document spread over lines) longer than ``max_record`` bytes is held: reading stops
    at it with :class:`~ctxwright.errors.LogUnreadable`.
    """
    lines = _Lines(f, cap=max_record)
    reader = RecordReader()
    head = lines.peek_nonblank(1)
    if not head:
        return
    first = head[0][1]
    if first.lstrip()[:1] in (b"{", b"["):
        ok, value = _loads(first)
        # an object on the first line is JSONL: read on at once (the writer may still be writing);
        # anything else needs a look at the second line
        head = lines.peek_nonblank(2) if not (ok and isinstance(value, dict)) else head
        if ok and len(head) == 1 and isinstance(value, list):  # one JSON array on one line
            yield from reader.read_document(value)
            return
        if not ok and len(head) == 2 and len(first) <= _DOCUMENT_FIRST_LINE and not _loads(head[1][1])[0]:
            # neither line is a value of its own: one value spread over the file (pretty-printed)
            start = lines.number_of_next()
            data = lines.rest()
            doc = _document(data)
            if doc is not None:
                yield from reader.read_document(doc)
                return
            lines = _Lines(io.BytesIO(data), start=start, cap=max_record)
    yield from reader.read_lines(lines)


def read_records(records: Iterable[Any]) -> Iterator[LogItem]:
    """:func:`read_log` on records already parsed (the n-th reported as line n): what
    ``proxy/log.py`` hands back for a proxy session. A request record yields exactly one
    item, its request or its problem."""
    reader = RecordReader()
    for number, record in enumerate(records, start=1):
        yield from reader.read_record(record, number)


def load_requests(path: str | Path) -> tuple[list[AuditRequest], list[ParseProblem]]:
    """Every request in the log at ``path``, in order, and the problems met on the way
    (:func:`read_log`, collected; for logs that fit in memory)."""
    return _collect(read_log(path))


def parse_log(data: bytes) -> tuple[list[AuditRequest], list[ParseProblem]]:
    """:func:`load_requests` on bytes already in memory."""
    return _collect(read_stream(io.BytesIO(data)))


def _collect(items: Iterator[LogItem]) -> tuple[list[AuditRequest], list[ParseProblem]]:
    requests: list[AuditRequest] = []
    problems: list[ParseProblem] = []
    for item in items:
        if isinstance(item, ParseProblem):
            problems.append(item)
        else:
            requests.append(item)
    return requests, problems


def _loads(line: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(line)
    except (ValueError, RecursionError):
        return False, None


def _document(data: bytes) -> list[Any] | dict[str, Any] | None:
    ok, value = _loads(data)
    return value if ok and isinstance(value, (dict, list)) else None


class _Lines:
    """(1-based number, line) pairs read lazily from a binary stream, with a look-ahead.

    A line is split at ``\\n`` only and keeps a ``\\r`` (JSON ignores it as white space); a BOM
    at the start of the stream is dropped. A line longer than ``cap`` bytes raises
    :class:`~ctxwright.errors.LogUnreadable` once ``cap + 1`` bytes of it are read.
    """

    def __init__(self, f: IO[bytes], start: int = 1, *, cap: int = MAX_RECORD_BYTES) -> None:
        self._f = f
        self._next = start
        self._ahead: deque[tuple[int, bytes]] = deque()
        self._bom = start == 1
        self._cap = cap

    def _read(self) -> tuple[int, bytes] | None:
        raw = self._f.readline(self._cap + 2)  # the line, its newline, and one byte to see it is too long
        if not raw:
            return None
        if len(raw) > self._cap + int(raw.endswith(b"\n")):
            raise LogUnreadable(
                f"line {self._next} is longer than {self._cap:,} bytes, the cap on one record (a request log "
                "holds one JSON request per line)"
            )
        if self._bom:
            self._bom = False
            if raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
        item = (self._next, raw[:-1] if raw.endswith(b"\n") else raw)
        self._next += 1
        return item

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        while True:
            item = self._ahead.popleft() if self._ahead else self._read()
            if item is None:
                return
            yield item

    def peek_nonblank(self, k: int) -> list[tuple[int, bytes]]:
        """The next ``k`` non-blank lines (fewer at the end), left in place to be read."""
        found = [item for item in self._ahead if item[1].strip()]
        while len(found) < k:
            item = self._read()
            if item is None:
                break
            self._ahead.append(item)
            if item[1].strip():
                found.append(item)
        return found[:k]

    def number_of_next(self) -> int:
        return self._ahead[0][0] if self._ahead else self._next

    def rest(self) -> bytes:
        """Everything not read yet, as bytes (the lines looked ahead included)."""
        first = self.number_of_next()
        head = b"".join(line + b"\n" for _, line in self._ahead)
        self._ahead.clear()
        data = head + self._f.read(max(self._cap + 1 - len(head), 0))
        if len(data) > self._cap:
            raise LogUnreadable(
                f"the JSON document from line {first} is longer than {self._cap:,} bytes, the cap on one record"
            )
        return data


# -- the reader -----------------------------------------------------------------------------


class _Thread:
    """The latest request of one line of conversation, as the reader saw it."""

    __slots__ = ("bytes", "hashes", "messages", "size")

    def __init__(self, messages: list[dict[str, Any]], data: list[bytes], hashes: list[bytes]) -> None:
        self.messages, self.bytes, self.hashes = messages, data, hashes
        self.size = sum(len(b) for b in data) * 2  # the bytes and the parsed messages, roughly


class RecordReader:
    """Turns records into requests (one reader for logs, exports and the proxy's live calls); shares unchanged messages with the previous request of
    the same thread.

    An append-only log repeats its whole history on every line, and a log of interleaved
    conversations repeats each one's history every few lines. The reader remembers the latest
    request of the most recent threads (keyed by their first message) and reuses its message
    objects, canonical bytes and hashes for the leading run of equal messages: the work and the
    memory follow the new text, not the file size.
    """

    def __init__(self) -> None:
        self._threads: dict[bytes, _Thread] = {}  # least recently seen first
        self._thread_bytes = 0
        self._prev_tools: Sequence[Any] = []

    def read_lines(self, lines: Iterator[tuple[int, bytes]] | _Lines) -> Iterator[LogItem]:
        for number, line in lines:
            if not line or line.isspace():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                yield ParseProblem(number, f"not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            except UnicodeDecodeError:
                yield ParseProblem(number, "not valid UTF-8")
                continue
            except (ValueError, RecursionError) as exc:
                yield ParseProblem(number, f"not valid JSON ({type(exc).__name__})")
                continue
            yield from self.read_record(value, number)

    def read_document(self, doc: list[Any] | dict[str, Any]) -> Iterator[LogItem]:
        """A whole-file JSON value: one record, or an array of records (all on line 1)."""
        if isinstance(doc, list):
            for i, item in enumerate(doc, start=1):
                yield from self.read_record(item, 1, where=f"item {i}: ")
        else:
            yield from self.read_record(doc, 1)

    def read_record(self, value: Any, line: int, where: str = "") -> Iterator[LogItem]:
        """One JSON value: a session export, a request/response pair or a bare body.

        Never raises: a record that breaks the reader in a way no rule below foresaw is still
        one problem of its line, so the rest of the log is read.
        """
        try:
            if not isinstance(value, dict):
                raise LogRecordRejected(f"a JSON {_json_type(value)}, not an object")
            if "events" in value and "prefix" in value:
                for req, issue in requests_from_export(value, key=f"{line}:{where}"):
                    if issue is not None:
                        yield ParseProblem(line, where + issue)
                    if req is not None:
                        yield req
                return
            yield self.request(value)
        except LogRecordRejected as exc:
            yield ParseProblem(line, where + str(exc))
        except RecursionError:
            yield ParseProblem(line, where + "nested too deeply to read; skipped")
        except Exception as exc:  # a last resort: input must never stop the audit
            yield ParseProblem(
                line, f"{where}cannot be read (unexpected {type(exc).__name__}: {exc}); skipped. Please report this"
            )

    def request(self, record: dict[str, Any]) -> AuditRequest:
        """The request of one record, its messages shared with its thread's previous request."""
        body, usage = _body_and_usage(record)
        call = _exported_call(record)
        system, messages = split_body(body)
        tools = _tools_of(body)
        if tools == self._prev_tools:  # one tool list, serialized once by the auditor
            tools = self._prev_tools
        self._prev_tools = tools
        try:
            data, hashes = self._encode(messages)
        except (RecursionError, ValueError) as exc:
            raise LogRecordRejected(f"a message cannot be serialized ({type(exc).__name__})") from exc
        request = AuditRequest(
            system=system,
            tools=tools,
            messages=messages,
            cached_tokens=usage.counts["cached_tokens"],
            prompt_tokens=usage.counts["prompt_tokens"],
            completion_tokens=usage.counts["completion_tokens"],
            message_bytes=data,
            message_hashes=hashes,
            options=request_options(body),
            usage_split=usage.split,
            provider=usage.provider,
            model=usage.model,
            provider_cache=provider_raw(record, body),
            cache_ttls=_ttls(body),
        )
        return call.applied_to(request) if call is not None else request

    def _encode(self, messages: list[dict[str, Any]]) -> tuple[list[bytes], list[bytes]]:
        """Canonical bytes and hashes of ``messages``; the leading run equal to the thread's
        previous request is taken from it (its objects swapped in, so the next comparison is
        an identity check)."""
        if not messages:
            return [], []
        first = utf8(canonical_json(messages[0]))
        thread = self._threads.pop(first, None)
        data: list[bytes] = []
        if thread is not None:
            self._thread_bytes -= thread.size
            prev = thread.messages
            for i in range(min(len(messages), len(prev))):
                if messages[i] is not prev[i]:
                    if messages[i] != prev[i]:  # deep comparison in C, no Python loop over text
                        break
                    messages[i] = prev[i]
                data.append(thread.bytes[i])
            hashes = thread.hashes[: len(data)]
        else:
            hashes = []
        if not data:
            data.append(first)
        data.extend(utf8(canonical_json(m)) for m in messages[len(data) :])
        hashes.extend(segment_hash(b) for b in data[len(hashes) :])
        thread = self._threads[first] = _Thread(messages, data, hashes)
        self._thread_bytes += thread.size
        while len(self._threads) > _THREADS or (self._thread_bytes > _THREAD_BYTES and len(self._threads) > 1):
            self._thread_bytes -= self._threads.pop(next(iter(self._threads))).size  # the least recently seen
        return data, hashes


@dataclass(frozen=True)
class ExportedCall:
    """The ``ctxwright`` object of a line of ``ctxwright export ID --requests``: which session
    and call the request is, and what the live audit knew of it besides the body.

    Applied so that the audit of an export gives what the live audit stored (``ctxwright
    show``): the lines of one session are one conversation, a compaction before a call is
    reported as such, the backend's own reusable count is used as it was, and the request
    options are read from the body, as the live audit read them from the call (``audit/live.py:
    sent_options``).
    """

    session: str
    call_index: int | None
    marker: str | None
    reusable_tokens: int | None

    def applied_to(self, request: AuditRequest) -> AuditRequest:
        return replace(
            request,
            conversation=f"export:{self.session}",
            session=self.session,
            marker=self.marker,
            reusable_tokens_hint=self.reusable_tokens,
        )


def _exported_call(record: Mapping[str, Any]) -> ExportedCall | None:
    """The record's ``ctxwright`` object (see :class:`ExportedCall`), ``None`` when it has none.
    A call that failed is refused as a problem of its line: the live session audited no
    request it got no reply to."""
    meta = record.get("ctxwright")
    if meta is None:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("session"), str) or not meta["session"]:
        raise LogRecordRejected("'ctxwright' must be an object naming its 'session' (a ctxwright export's line)")
    index = first_int(meta.get("call_index"))
    if meta.get("error") is not None:
        raise LogRecordRejected(
            f"call {index if index is not None else '?'} of session {meta['session']} failed "
            f"({str(meta['error'])[:200]}); not audited, as the session did not audit it"
        )
    marker = meta.get("marker")
    return ExportedCall(
        session=meta["session"],
        call_index=index,
        marker=marker if marker in ("compaction", "status_replaced") else None,
        reusable_tokens=first_int(meta.get("reusable_tokens")),
    )


def _json_type(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null", dict: "object"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__
    )


# -- request bodies -------------------------------------------------------------------------


def request_from_record(record: dict[str, Any]) -> AuditRequest:
    """A bare request body, or ``{"request": body, "response": body}`` (usage from the response).

    A ``response`` next to a bare body's ``messages`` is read too, since some loggers
    store both side by side.
    """
    body, usage = _body_and_usage(record)
    system, messages = split_body(body)
    return AuditRequest(
        system=system,
        tools=_tools_of(body),
        messages=messages,
        cached_tokens=usage.counts["cached_tokens"],
        prompt_tokens=usage.counts["prompt_tokens"],
        completion_tokens=usage.counts["completion_tokens"],
        options=request_options(body),
        usage_split=usage.split,
        provider=usage.provider,
        model=usage.model,
        cache_ttls=_ttls(body),
    )


@dataclass(frozen=True)
class LoggedUsage:
    """What a logged response says it used: the counts, the provider's own split of the
    prompt (``None`` without a usage object), whose shape that was, and the model."""

    counts: dict[str, int | None]
    split: CacheUsage | None = None
    provider: str | None = None
    model: str | None = None


def _body_and_usage(record: dict[str, Any]) -> tuple[dict[str, Any], LoggedUsage]:
    if "request" in record and "messages" not in record:
        body = record["request"]
        if not isinstance(body, dict):
            raise LogRecordRejected(f"'request' is a JSON {_json_type(body)}, not an object")
    else:
        body = record
    response = response_usage(record.get("response"))
    found = raw_cache_usage(response)
    model = response.get("model") if isinstance(response.get("model"), str) else body.get("model")
    return body, LoggedUsage(
        counts=usage_of(response),
        split=found[1] if found else None,
        provider=found[0] if found else None,
        model=model if isinstance(model, str) else None,
    )


def _tools_of(body: dict[str, Any]) -> list[Any]:
    tools = body.get("tools")
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise LogRecordRejected(f"'tools' is a JSON {_json_type(tools)}, not an array")
    return tools


def request_options(body: Mapping[str, Any]) -> dict[str, Any]:
    """The options of a request body that the audit compares (:data:`OPTION_KEYS`)."""
    return {k: body[k] for k in OPTION_KEYS if k in body}


def sent_options(options: RequestOptions, tools: Sequence[ToolSpec], backend: str | None = None) -> dict[str, Any]:
    """The request options the audit compares (:func:`request_options`), of the body
    a call with these options was sent as.

    Why from :meth:`RequestOptions.body`: that is the code that puts them on the wire -- the
    OpenAI backend and a ``Context`` loop's ``ctx.request()`` send ``ChatRequest.openai_body``,
    the store records the same :class:`RequestOptions` and ``ctxwright export --requests``
    prints that body -- so the live audit, the rebuilt audit of a resumed session and the
    offline audit of the export compare the same values, written by one rule (``tool_choice``
    only with tools, a named tool as a function object, an unrecorded option left out). A
    change of them is a change of the prompt on llama.cpp's function-calling formats, which
    render the tools only when ``tool_choice`` is set and not ``"none"``. ``backend``: the
    session's backend; an option it applies to the reply only (``core/request.py:
    REPLY_ONLY_OPTIONS``: the embedded backend's ``tool_choice`` grammar) is no option of the
    prompt, and left out as the export leaves it out of the body."""
    return request_options(without_reply_only(options.body((), tuple(tools)), backend))


def usage_of(response: Any) -> dict[str, int | None]:
    """Token counts from a logged response; all ``None`` (unknown) when it has none.

    A streamed response logged as its list of chunks or events reports usage in pieces, each
    count taken from the last event that has it: OpenAI chat in its last chunk, the Responses
    API in ``response.completed``'s ``response``, Anthropic the prompt side in
    ``message_start``'s ``message`` and the output in ``message_delta``.
    """
    return read_usage(response_usage(response))


def response_usage(response: Any) -> dict[str, Any]:
    """A logged response as one body with one ``usage`` object (and llama.cpp's ``timings``),
    what :func:`~ctxwright.core.usage.read_usage` reads: the response itself, or for a stream
    its events' usage objects merged field by field, a later non-null value winning -- so
    Anthropic's ``message_start`` cache counts and ``message_delta`` output count land in one
    object, as the provider billed them. ``{}`` when it is neither.
    """
    if isinstance(response, dict):
        return response
    if not isinstance(response, list):
        return {}
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    merged: dict[str, Any] = {}
    for chunk in response:
        if not isinstance(chunk, dict):
            continue
        for part in (chunk, chunk.get("response"), chunk.get("message")):
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("usage"), dict):
                usage.update((k, v) for k, v in part["usage"].items() if v is not None)
            if isinstance(part.get("timings"), dict):
                timings.update(part["timings"])
            if isinstance(part.get("model"), str):
                merged["model"] = part["model"]
    if usage:
        merged["usage"] = usage
    if timings:
        merged["timings"] = timings
    return merged


def is_anthropic(body: dict[str, Any]) -> bool:
    """Whether ``body`` is an Anthropic Messages request rather than an OpenAI chat one."""
    if "system" in body or "anthropic_version" in body:
        return True
    messages = body.get("messages") or ()
    if messages and isinstance(messages[0], dict) and messages[0].get("role") in _SYSTEM_ROLES:
        return False  # Anthropic has no system role in its messages
    for m in messages:
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
    if "messages" not in body and "input" in body:
        return _split_responses(body)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise LogRecordRejected(_NO_MESSAGES)
    if not messages:
        raise LogRecordRejected("'messages' is empty: a request needs at least one message")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise LogRecordRejected(f"message {i} is a JSON {_json_type(m)}, not an object")
    if is_anthropic(body):
        return text_of(body.get("system")), [_unmarked(m) for m in messages]
    if messages[0].get("role") in _SYSTEM_ROLES:
        return text_of(messages[0].get("content")), messages[1:]
    return "", messages


def _ttls(body: dict[str, Any]) -> tuple[tuple[str, str], ...] | None:
    """The breakpoints' TTLs of an Anthropic body (``provider_log.breakpoint_ttls``); other APIs
    have no ``cache_control``, and their bodies are not walked for it."""
    return breakpoint_ttls(body) if "messages" in body and is_anthropic(body) else None


def _unmarked(m: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic message without its blocks' ``cache_control`` markers (the object itself
    when it has none). A marker says where to cache, not what: the cached prefix is the
    blocks' content, and moving the last breakpoint to the newest block on every call is
    the documented pattern, never a change of the earlier messages."""
    content = m.get("content")
    if not isinstance(content, list) or not any(isinstance(b, dict) and "cache_control" in b for b in content):
        return m
    blocks = [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b for b in content]
    return {**m, "content": blocks}


def _split_responses(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, items) of an OpenAI Responses API body.

    ``instructions`` is the system prompt; without it a leading ``system``/``developer``
    item is, as in chat completions. A string ``input`` is one user message. Every item --
    a message, a ``function_call``, its ``function_call_output``, a ``reasoning`` item -- is
    one message of the audit, kept as sent: the provider caches the items in this order.
    """
    items = body["input"]
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise LogRecordRejected(f"'input' is a JSON {_json_type(items)}, not a string or an array")
    if not items:
        raise LogRecordRejected("'input' is empty: a request needs at least one input item")
    for i, m in enumerate(items):
        if not isinstance(m, dict):
            raise LogRecordRejected(f"input item {i} is a JSON {_json_type(m)}, not an object")
    if body.get("instructions") is None and items[0].get("role") in _SYSTEM_ROLES:
        return text_of(items[0].get("content")), items[1:]
    return text_of(body.get("instructions")), items


def text_of(value: Any) -> str:
    """A system prompt's text: a string as is, a list of text blocks/parts joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(b["text"] for b in value if isinstance(b, dict) and isinstance(b.get("text"), str))
    return canonical_json(value)


# -- ctxwright session exports --------------------------------------------------------------

Issue = tuple[AuditRequest | None, str | None]


def requests_from_export(export: dict[str, Any], key: str = "") -> Iterator[Issue]:
    """One request per model call of a session export and of its child sessions, parent first.

    The events are parsed by ``core/events.py`` and replayed by the one renderer
    (``core/render.py``, the code that rendered the live requests) with the settings the
    export's ``meta`` records: the ``assistant`` event with ``call_index`` k answered the
    request rendered from every event before it. A ``compaction`` event, or a ``status`` event
    in ``replace`` mode, since the previous reply marks the next request, so the audit reports
    the change as intended rather than as an edit. Each session is a conversation of its own
    (``key`` makes it unique in the log). Yields ``(request, None)`` or ``(None, problem)``.

    The children are walked with a stack, not by recursion: an export nested a thousand deep
    is a problem to report, not a crash.
    """
    stack: list[tuple[dict[str, Any], str]] = [(export, key + "0")]
    while stack:
        exp, path = stack.pop()
        yield from _session_requests(exp, path)
        children = exp.get("children")
        if children is None:
            continue
        sid = _session_name(exp)
        if not isinstance(children, list):
            yield None, f"session {sid}: 'children' is a JSON {_json_type(children)}, not an array; skipped"
            continue
        kids = []
        for i, child in enumerate(children):
            if isinstance(child, dict):
                kids.append((child, f"{path}.{i}"))
            else:
                yield None, f"session {sid}: child {i} is a JSON {_json_type(child)}, not a session; skipped"
        stack.extend(reversed(kids))


def _session_name(export: Mapping[str, Any]) -> str:
    sid = export.get("id")
    return sid if isinstance(sid, str) and sid else "?"


def _session_requests(export: dict[str, Any], key: str) -> Iterator[Issue]:
    sid = _session_name(export)
    prefix = export.get("prefix")
    raw_events = export.get("events")
    if not isinstance(prefix, dict) or not isinstance(raw_events, list):
        yield None, f"session {sid}: 'prefix' must be an object and 'events' an array"
        return
    system = text_of(prefix.get("system"))
    tools: list[Any] = prefix["tools"] if isinstance(prefix.get("tools"), list) else []
    if prefix.get("tools") is not None and not isinstance(prefix.get("tools"), list):
        yield None, f"session {sid}: 'prefix.tools' is a JSON {_json_type(prefix['tools'])}, not an array; no tools"
    calls: dict[int, dict[str, Any]] = {}
    raw_calls = export.get("calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        yield None, f"session {sid}: 'calls' is a JSON {_json_type(raw_calls)}, not an array; usage unknown"
        raw_calls = []
    for i, c in enumerate(raw_calls or ()):
        index = first_int(c.get("call_index")) if isinstance(c, dict) else None
        if not isinstance(c, dict) or index is None:
            yield None, f"session {sid}: call record {i} has no integer call_index; its usage is unknown"
            continue
        if not isinstance(c.get("model"), str) and isinstance(export.get("model"), str):
            c = {**c, "model": export["model"]}  # a call recorded without its model: the session's
        calls[index] = c
    events: list[Event] = []
    for i, data in enumerate(raw_events):
        if not isinstance(data, dict):
            yield None, f"session {sid}: event {i} is not an object; skipped"
            continue
        try:
            events.append(event_from_dict(data, default_seq=i))
        except EventFormatError as exc:
            yield None, f"session {sid}: {exc}; skipped"
    for issue in compaction_problems(events):
        yield None, f"session {sid}: {issue}"
    try:
        settings = RenderSettings.from_meta(as_object(export.get("meta")))
    except (ValueError, TypeError) as exc:
        yield None, f"session {sid}: {exc}; rendered as recorded"
        settings = RenderSettings()
    produced = 0
    wire = WireCache()
    backend = export.get("backend") if isinstance(export.get("backend"), str) else None
    try:
        for rc in replay_calls(events, settings, tools_in_use=bool(tools)):
            call = calls.get(rc.reply.call_index if rc.reply.call_index is not None else -1) or {}
            yield _export_request(system, tools, rc.messages, wire, call, rc.marker, (key, sid), backend), None
            produced += 1
    except CtxwrightError as exc:  # e.g. a reasoning policy the recorded messages violate
        yield None, f"session {sid}: {exc}"
    if not produced:
        yield None, f"session {sid}: no model calls (no assistant event with a call_index)"


def compaction_problems(events: list[Event]) -> Iterator[str]:
    """What a session's compaction records name that is not there.

    A compaction may only replace or drop message events recorded before it, and place its
    note before an event of the session. Anything else was not written by ctxwright: the
    renderer ignores it (a note before no event is shown last), so the requests are still
    rebuilt, and each such record is reported with its event seq.
    """
    seqs = {ev.seq for ev in events}
    messages_before: set[int] = set()
    for ev in events:
        if isinstance(ev, CompactionEvent):
            where = f"compaction event {ev.seq}"
            for what, named in (("replace", sorted(ev.replace)), ("drop", sorted(set(ev.drop)))):
                missing = [s for s in named if s not in messages_before]
                if missing:
                    yield (
                        f"{where}: '{what}' names event(s) {_seq_list(missing)}, which are not message events "
                        "recorded before it; ignored"
                    )
            if ev.note is not None and ev.note.before_seq not in seqs:
                yield f"{where}: its note is placed before event {ev.note.before_seq}, which does not exist; shown last"
        elif isinstance(ev, MessageEvent):
            messages_before.add(ev.seq)


def _seq_list(seqs: list[int]) -> str:
    shown = ", ".join(str(s) for s in seqs[:5])
    return shown + (f" and {len(seqs) - 5} more" if len(seqs) > 5 else "")


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


def _call_options(call: dict[str, Any], tools: list[Any], backend: str | None) -> dict[str, Any] | None:
    """:func:`sent_options` of a session export's call record, as the live audit compared them;
    ``None`` (not compared) for a record without them or one that cannot be read."""
    if not call or "tool_choice" not in call:
        return None
    try:
        specs = tuple(ToolSpec.from_wire(t) for t in tools)
        return sent_options(CallRecord.from_dict(call).options, specs, backend)
    except Exception:  # a hand-edited record: its options are not compared, the rest is audited
        return None


def _export_request(
    system: str,
    tools: list[Any],
    messages: list[Message],
    wire: Callable[[Message], dict[str, Any]],
    call: dict[str, Any],
    marker: str | None,
    conversation: tuple[str, str],
    backend: str | None = None,
) -> AuditRequest:
    """The request of one call; exact reusable tokens if the backend recorded them."""
    usage = as_object(call.get("usage"))
    raw = as_object(usage.get("raw"))
    found = raw_cache_usage(raw)
    model = call.get("model")
    return AuditRequest(
        system=system,
        tools=tools,
        options=_call_options(call, tools, backend),
        messages=[wire(m) for m in messages],
        cached_tokens=first_int(call.get("cached_tokens")),
        prompt_tokens=first_int(call.get("prompt_tokens")),
        completion_tokens=first_int(call.get("completion_tokens")),
        marker=marker,
        reusable_tokens_hint=first_int(raw.get("reusable_tokens")),
        message_bytes=[m.canonical_utf8 for m in messages],
        conversation=conversation[0],
        session=conversation[1],
        usage_split=found[1] if found else None,
        provider=found[0] if found else None,
        model=model if isinstance(model, str) else None,
    )
