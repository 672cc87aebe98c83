"""What ``ctxwright proxy`` recorded, read back as the records ``ctxwright audit`` reads.

Why here: the proxy writes these rows (``proxy/store.py``), and ``ctxwright audit
--proxy-session`` and the HTML report read them. This is the one reader of a proxy session; it
hands out the same record shape a request log has -- one ``{"request": body, "response":
body}`` object per model call -- so the audit (``audit/logs.py``, a lower layer) reads it
without knowing the proxy: the CLI and the report (both at or above ``proxy``) fetch the
records here and pass them in.

A streamed response is recorded as the server-sent-event bytes the client received; it is
read back as the list of its events' JSON data (the shape ``audit/logs.py`` takes the usage
from), ``[DONE]`` and comments left out. Bodies are stored decoded from their
``Content-Encoding`` (``proxy/decode.py``): the wire bytes went through untouched, the
audit needs the text.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import TYPE_CHECKING, Any

import orjson

from ctxwright.proxy.store import ProxyLog

if TYPE_CHECKING:
    from ctxwright.store.sessions import Store

#: The model APIs the proxy recognises, by the path a client posts to (the path is forwarded
#: unchanged, so a base URL's prefix such as ``/v1`` or ``/openai/v1`` may come before it).
API_SUFFIXES = (
    ("/chat/completions", "openai_chat"),
    ("/responses", "openai_responses"),
    ("/messages", "anthropic_messages"),
)


def api_of(method: str, path: str) -> str | None:
    """The model API a request is a call of, or ``None`` (a model list, a file upload, a
    token count: forwarded and recorded, but not a model call)."""
    if method.upper() != "POST":
        return None
    bare = path.split("?", 1)[0].rstrip("/")
    for suffix, api in API_SUFFIXES:
        if bare.endswith(suffix):
            return api
    return None


#: a run of digits that may be an integer past 64 bits, which orjson reads as a float
_LONG_DIGITS = re.compile(r"\d{19}")


def _event_value(text: str) -> Any:
    """One event's payload as ``json.loads`` reads it, parsed by orjson: a stream is tens to
    thousands of small payloads per call, each parsed by the recorder, and orjson reads them
    several times faster. What orjson reads differently is left to ``json``: an integer past
    64 bits (orjson makes it a float), and whatever orjson refuses that ``json`` reads
    (``NaN``, lone surrogate escapes, nesting past orjson's depth); neither raises
    ``ValueError`` (or ``RecursionError``)."""
    if _LONG_DIGITS.search(text):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def sse_events(data: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of a server-sent-event stream, in order.

    Lines of one event's ``data:`` fields are joined with newlines (the SSE rule); ``[DONE]``,
    comments and payloads that are not JSON are left out.
    """
    out: list[Any] = []
    buf: list[str] = []

    def flush() -> None:
        if buf:
            text = buf[0] if len(buf) == 1 else "\n".join(buf)
            buf.clear()
            if text.strip() != "[DONE]":
                with contextlib.suppress(ValueError, RecursionError):
                    out.append(_event_value(text))

    for raw_line in data.decode("utf-8", "replace").splitlines():
        if not raw_line:
            flush()
        elif raw_line.startswith("data:"):
            value = raw_line[5:]
            buf.append(value[1:] if value.startswith(" ") else value)
    flush()
    return out


def is_event_stream(content_type: str | None) -> bool:
    return (content_type or "").split(";", 1)[0].strip().lower() == "text/event-stream"


def response_value(row: dict[str, Any]) -> Any:
    """The recorded response of one exchange: a JSON body, the list of a stream's events, or
    ``None`` when nothing readable was recorded."""
    body = row.get("response_body")
    if body is None:
        return None
    if is_event_stream(row.get("response_content_type")):
        return sse_events(bytes(body))
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        return None


def request_value(row: dict[str, Any]) -> Any:
    """The recorded request body as JSON, or ``None`` (not JSON, or over the recording cap)."""
    body = row.get("request_body")
    if body is None or not row.get("request_parsed"):
        return None
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        return None


#: What each record's ``proxy`` object carries about the exchange besides the bodies.
_META = (
    "id",
    "call_index",
    "method",
    "path",
    "api",
    "streamed",
    "status",
    "outcome",
    "error",
    "started_at",
    "ended_at",
    "ttfb_ms",
    "total_ms",
    "request_bytes",
    "response_bytes",
)


def proxy_sessions(store: Store) -> list[dict[str, Any]]:
    """Every proxy session, newest first: ``id``, ``created_at``, ``last_at``, ``calls``,
    ``grouped_by`` (``header``, ``prompt_cache_key``, ``user``, ``metadata.user_id``,
    ``previous_response_id``, ``continuity`` or ``repeated_messages``: the rule that made the
    session, ``proxy/sessions.py``), ``group_key``, ``api`` and ``upstream``."""
    return ProxyLog(store).session_rows()


def proxy_session_requests(
    store: Store, session_id: str, start: int = 0, stop: int | None = None
) -> list[dict[str, Any]]:
    """The model calls of one proxy session (id or unique prefix), in order, as the records of a
    request log: ``{"request": body, "response": body or stream events, "proxy": {...}}``.

    ``proxy`` holds the exchange's metadata (:data:`_META`: status, outcome such as
    ``complete`` or ``client_disconnected``, timings, sizes) and the live audit stored with
    it (``audit``). A call whose request body was not JSON, or was over the recording cap,
    has ``request`` ``None``; ``audit/logs.py`` reports such a record as a problem of its
    line and reads on. ``start``/``stop``: only those calls, counted from 0 in call order
    (``ProxyLog.exchange_rows``).
    """
    log = ProxyLog(store)
    sid = log.session_row(session_id)["id"]
    out = []
    for row in log.exchange_rows(sid, start, stop):
        meta = {k: row.get(k) for k in _META}
        meta["streamed"] = bool(meta["streamed"])
        meta["session_id"] = sid
        meta["audit"] = row.get("audit") or {}
        out.append({"request": request_value(row), "response": response_value(row), "proxy": meta})
    return out


__all__ = [
    "api_of",
    "is_event_stream",
    "proxy_session_requests",
    "proxy_sessions",
    "request_value",
    "response_value",
    "sse_events",
]
