"""A loopback upstream for the proxy's tests and benchmark: speaks OpenAI chat completions, the
OpenAI Responses API and Anthropic Messages, streaming and not, on real HTTP (Starlette on
uvicorn).

Why our own: the proxy's promise is about bytes -- the upstream must receive exactly what the
client sent and the client exactly what the upstream answered -- so the upstream records the
raw bytes and headers of every request and the raw bytes of every answer it sends. It rejects
what the providers reject (a missing key -- ``x-api-key`` or a bearer token --, a missing ``anthropic-version`` header, a body that is
not JSON or lacks ``model``/``messages``/``input``/``max_tokens``) with the providers' own
error shapes, so an SDK that talks to it through the proxy is exercised as against the real
service.

A request may ask for a behaviour with the ``x-test-behaviour`` header: ``garbage`` (a 200
whose body is not JSON), ``gzip`` (a gzip-compressed answer), ``slow=S`` (wait S seconds before
answering), ``drip=N`` (a stream of N events 50 ms apart, for disconnect tests), ``stall=S`` (a stream that goes
silent for S seconds after its first event), ``status=C``
(answer with status C and a provider error body), ``no-cached`` (OpenAI chat usage without
``prompt_tokens_details``, as servers that report no cached-token count send it), ``hold=S`` (answer
nothing for S seconds unless the caller closes the connection first: ``Seen.closed_at`` says when it
did), ``bomb=M`` (a gzip answer that decodes to M MiB of zeros).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ctxwright.proxy.server import ProxyThread


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    sent: bytes = b""  # what the upstream answered, byte for byte (the whole stream when streamed)
    stream_closed_early: bool = False
    closed_at: float | None = None  # time.monotonic() when the caller closed the connection (``hold=S``)


@dataclass
class Upstream:
    """The app plus what it saw; ``with Upstream().serve() as up: up.url``."""

    seen: list[Seen] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=lambda: {"prompt": 120, "cached": 64, "completion": 5})
    text: str = "Hello there."
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: ProxyThread | None = None

    def serve(self) -> Upstream:
        self.thread = ProxyThread(self.app()).start()
        return self

    @property
    def url(self) -> str:
        assert self.thread is not None
        return self.thread.url

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the app ------------------------------------------------------------------------
    def app(self) -> Starlette:
        return Starlette(
            routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "PUT", "DELETE", "PATCH"])]
        )

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        raw_path = request.scope.get("raw_path", b"").decode("latin-1")
        query = request.scope.get("query_string", b"").decode("latin-1")
        seen = Seen(
            request.method,
            raw_path + (f"?{query}" if query else ""),
            {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]},
            raw,
        )
        with self.lock:
            self.seen.append(seen)
        behaviour = request.headers.get("x-test-behaviour", "")
        if behaviour.startswith("slow="):
            await asyncio.sleep(float(behaviour[5:]))
        if behaviour.startswith("hold="):
            try:
                async with asyncio.timeout(float(behaviour[5:])):
                    while (await request.receive())["type"] != "http.disconnect":
                        pass
                seen.closed_at = time.monotonic()
            except TimeoutError:
                pass
        if behaviour.startswith("bomb="):
            body = gzip_bomb(int(behaviour[5:]))
            seen.sent = body
            return Response(body, headers={"content-encoding": "gzip"}, media_type="application/json")
        if behaviour.startswith("status="):
            code = int(behaviour[7:])
            return self._send(
                seen, code, _openai_error("Rate limit reached", "rate_limit_exceeded"), {"retry-after": "7"}
            )
        if behaviour == "garbage":
            return self._send(seen, 200, b"<html>upstream broke</html>\x00\xff", content_type="application/json")
        path = request.url.path
        if request.method == "GET":
            return self._send(
                seen, 200, json.dumps({"object": "list", "data": [{"id": "m1", "object": "model"}]}).encode()
            )
        if path.endswith("/messages"):
            return self._anthropic(seen, raw, behaviour)
        if path.endswith("/chat/completions") or path.endswith("/responses"):
            auth = request.headers.get("authorization", "")
            if not auth.startswith("Bearer "):
                return self._send(seen, 401, _openai_error("You didn't provide an API key.", "invalid_api_key"))
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(seen, 400, _openai_error("We could not parse the JSON body of your request.", None))
            if path.endswith("/responses"):
                return self._responses(seen, body, behaviour)
            return self._chat(seen, body, behaviour)
        return self._send(seen, 404, _openai_error(f"Invalid URL (POST {path})", None))

    def _send(
        self,
        seen: Seen,
        status: int,
        body: bytes,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
        compress: bool = False,
    ) -> Response:
        hdrs = {"x-request-id": "req_123", **(headers or {})}
        if compress:
            body = gzip.compress(body)
            hdrs["content-encoding"] = "gzip"
        seen.sent = body
        return Response(body, status_code=status, headers=hdrs, media_type=content_type)

    def _stream(
        self, seen: Seen, events: list[bytes], drip: int = 0, stall: float = 0.0, linger: float = 0.0
    ) -> Response:
        async def gen() -> Any:
            try:
                for i, ev in enumerate(events):
                    if i == 1 and stall:
                        await asyncio.sleep(stall)
                    seen.sent += ev
                    yield ev
                if linger:  # the last event is sent; the body ends only later (a busy server)
                    await asyncio.sleep(linger)
                for i in range(drip):
                    await asyncio.sleep(0.05)
                    ev = b'data: {"drip": %d}\n\n' % i
                    seen.sent += ev
                    yield ev
            except BaseException:
                seen.stream_closed_early = True
                raise

        return StreamingResponse(gen(), media_type="text/event-stream", headers={"x-request-id": "req_123"})

    def _usage_openai(self, behaviour: str = "") -> dict[str, Any]:
        u = self.usage
        usage: dict[str, Any] = {
            "prompt_tokens": u["prompt"],
            "completion_tokens": u["completion"],
            "total_tokens": u["prompt"] + u["completion"],
        }
        if behaviour != "no-cached":
            usage["prompt_tokens_details"] = {"cached_tokens": u["cached"]}
        return usage

    def _chat(self, seen: Seen, body: dict[str, Any], behaviour: str) -> Response:
        if not isinstance(body.get("messages"), list) or not body.get("model"):
            return self._send(seen, 400, _openai_error("'messages' and 'model' are required", None))
        if body.get("stream"):
            base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": body["model"]}
            chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
            chunks += [{**base, "choices": [{"index": 0, "delta": {"content": piece}}]} for piece in _pieces(self.text)]
            chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "choices": [], "usage": self._usage_openai(behaviour)})
            events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
            return self._stream(seen, events, _drip(behaviour), _stall(behaviour), _linger(behaviour))
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.text}, "finish_reason": "stop"}],
            "usage": self._usage_openai(behaviour),
        }
        return self._send(seen, 200, json.dumps(reply).encode(), compress=behaviour == "gzip")

    def _responses(self, seen: Seen, body: dict[str, Any], behaviour: str) -> Response:
        if body.get("input") is None or not body.get("model"):
            return self._send(seen, 400, _openai_error("Missing required parameter: 'input'.", None))
        u = self.usage
        usage = {
            "input_tokens": u["prompt"],
            "input_tokens_details": {"cached_tokens": u["cached"]},
            "output_tokens": u["completion"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["prompt"] + u["completion"],
        }
        n = len(self.seen)
        message = {
            "id": f"msg_{n}",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": self.text, "annotations": []}],
        }
        resp = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": body["model"],
            "output": [message],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": usage,
        }
        if body.get("stream"):
            created = {**resp, "status": "in_progress", "output": [], "usage": None}
            part = {"type": "output_text", "text": "", "annotations": []}
            at = {"item_id": message["id"], "output_index": 0, "content_index": 0}
            evs: list[tuple[str, dict[str, Any]]] = [
                ("response.created", {"response": created}),
                (
                    "response.output_item.added",
                    {"output_index": 0, "item": {**message, "status": "in_progress", "content": []}},
                ),
                ("response.content_part.added", {**at, "part": part}),
            ]
            evs += [("response.output_text.delta", {**at, "delta": p}) for p in _pieces(self.text)]
            evs += [
                ("response.output_text.done", {**at, "text": self.text}),
                ("response.content_part.done", {**at, "part": {**part, "text": self.text}}),
                ("response.output_item.done", {"output_index": 0, "item": message}),
                ("response.completed", {"response": resp}),
            ]
            events = [
                f"event: {name}\ndata: ".encode()
                + json.dumps({"type": name, "sequence_number": i, **data}).encode()
                + b"\n\n"
                for i, (name, data) in enumerate(evs)
            ]
            return self._stream(seen, events, _drip(behaviour), _stall(behaviour), _linger(behaviour))
        return self._send(seen, 200, json.dumps(resp).encode(), compress=behaviour == "gzip")

    def _anthropic(self, seen: Seen, raw: bytes, behaviour: str) -> Response:
        h = seen.headers
        if not h.get("x-api-key") and not h.get("authorization", "").startswith("Bearer "):
            return self._send(seen, 401, _anthropic_error("authentication_error", "x-api-key header is required"))
        if not h.get("anthropic-version"):
            return self._send(
                seen, 400, _anthropic_error("invalid_request_error", "anthropic-version: header is required")
            )
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(seen, 400, _anthropic_error("invalid_request_error", "messages: not valid JSON"))
        for need in ("model", "max_tokens", "messages"):
            if need not in body:
                return self._send(seen, 400, _anthropic_error("invalid_request_error", f"{need}: Field required"))
        u = self.usage
        usage = {
            "input_tokens": u["prompt"] - u["cached"],
            "cache_read_input_tokens": u["cached"],
            "cache_creation_input_tokens": 0,
            "output_tokens": u["completion"],
        }
        msg = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": self.text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if body.get("stream"):
            start = {**msg, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
            evs: list[tuple[str, dict[str, Any]]] = [
                ("message_start", {"message": start}),
                ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            ]
            evs += [
                ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}})
                for p in _pieces(self.text)
            ]
            evs += [
                ("content_block_stop", {"index": 0}),
                (
                    "message_delta",
                    {
                        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": u["completion"]},
                    },
                ),
                ("message_stop", {}),
            ]
            events = [
                f"event: {name}\ndata: ".encode() + json.dumps({"type": name, **data}).encode() + b"\n\n"
                for name, data in evs
            ]
            return self._stream(seen, events, _drip(behaviour), _stall(behaviour), _linger(behaviour))
        return self._send(seen, 200, json.dumps(msg).encode(), compress=behaviour == "gzip")


_BOMBS: dict[int, bytes] = {}


def gzip_bomb(mib: int) -> bytes:
    """gzip of ``mib`` MiB of zeros (about 1 KB per MiB), made without holding the zeros."""
    if mib not in _BOMBS:
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        zeros = bytes(1024 * 1024)
        _BOMBS[mib] = b"".join(c.compress(zeros) for _ in range(mib)) + c.flush()
    return _BOMBS[mib]


def _stall(behaviour: str) -> float:
    return float(behaviour[6:]) if behaviour.startswith("stall=") else 0.0


def _linger(behaviour: str) -> float:
    return float(behaviour[7:]) if behaviour.startswith("linger=") else 0.0


def _drip(behaviour: str) -> int:
    return int(behaviour[5:]) if behaviour.startswith("drip=") else 0


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _openai_error(message: str, code: str | None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()


def _anthropic_error(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
