"""A scripted HTTP server that speaks the OpenAI chat-completions wire format.

Why our own: tests and benchmarks need to exercise the real SDK and real HTTP (retries,
headers, status codes, provider-specific error bodies and usage fields) without a model
or the internet. The server replays a queue of canned behaviours, one per request, and
records every request it received so a test can assert the exact body that was sent.

Usage::

    with FakeOpenAIServer([FakeOpenAIServer.reply_text("hi")]) as srv:
        backend = OpenAIBackend("m", base_url=srv.url)
        ...
        assert srv.requests[0]["messages"] == [...]

A behaviour may also be a callable ``(request_json) -> Behaviour`` so a benchmark can
compute replies from what was sent; ``fallback`` answers once the queue is empty.

Streaming as OpenAI does it: a request with ``"stream": true`` gets a 200 completion body
as server-sent events over chunked transfer encoding -- a role delta, the content in small
pieces, each tool call's id and name then its arguments in pieces, a chunk with the finish
reason, a final ``choices: []`` chunk with the usage only when ``stream_options.include_usage``
asked for it, then ``data: [DONE]``. ``Behaviour.cut_after`` ends a stream (or a plain
body) early and closes the connection, as a crashing server or proxy does.

It rejects what OpenAI rejects about tool pairing, with OpenAI's own HTTP 400 bodies (see
:func:`pairing_error`), before any scripted behaviour is used: an assistant message whose
``tool_calls`` are not all answered by the ``tool`` messages right after it, and a ``tool``
message that answers no such call. ``validate_pairing=False`` turns that off for a test that
plays a lenient server (llama.cpp's server does not check). Rejected requests are recorded
too, and listed in ``rejected``.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JSONDict = dict[str, Any]


@dataclass(frozen=True)
class Behaviour:
    """One canned HTTP reply: status, raw body bytes, extra headers, optional delay."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay_s: float = 0.0
    #: close the connection after this many bytes of the body (a plain reply, whose
    #: Content-Length still announces the whole body) or stream events (a streamed one)
    cut_after: int | None = None


Responder = Callable[[Any], Behaviour]
Scripted = Behaviour | Responder


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: path, headers (lower-cased names), raw bytes, parsed JSON."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode("utf-8")


class FakeOpenAIServer:
    """A ThreadingHTTPServer on 127.0.0.1 (free port) that replays scripted behaviours."""

    def __init__(
        self,
        behaviours: Iterable[Scripted] = (),
        *,
        model: str = "fake-model",
        fallback: Responder | None = None,
        validate_pairing: bool = True,
    ) -> None:
        self.model = model
        self.fallback = fallback
        self.validate_pairing = validate_pairing
        #: the 400 bodies sent for requests that broke tool pairing, in order
        self.rejected: list[JSONDict] = []
        self._queue: deque[Scripted] = deque(behaviours)
        self._recorded: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        handler = _make_handler(self)
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # a slow scripted reply must not hang shutdown
        # A short poll interval keeps stop() fast (the default makes every test wait 0.5 s).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started: use `with FakeOpenAIServer() as srv` or call start()")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """The API root to pass as ``base_url``, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script and record ------------------------------------------------------------

    def enqueue(self, *behaviours: Scripted) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    @property
    def pending(self) -> int:
        """Behaviours not yet consumed."""
        with self._lock:
            return len(self._queue)

    @property
    def recorded(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._recorded)

    @property
    def requests(self) -> list[Any]:
        """Parsed JSON bodies of every chat-completions request received, in order."""
        with self._lock:
            return [r.json for r in self._recorded if r.path.endswith("/chat/completions")]

    def _next(self, request_json: Any) -> Behaviour:
        with self._lock:
            item = self._queue.popleft() if self._queue else None
        if item is None:
            if self.fallback is not None:
                return self.fallback(request_json)
            return self.error(
                500,
                {
                    "error": {
                        "message": "FakeOpenAIServer: no scripted behaviour left for this request "
                        "(the test sent more requests than it queued)",
                        "type": "fake_server_script_exhausted",
                        "code": None,
                    }
                },
                headers={"x-should-retry": "false"},
            )
        return item if isinstance(item, Behaviour) else item(request_json)

    # -- behaviour constructors --------------------------------------------------------

    @staticmethod
    def reply_json(
        body: Any, status: int = 200, headers: dict[str, str] | None = None, delay_s: float = 0.0
    ) -> Behaviour:
        """Any JSON body, verbatim."""
        return Behaviour(status=status, body=_json_bytes(body), headers=dict(headers or {}), delay_s=delay_s)

    @classmethod
    def completion_body(
        cls,
        message: JSONDict,
        *,
        finish_reason: str = "stop",
        usage: JSONDict | None = None,
        timings: JSONDict | None = None,
        model: str = "fake-model",
        extra: JSONDict | None = None,
    ) -> JSONDict:
        """A chat.completion object around one assistant ``message``.

        ``usage=None`` leaves the field out entirely (a server that reports nothing).
        """
        body: JSONDict = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", **message},
                    "finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if usage is not None:
            body["usage"] = usage
        if timings is not None:
            body["timings"] = timings
        body.update(extra or {})
        return body

    @classmethod
    def reply_text(
        cls,
        text: str | None,
        *,
        reasoning_content: str | None = None,
        usage: JSONDict | None = None,
        timings: JSONDict | None = None,
        finish_reason: str = "stop",
        model: str = "fake-model",
        message_extra: JSONDict | None = None,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> Behaviour:
        """A plain assistant text reply (optionally with reasoning and provider usage)."""
        message: JSONDict = {"content": text}
        if reasoning_content is not None:
            message["reasoning_content"] = reasoning_content
        message.update(message_extra or {})
        body = cls.completion_body(message, finish_reason=finish_reason, usage=usage, timings=timings, model=model)
        return cls.reply_json(body, headers=headers, delay_s=delay_s)

    @classmethod
    def reply_tool_calls(
        cls,
        calls: Iterable[tuple[str | None, str, str]],
        *,
        content: str | None = None,
        usage: JSONDict | None = None,
        timings: JSONDict | None = None,
        model: str = "fake-model",
        headers: dict[str, str] | None = None,
    ) -> Behaviour:
        """An assistant reply requesting tool calls, given as ``(id, name, arguments)``;
        an id of ``None`` leaves the ``id`` key out (servers that send none).

        ``arguments`` is sent as the exact string given, so tests can check it survives
        byte-for-byte (including invalid JSON).
        """
        tool_calls = [
            {
                "type": "function",
                "function": {"name": name, "arguments": args},
                **({"id": cid} if cid is not None else {}),
            }
            for cid, name, args in calls
        ]
        body = cls.completion_body(
            {"content": content, "tool_calls": tool_calls},
            finish_reason="tool_calls",
            usage=usage,
            timings=timings,
            model=model,
        )
        return cls.reply_json(body, headers=headers)

    @staticmethod
    def cut(behaviour: Behaviour, after: int) -> Behaviour:
        """``behaviour`` cut off after ``after`` bytes (plain) or stream events (streamed)."""
        return replace(behaviour, cut_after=after)

    @staticmethod
    def error(status: int, body: Any, headers: dict[str, str] | None = None) -> Behaviour:
        """An HTTP error; ``body`` is JSON-encoded unless already ``bytes`` or ``str``."""
        if isinstance(body, bytes):
            raw = body
        elif isinstance(body, str):
            raw = body.encode("utf-8")
        else:
            raw = _json_bytes(body)
        return Behaviour(status=status, body=raw, headers=dict(headers or {}))

    @staticmethod
    def malformed(data: bytes, status: int = 200, content_type: str = "application/json") -> Behaviour:
        """Raw bytes that claim to be JSON (or whatever ``content_type`` says)."""
        return Behaviour(status=status, body=data, content_type=content_type)

    @classmethod
    def rate_limited(cls, retry_after_ms: int = 1) -> Behaviour:
        """A 429 as OpenAI sends it, with a ``retry-after-ms`` the SDK honours."""
        return cls.error(
            429,
            {
                "error": {
                    "message": "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1.",
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
            headers={"retry-after-ms": str(retry_after_ms)},
        )

    @classmethod
    def context_length_error(cls, style: str = "openai", n_ctx: int = 8192, n_prompt: int = 9000) -> Behaviour:
        """A "prompt too long" 400, worded as ``openai``, ``deepseek``, ``vllm`` or ``llamacpp``."""
        body: JSONDict
        if style == "openai":
            body = {
                "error": {
                    "message": f"This model's maximum context length is {n_ctx} tokens. However, your "
                    f"messages resulted in {n_prompt} tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        elif style == "deepseek":
            body = {
                "error": {
                    "message": f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                    f"{n_prompt} tokens ({n_prompt} in the messages, 0 in the completion). Please "
                    "reduce the length of the messages or completion.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_request_error",
                }
            }
        elif style == "vllm":
            body = {
                "object": "error",
                "message": f"This model's maximum context length is {n_ctx} tokens. However, you "
                f"requested {n_prompt} tokens in the messages, Please reduce the length "
                "of the messages.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        elif style == "llamacpp":
            body = {
                "error": {
                    "code": 400,
                    "message": f"the request exceeds the available context size ({n_prompt} "
                    f"tokens > {n_ctx}), try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": n_prompt,
                    "n_ctx": n_ctx,
                }
            }
        else:
            raise ValueError(f"unknown style {style!r}: use openai, deepseek, vllm or llamacpp")
        return cls.error(400, body)

    # -- usage shapes, one per provider ------------------------------------------------

    @staticmethod
    def usage_openai(prompt: int, completion: int, cached: int | None = None) -> JSONDict:
        """OpenAI usage; ``cached=None`` omits ``prompt_tokens_details`` entirely."""
        usage: JSONDict = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        return usage

    @staticmethod
    def usage_deepseek(prompt: int, completion: int, hit: int) -> JSONDict:
        """DeepSeek usage: cache hits and misses as top-level usage fields."""
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_cache_hit_tokens": hit,
            "prompt_cache_miss_tokens": prompt - hit,
        }

    @staticmethod
    def timings_llamacpp(
        cache_n: int, prompt_n: int, prompt_ms: float, predicted_n: int, predicted_ms: float
    ) -> JSONDict:
        """llama.cpp server's top-level ``timings`` object (cache_n = reused prompt tokens)."""
        return {
            "cache_n": cache_n,
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(prompt_n, 1),
            "prompt_per_second": 1000.0 * prompt_n / prompt_ms if prompt_ms else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / max(predicted_n, 1),
            "predicted_per_second": 1000.0 * predicted_n / predicted_ms if predicted_ms else 0.0,
        }


class _QuietServer(ThreadingHTTPServer):
    """A client that vanished (killed, timed out) is not a server error worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def pairing_error(messages: Any) -> JSONDict | None:
    """OpenAI's HTTP 400 body for a request whose tool messages are not paired, else ``None``.

    The wording is OpenAI's (typo "preceeding" included), with ``param`` naming the offending
    message as ``messages.[i].role``:

    * an assistant message with ``tool_calls`` must be followed, before any other message or
      the end, by one ``tool`` message per call id -- "An assistant message with 'tool_calls'
      must be followed by tool messages responding to each 'tool_call_id'. The following
      tool_call_ids did not have response messages: ...";
    * a ``tool`` message must answer a call of that assistant message not answered yet --
      "Invalid parameter: messages with role 'tool' must be a response to a preceeding
      message with 'tool_calls'."
    """
    if not isinstance(messages, list):
        return None
    open_ids: list[str] = []

    def err(message: str, index: int) -> JSONDict:
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": f"messages.[{index}].role",
                "code": None,
            }
        }

    def unanswered(index: int) -> JSONDict:
        return err(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_ids)}",
            index,
        )

    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_ids:
                return err(
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
                    "'tool_calls'.",
                    i,
                )
            open_ids.remove(cid)
            continue
        if open_ids:
            return unanswered(i)
        if role == "assistant":
            open_ids = [tc.get("id") for tc in m.get("tool_calls") or [] if isinstance(tc, dict)]
    if open_ids:
        return unanswered(len(messages))
    return None


def _make_handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like real servers

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

        def _read(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _record(self, raw: bytes) -> Any:
            try:
                parsed: Any = json.loads(raw) if raw else None
            except ValueError:
                parsed = None
            rec = RecordedRequest(
                method=self.command,
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                raw=raw,
                json=parsed,
            )
            with server._lock:
                server._recorded.append(rec)
            return parsed

        def _send(self, b: Behaviour, request: Any = None) -> None:
            if b.delay_s:
                time.sleep(b.delay_s)
            events = _stream_events(b, request)
            try:
                if events is not None:
                    self._send_stream(b, events)
                    return
                self.send_response(b.status)
                self.send_header("Content-Type", b.content_type)
                self.send_header("Content-Length", str(len(b.body)))
                for k, v in b.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                if b.cut_after is None:
                    self.wfile.write(b.body)
                else:  # announce the whole body, send part of it, hang up
                    self.wfile.write(b.body[: b.cut_after])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. a timeout test): nothing to tell it

        def _send_stream(self, b: Behaviour, events: list[bytes]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            for k, v in b.headers.items():
                self.send_header(k, v)
            self.end_headers()
            for i, event in enumerate(events):
                if b.cut_after is not None and i >= b.cut_after:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        def do_POST(self) -> None:
            parsed = self._record(self._read())
            if self.path.rstrip("/").endswith("/chat/completions"):
                problem = pairing_error(parsed.get("messages")) if isinstance(parsed, dict) else None
                if problem is not None and server.validate_pairing:
                    with server._lock:
                        server.rejected.append(problem)
                    self._send(FakeOpenAIServer.error(400, problem))
                    return
                self._send(server._next(parsed), parsed)
            else:
                self._send(
                    FakeOpenAIServer.error(
                        404,
                        {
                            "error": {
                                "message": f"FakeOpenAIServer serves POST /v1/chat/completions, not {self.path}",
                                "type": "not_found",
                                "code": None,
                            }
                        },
                    )
                )

        def do_GET(self) -> None:
            self._record(b"")
            if self.path.rstrip("/").endswith("/models"):
                self._send(
                    FakeOpenAIServer.reply_json(
                        {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "fake"}]}
                    )
                )
            else:
                self._send(
                    FakeOpenAIServer.error(
                        404, {"error": {"message": f"no GET route {self.path}", "type": "not_found", "code": None}}
                    )
                )

    return Handler


def _pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _stream_events(b: Behaviour, request: Any) -> list[bytes] | None:
    """The server-sent events OpenAI sends for a streamed request whose non-streamed answer
    would be ``b``; ``None`` when ``b`` is not streamed (no ``stream: true``, an error, or a
    body that is not a completion)."""
    if not (isinstance(request, dict) and request.get("stream") is True and b.status == 200):
        return None
    try:
        body = json.loads(b.body)
    except ValueError:
        return None
    if not (isinstance(body, dict) and isinstance(body.get("choices"), list) and body["choices"]):
        return None
    choice = body["choices"][0]
    message = choice.get("message") or {}
    base = {k: body[k] for k in ("id", "created", "model") if k in body} | {"object": "chat.completion.chunk"}

    def chunk(delta: JSONDict, finish: str | None = None) -> JSONDict:
        return base | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out: list[JSONDict] = [chunk({"role": "assistant", "content": ""})]
    if isinstance(message.get("reasoning_content"), str):
        out += [chunk({"reasoning_content": p}) for p in _pieces(message["reasoning_content"])]
    if isinstance(message.get("content"), str) and message["content"]:
        out += [chunk({"content": p}) for p in _pieces(message["content"])]
    for i, tc in enumerate(message.get("tool_calls") or ()):
        fn = tc.get("function") or {}
        head: JSONDict = {"index": i, "type": "function", "function": {"name": fn.get("name"), "arguments": ""}}
        if "id" in tc:
            head["id"] = tc["id"]
        out.append(chunk({"tool_calls": [head]}))
        out += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
            for p in _pieces(fn.get("arguments", ""))
        ]
    out.append(chunk({}, choice.get("finish_reason")))
    options = request.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") and "usage" in body:
        out.append(base | {"choices": [], "usage": body["usage"]})
    if "timings" in body:  # llama.cpp's own server puts timings on the last chunk
        out[-1] = out[-1] | {"timings": body["timings"]}
    return [b"data: " + _json_bytes(c) + b"\n\n" for c in out] + [b"data: [DONE]\n\n"]
