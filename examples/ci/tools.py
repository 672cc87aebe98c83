"""The example agents' own tools: what they do, and their JSON schemas in each API's shape.

Shared by the three example agents (``openai_chat_agent.py``, ``openai_responses_agent.py``,
``anthropic_agent.py``) so that each one's tools are the same list, in the same order.
"""

from __future__ import annotations

import json
from typing import Any

GLOSSARY = {
    "prefix": "the part of a prompt that stays the same on every call: system prompt and tools",
    "trajectory": "the messages of a session, appended call after call",
}

#: name -> (description, JSON schema of the arguments)
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "add": (
        "Add two integers and return their sum.",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    "lookup": (
        "Look up a word in the team's glossary.",
        {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    ),
}


def run_tool(name: str, arguments: str | dict[str, Any]) -> str:
    """The tool's result as text; a bad call is a result too (the model reads it)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        if name == "add":
            return str(int(args["a"]) + int(args["b"]))
        if name == "lookup":
            return GLOSSARY.get(str(args["word"]).lower(), "not in the glossary")
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: bad arguments for {name}: {exc}"
    return f"error: no tool named {name}"


def chat_tools(names: list[str]) -> list[dict[str, Any]]:
    """OpenAI chat completions: ``{"type": "function", "function": {...}}``."""
    return [
        {"type": "function", "function": {"name": n, "description": TOOLS[n][0], "parameters": TOOLS[n][1]}}
        for n in names
    ]


def responses_tools(names: list[str]) -> list[dict[str, Any]]:
    """OpenAI Responses: ``{"type": "function", "name": ..., "parameters": ...}``."""
    return [{"type": "function", "name": n, "description": TOOLS[n][0], "parameters": TOOLS[n][1]} for n in names]


def anthropic_tools(names: list[str]) -> list[dict[str, Any]]:
    """Anthropic Messages: ``{"name", "description", "input_schema"}``."""
    return [{"name": n, "description": TOOLS[n][0], "input_schema": TOOLS[n][1]} for n in names]
