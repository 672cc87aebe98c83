"""Backend for any server that speaks the OpenAI chat-completions wire format.

One class covers OpenAI, DeepSeek, vLLM, Ollama, llama.cpp's server and proxies, because
they share the request shape. They differ in how they report prompt-cache hits and how
they word a context-window error, so this module reads the *raw* JSON reply (the SDK's
typed model drops fields it does not know) and maps every provider's dialect onto our
:class:`Usage` and our exception types.

Retries with backoff on 429/5xx/timeouts are the SDK's job (``max_retries``); we only
translate what is left after it gives up.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import openai

from ctxwright.core.messages import Message, Usage
from ctxwright.core.request import ChatRequest, Completion
from ctxwright.core.usage import as_object, read_usage
from ctxwright.errors import BackendError, BackendUnavailable, ContextWindowExceeded, MalformedResponse

_PLACEHOLDER_KEY = "not-needed"

# Lower-cased fragments that providers put in context-window errors. Matched only on
# 400/413/422 replies: on a 429, "too many tokens" means a rate limit, not the window.
_CONTEXT_PHRASES: tuple[str, ...] = (
    "maximum context length",  # OpenAI, DeepSeek, vLLM
    "context length",
    "context_length_exceeded",
    "prompt is too long",  # Anthropic
    "too many tokens",
    "exceeds the context window",
    "input is too long",
    "exceed_context_size_error",  # llama.cpp server error type
    "exceeds the available context size",  # llama.cpp server message
)
_CONTEXT_CODES: frozenset[str] = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_STATUSES: frozenset[int] = frozenset({400, 413, 422})


class OpenAIBackend:
    """A model served behind an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    name = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 3,
        context_window: int | None = None,
    ) -> None:
        self.model = model
        #: the served model's window in tokens, if known (the API does not say); the
        #: compaction layers plan for it, else for 128,000
        self.context_window = context_window
        self.timeout = timeout
        self.max_retries = max_retries
        self.api_key_env = api_key_env
        # Local servers (vLLM, Ollama, llama.cpp) accept any key, but the SDK refuses to
        # start without one, so a missing key becomes a harmless placeholder.
        key = api_key or os.environ.get(api_key_env) or _PLACEHOLDER_KEY
        kwargs: dict[str, Any] = {"api_key": key, "max_retries": max_retries, "timeout": timeout}
        if base_url is not None:
            kwargs["base_url"] = base_url
        self._client = openai.OpenAI(**kwargs)

    @property
    def base_url(self) -> str:
        """The endpoint actually used (after the SDK applied ``OPENAI_BASE_URL`` or its default)."""
        return str(self._client.base_url).rstrip("/")

    def complete(self, request: ChatRequest) -> Completion:
        """Send one rendered request and translate the reply, or raise one of our errors."""
        body = request.openai_body(self.model)
        model = body.pop("model")
        messages = body.pop("messages")
        started = time.perf_counter()
        try:
            # Everything but the two required arguments goes through ``extra_body``, which
            # the SDK sends untouched: the server sees exactly what the harness rendered.
            raw = self._client.chat.completions.with_raw_response.create(
                model=model, messages=messages, extra_body=body
            )
            text = raw.text
        except openai.APITimeoutError as exc:
            raise BackendUnavailable(
                f"{self.base_url} did not answer within {self.timeout:g}s "
                f"({self.max_retries} retries tried). "
                "The model may be overloaded or still loading: raise `timeout`, or check the server."
            ) from exc
        except openai.APIConnectionError as exc:
            raise BackendUnavailable(
                f"cannot connect to {self.base_url} ({_cause(exc)}). Check that the server is "
                "running and listening on that host and port, and that the base URL is the API "
                "root ending in /v1 (e.g. http://127.0.0.1:8000/v1)."
            ) from exc
        except openai.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except openai.OpenAIError as exc:
            raise BackendError(
                f"request to {self.base_url} failed: {exc}. Check the base URL and the server's log."
            ) from exc
        latency_ms = (time.perf_counter() - started) * 1000.0
        return self._parse(text, latency_ms)

    def count_tokens(self, text: str) -> int | None:
        """Always ``None``: a served model's tokenizer is not available offline."""
        return None

    def close(self) -> None:
        self._client.close()

    # -- translation -----------------------------------------------------------------

    def _status_error(self, exc: openai.APIStatusError) -> BackendError:
        """Map an HTTP error the SDK gave up on to our exception, keeping the server's words."""
        status = exc.status_code
        code, etype, message = _error_fields(exc.body, exc.response.text)
        if _is_context_error(code, etype, message, status):
            return ContextWindowExceeded(
                f"the request does not fit the context window of model {self.model!r} "
                f"(HTTP {status} from {self.base_url}: {message}). Shorten the context or "
                "compact the trajectory."
            )
        hint = ""
        if status in (401, 403):
            hint = f" Check the API key (passed in, or in ${self.api_key_env})."
        elif status == 404:
            hint = f" Check that the base URL ends in /v1 and that the server serves model {self.model!r}."
        elif status == 429:
            hint = " The server is rate-limiting (the retries are used up): wait, or lower the request rate."
        elif status >= 500:
            hint = " The server failed on this request: check its log, or retry later."
        elif status == 400:
            hint = " The server rejected the request as invalid: its message above says which field."
        return BackendError(f"{self.base_url} returned HTTP {status}: {message}.{hint}")

    def _parse(self, text: str, latency_ms: float) -> Completion:
        """Turn a 200 reply's raw JSON into a :class:`Completion`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedResponse(
                f"{self.base_url} answered HTTP 200 but the body is not JSON ({exc.msg} at "
                f"position {exc.pos}); body starts with {text[:200]!r}"
            ) from exc
        if not isinstance(data, dict):
            raise MalformedResponse(
                f"{self.base_url} answered HTTP 200 with a JSON {type(data).__name__}, not an object"
            )
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if "error" in data:  # some proxies report failures inside a 200
                code, etype, message = _error_fields(data["error"], text)
                if _is_context_error(code, etype, message, 400):
                    raise ContextWindowExceeded(
                        f"the request does not fit the context window of model {self.model!r} "
                        f"({self.base_url}: {message}). Shorten the context or compact the trajectory."
                    )
                raise MalformedResponse(f"{self.base_url} answered HTTP 200 with an error: {message}")
            raise MalformedResponse(
                f"{self.base_url} answered HTTP 200 without a non-empty `choices` list; body starts with {text[:200]!r}"
            )
        choice = choices[0]
        wire = choice.get("message")
        if not isinstance(wire, dict):
            raise MalformedResponse(f"{self.base_url}: choices[0] has no `message` object")
        try:
            reply = _assistant_message(wire)
        except (TypeError, ValueError, AttributeError) as exc:
            raise MalformedResponse(f"{self.base_url}: cannot read choices[0].message ({exc})") from exc
        finish = choice.get("finish_reason")
        model = data.get("model")
        return Completion(
            message=reply,
            usage=_usage(data, latency_ms),
            finish_reason=finish if isinstance(finish, str) else None,
            model=model if isinstance(model, str) else None,
        )


def _assistant_message(wire: dict[str, Any]) -> Message:
    """The reply as our Message. Tool-call arguments stay the exact string received.

    Some servers (newer vLLM, OpenRouter) name the thinking ``reasoning`` instead of
    ``reasoning_content``; both land in ``reasoning_content``.
    """
    data = dict(wire)
    data["role"] = "assistant"
    if data.get("reasoning_content") is None and isinstance(data.get("reasoning"), str):
        data["reasoning_content"] = data["reasoning"]
    return Message.from_wire(data)


def _usage(data: dict[str, Any], latency_ms: float) -> Usage:
    """Token counts and cache hits from whichever provider's fields are present
    (:func:`ctxwright.core.usage.read_usage`), plus llama.cpp server timings when given."""
    counts = read_usage(data)
    usage = as_object(data.get("usage"))
    timings = as_object(data.get("timings"))
    raw: dict[str, Any] = {"usage": usage, "latency_ms": latency_ms}
    if timings:
        raw["timings"] = timings
    return Usage(
        prompt_tokens=counts["prompt_tokens"],
        completion_tokens=counts["completion_tokens"],
        cached_tokens=counts["cached_tokens"],
        prefill_ms=_first_float(timings.get("prompt_ms")),
        decode_ms=_first_float(timings.get("predicted_ms")),
        raw=raw,
    )


def _first_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _error_fields(body: object, text: str) -> tuple[str | None, str | None, str]:
    """(code, type, message) from a provider error body, whatever its shape.

    The SDK hands us ``body["error"]`` when that exists; servers also send a bare string,
    ``{"detail": ...}`` (FastAPI) or plain text.
    """
    if isinstance(body, dict) and isinstance(body.get("error"), (dict, str)):
        body = body["error"]
    if isinstance(body, dict):
        code = body.get("code")
        etype = body.get("type")
        msg = body.get("message") or body.get("detail") or body.get("msg")
        message = msg if isinstance(msg, str) else (json.dumps(msg) if msg is not None else text)
        return (
            str(code) if code is not None else None,
            str(etype) if etype is not None else None,
            message.strip() or "(empty error body)",
        )
    if isinstance(body, str) and body.strip():
        return None, None, body.strip()
    return None, None, text.strip()[:500] or "(empty error body)"


def _is_context_error(code: str | None, etype: str | None, message: str, status: int) -> bool:
    """True when an error means "the prompt does not fit", in any provider's wording."""
    if code in _CONTEXT_CODES or etype in _CONTEXT_CODES:
        return True
    if status not in _CONTEXT_STATUSES:
        return False
    lowered = message.lower()
    return any(phrase in lowered for phrase in _CONTEXT_PHRASES)


def _cause(exc: BaseException) -> str:
    """The innermost reason of a connection failure, e.g. "Connection refused"."""
    inner: BaseException = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    return str(inner) or type(inner).__name__
