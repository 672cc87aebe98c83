"""How ``ctxwright wrap`` points each known agent at its recording proxy: one row per agent,
the environment variables (or config flags) that agent reads for its provider's base URL.

Why a table of data: an agent reads its base URL from a place of its own choosing, and the
URL it expects differs -- the ``anthropic`` SDK and Claude Code want the origin (they add
``/v1/messages``), the ``openai`` SDK and Codex want ``.../v1`` (they add
``/chat/completions`` or ``/responses``), goose wants a host, opencode a JSON config. A wrong
guess is silent: the agent talks to its provider directly and nothing is recorded. Each row
names the public documentation it follows, and docs/agents.md shows the same table.

In the templates, ``{origin}`` is the proxy's ``http://127.0.0.1:PORT`` and ``{v1}`` is
``{origin}/v1``. A command that names no row gets both SDKs' variables (:data:`SDK`): any
program built on the official ``openai`` or ``anthropic`` SDK (Python, TypeScript) reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AgentRow:
    """One agent: the program names that start it, what to set, and where that is documented."""

    name: str
    #: the file names of the programs that start it (``os.path.basename(argv[0])``)
    programs: tuple[str, ...]
    #: environment variable -> value template (``{origin}``, ``{v1}``)
    env: tuple[tuple[str, str], ...] = ()
    #: arguments inserted right after the program name (templates too)
    args: tuple[str, ...] = ()
    #: environment variables holding a JSON object that the agent merges into its config; the
    #: template is merged into what the user already set there (``OPENCODE_CONFIG_CONTENT``)
    json_env: tuple[tuple[str, str], ...] = ()
    #: why wrap refuses this agent (``None``: it does not)
    refuse: str | None = None
    #: the public documentation of the variables set
    docs: str = ""


SDK = AgentRow(
    name="a program on the openai or anthropic SDK (any other command)",
    programs=(),
    env=(("OPENAI_BASE_URL", "{v1}"), ("ANTHROPIC_BASE_URL", "{origin}")),
    docs="github.com/openai/openai-python README (OPENAI_BASE_URL); "
    "github.com/anthropics/anthropic-sdk-python README (ANTHROPIC_BASE_URL)",
)

AGENTS: tuple[AgentRow, ...] = (
    AgentRow(
        name="Claude Code",
        programs=("claude",),
        env=(("ANTHROPIC_BASE_URL", "{origin}"),),
        docs="code.claude.com/docs/en/env-vars (ANTHROPIC_BASE_URL); code.claude.com/docs/en/llm-gateway",
    ),
    AgentRow(
        name="Codex CLI",
        programs=("codex",),
        env=(("OPENAI_BASE_URL", "{v1}"),),
        # a config.toml `openai_base_url` would take precedence over the variable: the command
        # line's -c takes precedence over config.toml
        args=("-c", 'openai_base_url="{v1}"'),
        docs="github.com/openai/codex codex-rs/core/src/model_provider_info.rs (the built-in openai provider "
        "reads OPENAI_BASE_URL); developers.openai.com/codex/config-reference (openai_base_url, -c key=value)",
    ),
    AgentRow(
        name="opencode",
        programs=("opencode",),
        json_env=(
            (
                "OPENCODE_CONFIG_CONTENT",
                '{"provider": {"anthropic": {"options": {"baseURL": "{v1}"}}, '
                '"openai": {"options": {"baseURL": "{v1}"}}}}',
            ),
        ),
        docs="opencode.ai/docs/config (OPENCODE_CONFIG_CONTENT, merged last); opencode.ai/docs/providers "
        "(provider.<id>.options.baseURL; the AI SDK's default ends in /v1)",
    ),
    AgentRow(
        name="aider",
        programs=("aider",),
        env=(("OPENAI_API_BASE", "{v1}"), ("ANTHROPIC_API_BASE", "{origin}"), ("ANTHROPIC_BASE_URL", "{origin}")),
        docs="aider.chat/docs/config/options.html (--openai-api-base, OPENAI_API_BASE); aider calls models "
        "through litellm, which reads ANTHROPIC_API_BASE, then ANTHROPIC_BASE_URL (docs.litellm.ai/docs/providers/anthropic)",
    ),
    AgentRow(
        name="goose",
        programs=("goose",),
        env=(("OPENAI_HOST", "{origin}"), ("ANTHROPIC_HOST", "{origin}")),
        docs="block.github.io/goose/docs/getting-started/providers (OPENAI_HOST with OPENAI_BASE_PATH "
        "v1/chat/completions; ANTHROPIC_HOST)",
    ),
    AgentRow(
        name="Gemini CLI",
        programs=("gemini",),
        refuse="Gemini CLI speaks only Google's Gemini API, which ctxwright's proxy neither relays nor audits "
        "(it speaks Anthropic Messages, OpenAI chat completions and Responses); run gemini without wrap",
        docs="github.com/google-gemini/gemini-cli docs/get-started/authentication.md (Gemini API, Vertex AI)",
    ),
)


def agent_for(argv: Sequence[str]) -> AgentRow:
    """The row of the program ``argv`` starts: by its file name, else :data:`SDK`."""
    program = os.path.basename(argv[0]) if argv else ""
    for row in AGENTS:
        if program in row.programs:
            return row
    return SDK


def _fill(template: str, origin: str) -> str:
    # not str.format: the JSON templates are full of braces
    return template.replace("{v1}", origin + "/v1").replace("{origin}", origin)


def _merged(base: Any, over: Any) -> Any:
    """``over`` laid over ``base``, objects merged key by key (opencode merges configs so)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merged(base.get(k), v)
        return out
    return over


def pointed(
    row: AgentRow, argv: Sequence[str], origin: str, env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The command line and the environment that point ``argv`` (an agent of ``row``) at the
    proxy listening at ``origin``. A JSON variable the user set already keeps what it holds;
    one that is not a JSON object raises ``ValueError`` (its agent would not read ours either)."""
    new_env = dict(env)
    for var, template in row.env:
        new_env[var] = _fill(template, origin)
    for var, template in row.json_env:
        ours = json.loads(_fill(template, origin))
        theirs: Any = {}
        if env.get(var, "").strip():
            try:
                theirs = json.loads(env[var])
            except ValueError:
                theirs = None
            if not isinstance(theirs, dict):
                raise ValueError(f"{var} is set but is not a JSON object; unset it or fix it, so wrap can add to it")
        new_env[var] = json.dumps(_merged(theirs, ours))
    args = [_fill(a, origin) for a in row.args]
    return [argv[0], *args, *argv[1:]], new_env


__all__ = ["AGENTS", "SDK", "AgentRow", "agent_for", "pointed"]
