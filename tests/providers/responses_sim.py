"""A loopback OpenAI Responses API (``POST /v1/responses``) that applies OpenAI's documented
prompt-caching rules, for tests and benchmarks that cannot reach OpenAI.

Why our own: what ctxwright promises on this API -- a byte-stable prefix, a stable
``prompt_cache_key``, reasoning items passed back untouched, breakpoints only where the model
takes them -- can only be checked against a server that caches, routes and refuses as OpenAI
does. Each rule below cites the public documentation it follows:

* **Caching** (developers.openai.com, "Prompt caching"): only prompts of at least 1,024 tokens
  are cached; a hit covers the longest cached prefix, in 128-token increments; requests are
  routed to a machine by a hash of the prompt's first ~256 tokens combined with
  ``prompt_cache_key``; past about 15 requests a minute for one prefix and key, requests
  overflow to other machines (which have not cached the prefix: a miss); ``in_memory``
  entries are cleared after 5-10 minutes idle (here ``in_memory_ttl_s``, default 300 s),
  ``prompt_cache_retention: "24h"`` keeps them up to 24 hours.
* **Breakpoints** (Responses API reference, ``prompt_cache_options``; gpt-5.6 and later):
  ``prompt_cache_options = {"mode": "implicit"|"explicit", "ttl": "30m"|"12h"}`` and
  ``prompt_cache_breakpoint: {"mode": "explicit", "ttl"?}`` on content blocks (a breakpoint
  without ``ttl`` takes the request's); mode ``implicit`` writes
  one implicit breakpoint (the end of the newest input item) plus the latest three explicit
  ones, mode ``explicit`` the latest four explicit ones and no implicit one; at most four
  writes per request; a later request hits only a prefix that ends exactly at a breakpoint
  written before (not rounded to 128 tokens; the latest 80 item ends are looked up);
  ``prompt_cache_options`` together with ``prompt_cache_retention`` is refused; both are
  refused on models before gpt-5.6. ``usage.input_tokens_details.cache_write_tokens`` reports
  what the request wrote, with ``cache_write_tokens_details`` (``ttl_30m_tokens``,
  ``ttl_12h_tokens``); on older models, whose writes are not billed, it is 0.
* **Diagnostics** (developers.openai.com, "Prompt cache diagnostics"; gpt-5.6 and later):
  ``prompt_cache_options.comparison_response_id`` names an earlier response; the response then
  carries ``prompt_cache_diagnostics`` of type ``cache_hit``, ``cache_miss`` (with
  ``reason``, ``cache_missed_tokens``, ``comparison_reusable_tokens``) or
  ``comparison_response_not_found``. The reason names the first thing that differs, from the
  API reference's list: ``model_changed``, ``prompt_cache_key_changed``, ``tools_changed``,
  ``input_changed`` (instructions are input); the comparison is of the request's structure, so
  an unchanged prefix whose entry expired or was routed elsewhere is ``cache_hit`` -- the
  usage (``cached_tokens``) says whether it was read.
* **Refusals**, with OpenAI's error body ``{"error": {"message", "type":
  "invalid_request_error", "param", "code"}}`` and HTTP 400: an unknown top-level parameter
  (``unknown_parameter``), an unknown field on an input item, a tool or a content block; a
  ``function_call`` in the input without its ``function_call_output`` ("No tool output found
  for function call <call_id>."); a ``reasoning`` item whose ``encrypted_content`` was changed
  (``invalid_encrypted_content``); an unknown ``previous_response_id``.

**Compaction** (developers.openai.com, "Compaction"; the shapes are the SDK's
``response_create_params.ContextManagement``, ``ResponseCompactionItem`` and
``CompactedResponse``): ``context_management`` is a list of ``{"type": "compaction",
"compact_threshold": N}`` ("currently only 'compaction' is supported": any other type, an
unknown key or a threshold that is not a positive whole number is a 400; OpenAI documents no
minimum threshold, so none is enforced, and no default, so without one nothing is compacted).
Once the prompt reaches the threshold, the output starts with an encrypted ``compaction`` item
(``{"type", "id", "encrypted_content", "created_by"}``) and the model reads only the system
messages, the item's summary and the last user message. A ``compaction`` item sent back in the
input stands for its summary; its ``encrypted_content`` must be this server's
(``invalid_encrypted_content`` otherwise). ``POST /v1/responses/compact`` (``model``,
``input``, ``instructions``, ``prompt_cache_key``...) returns ``{"object":
"response.compaction", "output": [the user messages..., one compaction item], "usage"}``. The
summary is this simulator's documented behaviour, not a model's: every user text verbatim, then
per function call its name and the first line of its output (:func:`summarise`); it is
encrypted (signed), so a client cannot read it -- only ask the model.

**Token counting** (so a test can compute every number): the prompt is a list of blocks --
each tool (canonical JSON, in order), then ``instructions`` (its text), then each input item
(canonical JSON, with any ``prompt_cache_breakpoint`` removed: a marker is not content). A
string ``input`` is one item ``{"type": "message", "role": "user", "content": <string>}``.
A block's tokens are ``ceil(utf-8 bytes / 4)``, and its tokens are its bytes in 4-byte pieces,
so ``input_tokens`` is the sum over blocks and a prefix of N tokens is a prefix of those
pieces. Output: a message's text and a function call's arguments count ``ceil(bytes / 4)``
each, a reasoning item's text the same as ``reasoning_tokens`` (included in ``output_tokens``).

The server's clock is simulated (``.clock.now()``, ``.clock.advance(s)``): cache entries and
the per-minute rate are stamped with it, so a test says "7 minutes later" without waiting.
``seconds_per_request`` advances it after each request (a simulated call latency), which is
also what keeps a tool loop under the 15 requests a minute per key.

Usage::

    with ResponsesSim(respond=lambda body: [text("hi")]) as sim:
        client = openai.OpenAI(base_url=sim.url + "/v1", api_key="x")
        client.responses.create(model="gpt-5.5", input="hello")
        sim.requests[-1], sim.responses[-1]
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ctxwright.proxy.server import ProxyThread

JSONDict = dict[str, Any]

#: OpenAI's documented numbers (module docstring)
MIN_CACHED_TOKENS = 1024
INCREMENT = 128
ROUTING_PREFIX_TOKENS = 256
RATE_PER_MINUTE = 15
TTL_24H_S = 24 * 3600.0
TTL_30M_S = 30 * 60.0
TTL_12H_S = 12 * 3600.0
_BREAKPOINT_TTLS = {"30m": TTL_30M_S, "12h": TTL_12H_S}
MAX_BREAKPOINT_WRITES = 4
BREAKPOINT_LOOKBACK = 80

_TOP_LEVEL = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "stream",
        "stream_options",
        "reasoning",
        "include",
        "previous_response_id",
        "store",
        "max_output_tokens",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "metadata",
        "text",
        "truncation",
        "user",
        "safety_identifier",
        "service_tier",
        "background",
        "max_tool_calls",
        "top_logprobs",
        "context_management",
    }
)
_ITEM_FIELDS = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "id", "call_id", "name", "arguments", "status"}),
    "function_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "encrypted_content", "content", "status"}),
    "compaction": frozenset({"type", "id", "encrypted_content", "created_by"}),
}
_PART_FIELDS = frozenset({"type", "text", "annotations", "logprobs", "prompt_cache_breakpoint"})
_TOOL_FIELDS = frozenset({"type", "name", "description", "parameters", "strict"})


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tokens_of(text: str) -> int:
    """The simulator's token count of one block or output text: ``ceil(utf-8 bytes / 4)``."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def supports_breakpoints(model: str) -> bool:
    """gpt-5.6 and later take ``prompt_cache_options``/``prompt_cache_breakpoint`` and diagnostics."""
    m = re.match(r"gpt-(\d+)(?:\.(\d+))?", model)
    if m is None:
        return False
    major, minor = int(m[1]), int(m[2] or 0)
    return (major, minor) >= (5, 6)


# -- scripted replies -------------------------------------------------------------------------


def text(s: str) -> JSONDict:
    """An assistant message reply."""
    return {"type": "message", "text": s}


def call(name: str, arguments: str | JSONDict) -> JSONDict:
    """A function call reply (``arguments`` as the exact string, or an object to encode)."""
    return {
        "type": "function_call",
        "name": name,
        "arguments": arguments if isinstance(arguments, str) else canonical(arguments),
    }


def reasoning(s: str) -> JSONDict:
    """A reasoning item reply (summary text; encrypted when ``include`` asks)."""
    return {"type": "reasoning", "text": s}


class SimClock:
    """The server's simulated time in seconds (starts at 1,000,000)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._t += seconds
            return self._t


class SimError(Exception):
    """A refusal, with OpenAI's error fields."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status

    def body(self) -> JSONDict:
        return {
            "error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.code}
        }


@dataclass
class Prompt:
    """A request's prompt as the simulator sees it: blocks, their token ends, prefix hashes."""

    blocks: list[str]
    ends: list[int]  # cumulative tokens at the end of each block
    item_ends: list[int]  # token ends of the input items only
    explicit: list[int]  # token ends of the items carrying a prompt_cache_breakpoint
    hashes: dict[int, str]  # prefix hash at every needed token position
    routing: str  # hash of the first ROUTING_PREFIX_TOKENS tokens
    tools_hash: str
    instructions_hash: str
    item_hashes: list[str]

    @property
    def total(self) -> int:
        return self.ends[-1] if self.ends else 0


def _prefix_hashes(blocks: list[str], wanted: set[int]) -> tuple[dict[int, str], str]:
    """Hash of every prefix of ``wanted`` token lengths, and of the routing prefix."""
    h = hashlib.sha256()
    out: dict[int, str] = {}
    routing = ""
    n = 0
    for bi, block in enumerate(blocks):
        raw = block.encode("utf-8")
        if bi:
            h.update(b"\x1e")  # block separator, before the block: a position's hash is unique
        for i in range(0, len(raw), 4):
            h.update(raw[i : i + 4])
            n += 1
            if n in wanted:
                out[n] = h.hexdigest()
            if n == ROUTING_PREFIX_TOKENS:
                routing = h.hexdigest()
    if not routing:
        routing = h.hexdigest()
    return out, routing


@dataclass
class Machine:
    """One simulated cache machine: prefix hash -> expiry time (simulated clock)."""

    entries: dict[str, float] = field(default_factory=dict)

    def alive(self, key: str, now: float) -> bool:
        exp = self.entries.get(key)
        if exp is None:
            return False
        if exp <= now:
            del self.entries[key]
            return False
        return True

    def write(self, key: str, expiry: float) -> None:
        self.entries[key] = max(self.entries.get(key, 0.0), expiry)


@dataclass
class Fingerprint:
    model: str
    key: str
    prompt: Prompt


class ResponsesSim:
    """The simulator (module docstring); a context manager serving on 127.0.0.1:<free port>."""

    def __init__(
        self,
        respond: Callable[[JSONDict], list[JSONDict]] | None = None,
        *,
        machines: int = 8,
        in_memory_ttl_s: float = 300.0,
        ttl_scale: float = 1.0,
        seconds_per_request: float = 0.0,
        chunk_chars: int = 7,
    ) -> None:
        self.respond: Callable[[JSONDict], list[JSONDict]] = respond or (lambda body: [text("ok")])
        self.clock = SimClock()
        self.machines = [Machine() for _ in range(machines)]
        self.in_memory_ttl_s = in_memory_ttl_s
        self.ttl_scale = ttl_scale
        self.seconds_per_request = seconds_per_request
        self.chunk_chars = chunk_chars
        #: every JSON body received (refused ones too), and every response body sent
        self.requests: list[JSONDict] = []
        self.responses: list[JSONDict] = []
        #: the headers of every request (lower-cased names)
        self.headers: list[dict[str, str]] = []
        #: per accepted request: which machine served it, and what it counted
        self.log: list[JSONDict] = []
        self.refused: list[JSONDict] = []
        #: per accepted request, the body as the model read it (compaction items as their summaries)
        self.seen: list[JSONDict] = []
        self._stored: dict[str, JSONDict] = {}
        self._fingerprints: dict[str, Fingerprint] = {}
        self._rate: dict[str, deque[float]] = {}
        self._secret = uuid.uuid4().bytes
        self._lock = threading.Lock()
        self._thread: ProxyThread | None = None
        self._n = 0

    # -- serving ---------------------------------------------------------------------------
    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/responses", self._endpoint, methods=["POST"]),
                Route("/v1/responses/compact", self._compact_endpoint, methods=["POST"]),
            ]
        )

    def start(self) -> ResponsesSim:
        self._thread = ProxyThread(self.app()).start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> ResponsesSim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._thread is not None, "the simulator is not started"
        return self._thread.url

    async def _endpoint(self, request: Request) -> Response:
        raw = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            body = json.loads(raw)
        except ValueError:
            return JSONResponse(SimError("We could not parse the JSON body of your request.").body(), status_code=400)
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            try:
                if not isinstance(body, dict):
                    raise SimError("The request body must be a JSON object.")
                out = self._handle(body)
            except SimError as exc:
                self.refused.append({"body": body, "error": exc.body()})
                return JSONResponse(exc.body(), status_code=exc.status)
            self.responses.append(out)
            if self.seconds_per_request:
                self.clock.advance(self.seconds_per_request)
        if body.get("stream"):
            return StreamingResponse(self._events(out), media_type="text/event-stream")
        return JSONResponse(out)

    async def _compact_endpoint(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            return JSONResponse(SimError("We could not parse the JSON body of your request.").body(), status_code=400)
        with self._lock:
            self.requests.append(body)
            try:
                if not isinstance(body, dict):
                    raise SimError("The request body must be a JSON object.")
                for key in body:
                    if key not in _COMPACT_TOP_LEVEL:
                        raise SimError(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
                if not isinstance(body.get("model"), str):
                    raise SimError(
                        "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
                    )
                items = self._input_items(body)
                self._check_items(items)
                prompt = self.prompt(body, items)
            except SimError as exc:
                self.refused.append({"body": body, "error": exc.body()})
                return JSONResponse(exc.body(), status_code=exc.status)
            item = self._compaction(items)
            users = [it for it in items if it.get("type") == "message" and it.get("role") == "user"]
            out_tokens = tokens_of(item["encrypted_content"])
            self._n += 1
            out: JSONDict = {
                "id": f"resp_cmp_{self._n:04d}",
                "object": "response.compaction",
                "created_at": int(self.clock.now()),
                "output": [*users, item],
                "usage": {
                    "input_tokens": prompt.total,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": out_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": prompt.total + out_tokens,
                },
            }
            self.responses.append(out)
        return JSONResponse(out)

    # -- compaction ------------------------------------------------------------------------
    def _threshold(self, body: JSONDict) -> int | None:
        """The request's compaction threshold (validated), or ``None`` when it asks for none."""
        cm = body.get("context_management")
        if cm is None:
            return None
        if not isinstance(cm, list):
            raise SimError(
                "Invalid type for 'context_management': expected an array.",
                param="context_management",
                code="invalid_type",
            )
        threshold: int | None = None
        for i, entry in enumerate(cm):
            where = f"context_management[{i}]"
            if not isinstance(entry, dict):
                raise SimError(f"Invalid type for '{where}': expected an object.", param=where, code="invalid_type")
            if entry.get("type") != "compaction":
                raise SimError(
                    f"Invalid value: '{entry.get('type')}'. Currently only 'compaction' is supported.",
                    param=f"{where}.type",
                    code="invalid_value",
                )
            for key in entry:
                if key not in ("type", "compact_threshold"):
                    raise SimError(
                        f"Unknown parameter: '{where}.{key}'.", param=f"{where}.{key}", code="unknown_parameter"
                    )
            value = entry.get("compact_threshold")
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SimError(
                    f"Invalid value for '{where}.compact_threshold': expected a positive integer.",
                    param=f"{where}.compact_threshold",
                    code="invalid_value",
                )
            threshold = value
        return threshold

    def _summary_of(self, item: JSONDict) -> str:
        payload = str(item.get("encrypted_content")).partition(".")[0]
        return str(json.loads(base64.urlsafe_b64decode(payload.encode()))["summary"])

    def _compaction(self, items: list[JSONDict]) -> JSONDict:
        cid = f"cmp_{uuid.uuid4().hex[:16]}"
        summary = summarise(items, self._summary_of)
        return {
            "type": "compaction",
            "id": cid,
            "encrypted_content": self._encrypt(cid, summary),
            "created_by": "server",
        }

    def _view(self, body: JSONDict, items: list[JSONDict], made: JSONDict | None) -> JSONDict:
        """What the model reads: compaction items as their summaries; after a compaction made
        now, the system messages, the summary and the last user message only."""
        if made is not None:
            head = [it for it in items if it.get("type") == "message" and it.get("role") in ("system", "developer")]
            tail = (
                [items[-1]] if items and items[-1].get("type") == "message" and items[-1].get("role") == "user" else []
            )
            items = [*head, made, *tail]
        shown = [
            {"type": "compaction_summary", "summary": self._summary_of(it)} if it.get("type") == "compaction" else it
            for it in items
        ]
        return {**body, "input": shown}

    # -- one request -----------------------------------------------------------------------
    def _handle(self, body: JSONDict) -> JSONDict:
        self._validate(body)
        threshold = self._threshold(body)
        model = str(body["model"])
        items = self._input_items(body)
        self._check_items(items)
        prompt = self.prompt(body, items)
        now = self.clock.now()
        usage_cache, machine_ix = self._cache(body, prompt, now)
        diagnostics = self._diagnose(body, model, prompt, usage_cache["cached"])
        include = body.get("include") or []
        made = self._compaction(items) if threshold is not None and prompt.total >= threshold else None
        view = self._view(body, items, made)
        self.seen.append(view)
        output = [self._item(spec, "reasoning.encrypted_content" in include) for spec in self.respond(view)]
        if made is not None:
            output.insert(0, made)
        out_tokens = 0
        reasoning_tokens = 0
        for item in output:
            if item["type"] == "message":
                out_tokens += tokens_of("".join(p["text"] for p in item["content"]))
            elif item["type"] == "function_call":
                out_tokens += tokens_of(item["arguments"])
            elif item["type"] == "reasoning":
                r = tokens_of("".join(s["text"] for s in item["summary"]))
                reasoning_tokens += r
                out_tokens += r
        details: JSONDict = {"cached_tokens": usage_cache["cached"]}
        details["cache_write_tokens"] = usage_cache["written"]
        if supports_breakpoints(model):
            ttl_name = (body.get("prompt_cache_options") or {}).get("ttl", "30m")
            details["cache_write_tokens_details"] = {
                "ttl_30m_tokens": usage_cache["written"] if ttl_name == "30m" else 0,
                "ttl_12h_tokens": usage_cache["written"] if ttl_name == "12h" else 0,
            }
        usage = {
            "input_tokens": prompt.total,
            "input_tokens_details": details,
            "output_tokens": out_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt.total + out_tokens,
        }
        self._n += 1
        rid = f"resp_{self._n:04d}{uuid.uuid4().hex[:12]}"
        resp: JSONDict = {
            "id": rid,
            "object": "response",
            "created_at": int(now),
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "model": model,
            "output": output,
            "instructions": body.get("instructions"),
            "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice", "auto"),
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "prompt_cache_key": body.get("prompt_cache_key"),
            "prompt_cache_retention": body.get("prompt_cache_retention"),
            "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "truncation": body.get("truncation", "disabled"),
            "metadata": body.get("metadata") or {},
            "text": {"format": {"type": "text"}},
            "usage": usage,
        }
        if "prompt_cache_options" in body:
            resp["prompt_cache_options"] = body["prompt_cache_options"]
        if diagnostics is not None:
            resp["prompt_cache_diagnostics"] = diagnostics
        if body.get("store", True) is not False:
            self._stored[rid] = {"input": items, "output": output}
        self._fingerprints[rid] = Fingerprint(model, str(body.get("prompt_cache_key") or ""), prompt)
        self.log.append({"response_id": rid, "machine": machine_ix, "input_tokens": prompt.total, **usage_cache})
        return resp

    def _validate(self, body: JSONDict) -> None:
        for key in body:
            if key not in _TOP_LEVEL:
                raise SimError(f"Unknown parameter: '{key}'.", param=key, code="unknown_parameter")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise SimError("Missing required parameter: 'model'.", param="model", code="missing_required_parameter")
        if "input" not in body and "previous_response_id" not in body:
            raise SimError("Missing required parameter: 'input'.", param="input", code="missing_required_parameter")
        retention = body.get("prompt_cache_retention")
        if retention is not None and retention not in ("in_memory", "24h"):
            raise SimError(
                f"Invalid value: '{retention}'. Supported values are: 'in_memory' and '24h'.",
                param="prompt_cache_retention",
                code="invalid_value",
            )
        opts = body.get("prompt_cache_options")
        if opts is not None:
            if not supports_breakpoints(model):
                raise SimError(
                    f"prompt_cache_options is not supported with model '{model}'.",
                    param="prompt_cache_options",
                    code="unsupported_parameter",
                )
            if retention is not None:
                raise SimError(
                    "prompt_cache_options cannot be used together with prompt_cache_retention: "
                    "prompt_cache_options.ttl supersedes it.",
                    param="prompt_cache_retention",
                    code="invalid_request",
                )
            if not isinstance(opts, dict) or set(opts) - {"mode", "ttl", "comparison_response_id", "prewarm"}:
                raise SimError(
                    "Unknown field in prompt_cache_options.", param="prompt_cache_options", code="unknown_parameter"
                )
            if opts.get("mode", "implicit") not in ("implicit", "explicit"):
                raise SimError(
                    f"Invalid value: '{opts.get('mode')}'. Supported values are: 'implicit' and 'explicit'.",
                    param="prompt_cache_options.mode",
                    code="invalid_value",
                )
            if opts.get("ttl", "30m") not in _BREAKPOINT_TTLS:
                raise SimError(
                    f"Invalid value: '{opts.get('ttl')}'. Supported values are: '30m' and '12h'.",
                    param="prompt_cache_options.ttl",
                    code="invalid_value",
                )
        for i, tool in enumerate(body.get("tools") or []):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise SimError(
                    "Only function tools are supported here.", param=f"tools[{i}].type", code="invalid_value"
                )
            for key in tool:
                if key not in _TOOL_FIELDS:
                    raise SimError(
                        f"Unknown parameter: 'tools[{i}].{key}'.", param=f"tools[{i}].{key}", code="unknown_parameter"
                    )
            if not isinstance(tool.get("name"), str):
                raise SimError(
                    f"Missing required parameter: 'tools[{i}].name'.",
                    param=f"tools[{i}].name",
                    code="missing_required_parameter",
                )

    def _input_items(self, body: JSONDict) -> list[JSONDict]:
        raw = body.get("input")
        items: list[JSONDict]
        if raw is None:
            items = []
        elif isinstance(raw, str):
            items = [{"type": "message", "role": "user", "content": raw}]
        elif isinstance(raw, list):
            items = []
            for i, item in enumerate(raw):
                if not isinstance(item, dict):
                    raise SimError(
                        f"Invalid type for 'input[{i}]': expected an object.", param=f"input[{i}]", code="invalid_type"
                    )
                if "type" not in item and "role" in item:
                    item = {"type": "message", **item}
                items.append(item)
        else:
            raise SimError(
                "Invalid type for 'input': expected a string or an array.", param="input", code="invalid_type"
            )
        prev = body.get("previous_response_id")
        if prev is not None:
            stored = self._stored.get(str(prev))
            if stored is None:
                raise SimError(
                    f"Previous response with id '{prev}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            items = [*stored["input"], *stored["output"], *items]
        return items

    def _check_items(self, items: list[JSONDict]) -> None:
        for i, item in enumerate(items):
            kind = item.get("type")
            allowed = _ITEM_FIELDS.get(str(kind))
            if allowed is None:
                raise SimError(
                    f"Invalid value: '{kind}' for 'input[{i}].type'.", param=f"input[{i}].type", code="invalid_value"
                )
            for key in item:
                if key not in allowed:
                    raise SimError(
                        f"Unknown parameter: 'input[{i}].{key}'.", param=f"input[{i}].{key}", code="unknown_parameter"
                    )
            if kind == "message":
                content = item.get("content")
                if isinstance(content, list):
                    for j, part in enumerate(content):
                        bad = (
                            [k for k in part if k not in _PART_FIELDS]
                            if isinstance(part, dict)
                            else ["(not an object)"]
                        )
                        if bad:
                            raise SimError(
                                f"Unknown parameter: 'input[{i}].content[{j}].{bad[0]}'.",
                                param=f"input[{i}].content[{j}].{bad[0]}",
                                code="unknown_parameter",
                            )
            if kind == "function_call_output" and isinstance(item.get("output"), list):
                for j, part in enumerate(item["output"]):
                    bad = [k for k in part if k not in _PART_FIELDS] if isinstance(part, dict) else ["(not an object)"]
                    if bad:
                        raise SimError(
                            f"Unknown parameter: 'input[{i}].output[{j}].{bad[0]}'.",
                            param=f"input[{i}].output[{j}].{bad[0]}",
                            code="unknown_parameter",
                        )
            if kind in ("reasoning", "compaction"):
                self._verify(item, i)
        answered = {str(it.get("call_id")) for it in items if it.get("type") == "function_call_output"}
        for it in items:
            if it.get("type") == "function_call" and str(it.get("call_id")) not in answered:
                raise SimError(f"No tool output found for function call {it.get('call_id')}.", param="input", code=None)

    def _verify(self, item: JSONDict, i: int) -> None:
        enc = item.get("encrypted_content")
        if enc is None:
            return
        payload, _, sig = str(enc).partition(".")
        good = hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]
        if not hmac.compare_digest(good, sig):
            raise SimError(
                f"The encrypted content for item {item.get('id')} could not be verified.",
                param=f"input[{i}].encrypted_content",
                code="invalid_encrypted_content",
            )

    def _encrypt(self, rid: str, summary: str) -> str:
        payload = base64.urlsafe_b64encode(canonical({"id": rid, "summary": summary}).encode()).decode()
        return payload + "." + hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]

    # -- the cache -------------------------------------------------------------------------
    def prompt(self, body: JSONDict, items: list[JSONDict] | None = None) -> Prompt:
        """The prompt's blocks, token ends and prefix hashes (the module docstring's rule)."""
        if items is None:
            items = self._input_items(body)
        tools = [canonical(t) for t in body.get("tools") or []]
        blocks = list(tools)
        instructions = body.get("instructions")
        if isinstance(instructions, str) and instructions:
            blocks.append(instructions)
        first_item = len(blocks)
        explicit_ix: list[int] = []
        for item in items:
            clean, marked = _strip_breakpoints(item)
            if marked:
                explicit_ix.append(len(blocks))
            blocks.append(canonical(clean))
        ends: list[int] = []
        n = 0
        for b in blocks:
            n += tokens_of(b)
            ends.append(n)
        wanted = {e for e in ends} | set(range(INCREMENT, n + 1, INCREMENT))
        hashes, routing = _prefix_hashes(blocks, wanted)
        return Prompt(
            blocks=blocks,
            ends=ends,
            item_ends=ends[first_item:],
            explicit=[ends[i] for i in explicit_ix],
            hashes=hashes,
            routing=routing,
            tools_hash=hashlib.sha256("\n".join(tools).encode()).hexdigest(),
            instructions_hash=hashlib.sha256(str(instructions or "").encode()).hexdigest(),
            item_hashes=[hashlib.sha256(b.encode()).hexdigest() for b in blocks[first_item:]],
        )

    def machine_for(self, body: JSONDict, prompt: Prompt, now: float, *, count: bool = True) -> int:
        """The machine a request lands on: the routing hash (first 256 tokens + key), and past
        15 requests in the last minute for that hash, the next machines (overflow)."""
        key = str(body.get("prompt_cache_key") or "")
        route = hashlib.sha256(f"{prompt.routing}|{key}".encode()).hexdigest()
        base = int(route[:8], 16) % len(self.machines)
        recent = self._rate.setdefault(route, deque())
        while recent and recent[0] <= now - 60.0:
            recent.popleft()
        over = len(recent) // RATE_PER_MINUTE
        if count:
            recent.append(now)
        return (base + over) % len(self.machines)

    def _ttl(self, body: JSONDict) -> float:
        if supports_breakpoints(str(body["model"])):
            name = (body.get("prompt_cache_options") or {}).get("ttl", "30m")
            return _BREAKPOINT_TTLS[name] * self.ttl_scale
        if body.get("prompt_cache_retention") == "24h":
            return TTL_24H_S * self.ttl_scale
        return self.in_memory_ttl_s * self.ttl_scale

    def _cache(self, body: JSONDict, prompt: Prompt, now: float) -> tuple[JSONDict, int]:
        ix = self.machine_for(body, prompt, now)
        m = self.machines[ix]
        ttl = self._ttl(body)
        if supports_breakpoints(str(body["model"])):
            opts = body.get("prompt_cache_options") or {}
            mode = opts.get("mode", "implicit")
            explicit = sorted(set(prompt.explicit))
            if mode == "explicit":
                writes = explicit[-MAX_BREAKPOINT_WRITES:]
            else:
                implicit = prompt.item_ends[-1:] if prompt.item_ends else []
                writes = sorted(set(explicit[-(MAX_BREAKPOINT_WRITES - 1) :]) | set(implicit))
            writes = [w for w in writes if w >= MIN_CACHED_TOKENS]
            cached = 0
            for end in sorted(set(prompt.item_ends[-BREAKPOINT_LOOKBACK:]) | set(writes), reverse=True):
                if m.alive(prompt.hashes[end], now):
                    cached = end
                    break
            if cached:
                m.write(prompt.hashes[cached], now + ttl)
            for w in writes:
                m.write(prompt.hashes[w], now + ttl)
            written = max(0, max(writes, default=0) - cached)
            return {"cached": cached, "written": written, "breakpoints_written": writes}, ix
        cached = 0
        for n in range(prompt.total - prompt.total % INCREMENT, MIN_CACHED_TOKENS - 1, -INCREMENT):
            if m.alive(prompt.hashes[n], now):
                cached = n
                break
        for n in range(MIN_CACHED_TOKENS, prompt.total + 1, INCREMENT):
            m.write(prompt.hashes[n], now + ttl)  # a hit refreshes what it read; the rest is written
        return {"cached": cached, "written": 0}, ix

    def _diagnose(self, body: JSONDict, model: str, prompt: Prompt, cached: int) -> JSONDict | None:
        opts = body.get("prompt_cache_options")
        if not isinstance(opts, dict) or not opts.get("comparison_response_id"):
            return None
        base = self._fingerprints.get(str(opts["comparison_response_id"]))
        if base is None:
            return {"type": "comparison_response_not_found"}
        old = base.prompt
        shared = 0
        for a, b, end in zip(old.blocks, prompt.blocks, prompt.ends, strict=False):
            if a != b:
                break
            shared = end
        reusable = max([e for e in old.item_ends if e <= shared] or [0])
        if base.model != model:
            reason = "model_changed"
            reusable = 0
        elif base.key != str(body.get("prompt_cache_key") or ""):
            reason = "prompt_cache_key_changed"
        elif old.tools_hash != prompt.tools_hash:
            reason = "tools_changed"
        elif (
            reusable < (old.item_ends[-1] if old.item_ends else 0) or old.instructions_hash != prompt.instructions_hash
        ):
            reason = "input_changed"
        else:
            return {"type": "cache_hit"}
        return {
            "type": "cache_miss",
            "reason": reason,
            "cache_missed_tokens": max(0, prompt.total - reusable),
            "comparison_reusable_tokens": reusable,
        }

    # -- output ----------------------------------------------------------------------------
    def _item(self, spec: JSONDict, encrypted: bool) -> JSONDict:
        kind = spec.get("type")
        uid = uuid.uuid4().hex[:16]
        if kind == "message":
            return {
                "type": "message",
                "id": f"msg_{uid}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": spec["text"], "annotations": [], "logprobs": []}],
            }
        if kind == "function_call":
            return {
                "type": "function_call",
                "id": f"fc_{uid}",
                "call_id": spec.get("call_id") or f"call_{uid}",
                "name": spec["name"],
                "arguments": spec["arguments"],
                "status": "completed",
            }
        if kind == "reasoning":
            rid = f"rs_{uid}"
            item: JSONDict = {
                "type": "reasoning",
                "id": rid,
                "summary": [{"type": "summary_text", "text": spec["text"]}],
            }
            if encrypted:
                item["encrypted_content"] = self._encrypt(rid, spec["text"])
            return item
        raise ValueError(f"unknown reply item {spec!r}")

    def _events(self, resp: JSONDict) -> Iterator[bytes]:
        """The documented SSE sequence of a streamed response."""
        seq = 0

        def ev(kind: str, **data: Any) -> bytes:
            nonlocal seq
            payload = {"type": kind, "sequence_number": seq, **data}
            seq += 1
            return f"event: {kind}\ndata: {canonical(payload)}\n\n".encode()

        start = {**resp, "status": "in_progress", "output": [], "usage": None}
        yield ev("response.created", response=start)
        yield ev("response.in_progress", response=start)
        for i, item in enumerate(resp["output"]):
            if item["type"] == "message":
                yield ev(
                    "response.output_item.added", output_index=i, item={**item, "status": "in_progress", "content": []}
                )
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                yield ev("response.content_part.added", item_id=item["id"], output_index=i, content_index=0, part=part)
                full = item["content"][0]["text"]
                for k in range(0, len(full), self.chunk_chars):
                    yield ev(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=i,
                        content_index=0,
                        delta=full[k : k + self.chunk_chars],
                        logprobs=[],
                    )
                yield ev(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    text=full,
                    logprobs=[],
                )
                yield ev(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=i,
                    content_index=0,
                    part=item["content"][0],
                )
            elif item["type"] == "function_call":
                yield ev(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                args = item["arguments"]
                for k in range(0, len(args), self.chunk_chars):
                    yield ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=i,
                        delta=args[k : k + self.chunk_chars],
                    )
                yield ev(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=i,
                    name=item["name"],
                    arguments=args,
                )
            else:
                yield ev("response.output_item.added", output_index=i, item=item)
            yield ev("response.output_item.done", output_index=i, item=item)
        yield ev("response.completed", response=resp)


def _strip_breakpoints(item: JSONDict) -> tuple[JSONDict, bool]:
    """The item without ``prompt_cache_breakpoint`` markers (on a message's content blocks or
    a function call output's blocks), and whether it had one."""
    where = "output" if item.get("type") == "function_call_output" else "content"
    content = item.get(where)
    if not isinstance(content, list):
        return item, False
    marked = False
    parts = []
    for part in content:
        if isinstance(part, dict) and "prompt_cache_breakpoint" in part:
            marked = True
            part = {k: v for k, v in part.items() if k != "prompt_cache_breakpoint"}
        parts.append(part)
    return {**item, where: parts}, marked


_COMPACT_TOP_LEVEL = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "service_tier",
    }
)


def summarise(items: list[JSONDict], earlier: Callable[[JSONDict], str]) -> str:
    """The simulator's compaction summary (module docstring): earlier summaries, every user
    text verbatim, per function call its name and the first line of its output."""
    lines: list[str] = []
    names: dict[str, str] = {}
    for it in items:
        kind = it.get("type")
        if kind == "compaction":
            lines.append(earlier(it))
        elif kind == "message" and it.get("role") == "user":
            content = it.get("content")
            text = content if isinstance(content, str) else " ".join(str(p.get("text", "")) for p in content or [])
            lines.append(f"User: {text}")
        elif kind == "function_call":
            names[str(it.get("call_id"))] = str(it.get("name"))
        elif kind == "function_call_output":
            out = it.get("output")
            text = out if isinstance(out, str) else " ".join(str(p.get("text", "")) for p in out or [])
            first = text.strip().split("\n", 1)[0]
            lines.append(f"Tool {names.get(str(it.get('call_id')), '?')}: {first}")
    return "Summary of the conversation so far:\n" + "\n".join(lines)
