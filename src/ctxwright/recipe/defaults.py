"""Defaults that depend on the backend, and which backend a session runs on.

Both must be known before anything else is resolved: what is switched on when an option is
not given depends on the backend (:func:`backend_defaults`), so the backend's name is
decided first (:func:`backend_name`), before the backend exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxwright.backends.external import EXTERNAL
from ctxwright.core.request import ToolChoice
from ctxwright.errors import ConfigError

__all__ = ["BACKENDS", "BackendDefaults", "backend_defaults", "backend_name", "check_same_model", "implied_backend"]

#: The backends the harness creates from a name (any other is passed in as an object).
BACKENDS = ("embedded", "openai", "anthropic", "openai-responses")


@dataclass(frozen=True)
class BackendDefaults:
    """What the harness does when an option is not given, for one kind of backend.

    The embedded backend runs SmolLM2-135M (``backends/embedded.py``), and each value below
    that differs from a served model's was measured on it:

    * ``features`` (status bar, TODO tools, ``read_result``, ``delegate``, LLM summaries):
      with the status block last and its manual in the prompt, the 135M model calls
      ``get_current_time("UTC")`` alone and answers "10.23" (without them it calls both demo
      tools); with ``read_result`` in its tool list it calls it with invented ids and answers
      about the error; it summarizes poorly (``benchmarks/compression.py`` measures it). On a
      served model they are on.
    * ``tool_choice_first="required"``: the first call of a new session must call a tool,
      or the tiny model answers from nothing.
    * ``max_tool_rounds=1``: it never decides on its own that it has enough facts.
    * ``cache_price_ratio``: cached ÷ uncached input price, for the status bar's mode chooser;
      a local model pays nothing per token, a served one typically 0.1.

    A context driven by the caller's own loop (``external``, ``backends/external.py``) has the
    features off: the status bar, TODO tools and ``read_result`` change what the caller's model
    sees, so they are asked for, and ``delegate`` and LLM summaries need a model to call.
    """

    features: bool
    tool_choice_first: ToolChoice
    max_tool_rounds: int | None
    cache_price_ratio: float


def backend_defaults(backend_name: str) -> BackendDefaults:
    """The defaults for a backend by its ``name`` (``"embedded"``, ``"openai"``, ``"scripted"``...)."""
    if backend_name == "embedded":
        return BackendDefaults(features=False, tool_choice_first="required", max_tool_rounds=1, cache_price_ratio=0.0)
    if backend_name == EXTERNAL:  # the caller's loop; delegate and LLM summaries need a model to call
        return BackendDefaults(features=False, tool_choice_first="auto", max_tool_rounds=None, cache_price_ratio=0.1)
    return BackendDefaults(features=True, tool_choice_first="auto", max_tool_rounds=None, cache_price_ratio=0.1)


def implied_backend(given: Mapping[str, Any]) -> str | None:
    """The backend the given keywords point to, before any stored session is consulted:
    ``backend`` by name (an object's ``name``), else ``openai`` with ``model`` or
    ``base_url``, ``embedded`` with ``gguf``, else ``None`` (nothing says). What a resume is
    checked against (:func:`check_same_model`)."""
    backend = given.get("backend")
    if backend is not None:
        return backend if isinstance(backend, str) else str(getattr(backend, "name", ""))
    if given.get("model") or given.get("base_url"):
        return "openai"
    return "embedded" if given.get("gguf") else None


def backend_name(given: Mapping[str, Any], recorded_backend: str | None = None, *, default: str = "embedded") -> str:
    """The name of the backend the session runs on: the one given (by name, or the object's
    ``name``), else the stored session's (``recorded_backend``), else ``openai`` when
    ``base_url`` is given (or ``model``, unless the default is ``external``: a context driven
    by the caller's loop names the caller's model), ``embedded`` when ``gguf`` is, else
    ``default`` (the Harness's: ``embedded``). Its :func:`backend_defaults` decide every option
    left to the backend."""
    backend = given.get("backend")
    if backend is not None:
        return backend if isinstance(backend, str) else str(getattr(backend, "name", ""))
    if recorded_backend is not None:
        return recorded_backend
    if given.get("base_url") is not None or (given.get("model") is not None and default != EXTERNAL):
        return "openai"
    if given.get("gguf") is not None:
        return "embedded"
    return default


def check_same_model(
    session_id: str, stored_backend: str | None, stored_model: str | None, backend: str | None, model: str | None
) -> None:
    """Refuse to continue a session on another backend or model than it ran on.

    One trajectory is one model's conversation: every reply after a switch would be
    conditioned on turns another model wrote, and its compactions written into them."""
    if stored_backend and backend and backend != stored_backend:
        raise ConfigError(
            f"session {session_id} ran on the {stored_backend} backend; continuing it on {backend} would mix two "
            f"models' turns in one trajectory. Leave --backend out to continue it on {stored_backend}, or start a "
            "new session"
        )
    if stored_model and model and model != stored_model:
        raise ConfigError(
            f"session {session_id} ran on model {stored_model!r}; continuing it on {model!r} would have that model "
            "answer (and compact) a conversation another model wrote. Leave --model/--gguf out to continue it on "
            f"{stored_model!r}, or start a new session"
        )
