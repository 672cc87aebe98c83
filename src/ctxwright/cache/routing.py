"""The session's stable routing key, and where each server takes it.

Why: a provider's prompt cache lives on one machine. A fleet routes each request to a
machine, and a request that lands on another machine than the one holding its prefix misses,
however byte-stable the prefix is. The servers that route by prefix let a client say which
requests belong together:

* **OpenAI** (Responses and Chat Completions): the body field ``prompt_cache_key``. Requests
  are routed on a hash of the prompt's first ~256 tokens combined with that key; past about 15
  requests a minute for one prefix and key, some overflow to other machines
  (developers.openai.com/api/docs/guides/prompt-caching).
* **vLLM production stack** router (``vllm_router``): ``--routing-logic session`` routes "by
  the session id in the request headers", in the header its ``--session-key`` option names;
  without one it picks the least-loaded engine (docs.vllm.ai/projects/production-stack,
  "Router Logic", ``SessionRouter``).
* **SGLang** model gateway / router: sticky sessions pin a routing key to one worker; without
  the body's ``rid``, the key is read from a header, ``x-smg-routing-key`` by default
  (SMG docs, "Sticky Sessions and Routing Keys"; ``--routing-key-override`` or the ``manual``
  policy).
* **NVIDIA Dynamo**: ``X-Dynamo-Session-ID``, one stable ID for one agent's reasoning and tool
  chain; passive metadata that a routing policy must opt in to use
  (docs.nvidia.com/dynamo, "Agents" and "Session IDs").

The key is the frozen prefix's sha256 (tools + system, as sent) and the session lineage's
root: a sub-agent starts with its parent's exact prefix bytes (``agent/delegate.py``), so it
inherits its parent's key and lands on the machine that already holds that prefix; another
session with the same prefix gets another key, so two busy sessions do not share one key's
~15-a-minute budget. A key is an opaque hash: no prompt text and no session content leaves
in it.

The key is transport, not prompt: it is not part of the request bytes the audit hashes (a
changed key is no changed token, and must not be reported as a byte change at offset 0). It
is recorded with each call's usage instead (``Usage.raw["cache"]["routing_key"]``), so a
changed key shows as its own cause.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ctxwright.core.messages import canonical_json
from ctxwright.core.request import ChatRequest

__all__ = ["ROUTING_HINTS", "RoutingHint", "header_name", "prefix_sha256", "routing_key"]

#: the key's length in hex digits after its ``cw-`` tag (OpenAI takes keys up to 64 characters)
KEY_HEX = 32


def routing_key(prefix_sha: str, root_session_id: str) -> str:
    """The stable key for a session lineage on one frozen prefix: ``cw-`` and 32 hex digits of
    sha256(prefix sha256 ``:`` root session id). Equal for a parent and every sub-agent it
    starts; different for another session or another prefix."""
    digest = hashlib.sha256(f"{prefix_sha}:{root_session_id}".encode()).hexdigest()
    return f"cw-{digest[:KEY_HEX]}"


def prefix_sha256(request: ChatRequest) -> str:
    """The sha256 of a request's frozen prefix as sent: its tools and its leading system
    message (canonical JSON). The trajectory after it changes every call and is left out."""
    head = [m.to_wire() for m in request.messages[:1] if m.role == "system"]
    tools = [t.to_wire() for t in request.tools]
    return hashlib.sha256(canonical_json({"system": head, "tools": tools}).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RoutingHint:
    """Where one server takes a routing key: a body field or a request header."""

    server: str
    where: str  # "body" | "header"
    name: str
    source: str  # the public documentation it follows
    note: str


#: The servers ctxwright knows, by the name ``--routing-header`` also accepts as a preset.
ROUTING_HINTS: dict[str, RoutingHint] = {
    "openai": RoutingHint(
        "OpenAI",
        "body",
        "prompt_cache_key",
        "developers.openai.com/api/docs/guides/prompt-caching",
        "routing hash of the first ~256 tokens plus the key; about 15 requests a minute per prefix and key",
    ),
    "vllm": RoutingHint(
        "vLLM production stack router",
        "header",
        "x-user-id",
        "docs.vllm.ai/projects/production-stack (Router Logic: SessionRouter)",
        "the header is the router's --session-key; x-user-id is the name its session-routing examples use",
    ),
    "sglang": RoutingHint(
        "SGLang model gateway (router)",
        "header",
        "x-smg-routing-key",
        "SMG docs: Sticky Sessions and Routing Keys",
        "sticks with --routing-key-override (alias --sticky-sessions) or the manual policy",
    ),
    "dynamo": RoutingHint(
        "NVIDIA Dynamo",
        "header",
        "X-Dynamo-Session-ID",
        "docs.nvidia.com/dynamo: Agents, Session IDs",
        "passive metadata: a routing policy must opt in to use it",
    ),
}


def header_name(value: str) -> str:
    """The header ``--routing-header VALUE`` means: a preset's header (``vllm``, ``sglang``,
    ``dynamo``), else ``VALUE`` itself, which must be a valid HTTP header name."""
    hint = ROUTING_HINTS.get(value.strip().lower())
    if hint is not None:
        if hint.where != "header":
            raise ValueError(
                f"{value!r} takes the key in the request body ({hint.name}), not a header: "
                "use --prompt-cache-key auto instead of --routing-header"
            )
        return hint.name
    name = value.strip()
    if not name or any(not (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name):
        raise ValueError(
            f"--routing-header {value!r} is not an HTTP header name (letters, digits and -_. only): "
            "give the name your router reads, or a preset: vllm, sglang, dynamo"
        )
    return name
