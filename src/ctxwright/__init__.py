"""ctxwright: context engineering for LLM agents -- a frozen prefix, an append-only
trajectory, and an audit of every model call.

The public API is imported from here (``from ctxwright import Harness, tool``). Names are
loaded on first use (PEP 562), so ``import ctxwright.errors`` -- which every module does --
does not pull in the OpenAI SDK or the agent loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from ctxwright.agent.context import Context
    from ctxwright.agent.loop import RunResult
    from ctxwright.backends.embedded import EmbeddedBackend
    from ctxwright.backends.openai_compat import OpenAIBackend
    from ctxwright.backends.openai_responses import ResponsesBackend
    from ctxwright.backends.scripted import ScriptedBackend
    from ctxwright.compaction.config import CompactionConfig
    from ctxwright.compaction.hooks import CompactionHooks, PlanEdit, PlanView
    from ctxwright.compaction.survival import Keep
    from ctxwright.core.reasoning import ReasoningPolicy
    from ctxwright.defence.gate import GateRequest
    from ctxwright.defence.policy import GatePolicy
    from ctxwright.errors import (
        BackendError,
        BackendUnavailable,
        ConfigError,
        ContextWindowExceeded,
        CtxwrightError,
        GateRuleError,
        PrefixMismatch,
        SessionNotFound,
        Veto,
    )
    from ctxwright.harness import Harness
    from ctxwright.tools.registry import Tool, ToolRegistry, tool

#: public name -> the module that defines it
_EXPORTS = {
    "Harness": "ctxwright.harness",
    "Context": "ctxwright.agent.context",
    "tool": "ctxwright.tools.registry",
    "Tool": "ctxwright.tools.registry",
    "ToolRegistry": "ctxwright.tools.registry",
    "RunResult": "ctxwright.agent.loop",
    "CompactionConfig": "ctxwright.compaction.config",
    "CompactionHooks": "ctxwright.compaction.hooks",
    "PlanEdit": "ctxwright.compaction.hooks",
    "PlanView": "ctxwright.compaction.hooks",
    "Veto": "ctxwright.errors",
    "Keep": "ctxwright.compaction.survival",
    "ReasoningPolicy": "ctxwright.core.reasoning",
    "OpenAIBackend": "ctxwright.backends.openai_compat",
    "ResponsesBackend": "ctxwright.backends.openai_responses",
    "EmbeddedBackend": "ctxwright.backends.embedded",
    "ScriptedBackend": "ctxwright.backends.scripted",
    "CtxwrightError": "ctxwright.errors",
    "ConfigError": "ctxwright.errors",
    "PrefixMismatch": "ctxwright.errors",
    "SessionNotFound": "ctxwright.errors",
    "BackendError": "ctxwright.errors",
    "BackendUnavailable": "ctxwright.errors",
    "ContextWindowExceeded": "ctxwright.errors",
    "GateRuleError": "ctxwright.errors",
    "GatePolicy": "ctxwright.defence.policy",
    "GateRequest": "ctxwright.defence.gate",
}

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "CompactionConfig",
    "CompactionHooks",
    "ConfigError",
    "Context",
    "ContextWindowExceeded",
    "CtxwrightError",
    "EmbeddedBackend",
    "GatePolicy",
    "GateRequest",
    "GateRuleError",
    "Harness",
    "Keep",
    "OpenAIBackend",
    "PlanEdit",
    "PlanView",
    "PrefixMismatch",
    "ReasoningPolicy",
    "ResponsesBackend",
    "RunResult",
    "ScriptedBackend",
    "SessionNotFound",
    "Tool",
    "ToolRegistry",
    "Veto",
    "__version__",
    "tool",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxwright' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
