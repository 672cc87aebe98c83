"""A chat-completions agent written with the official ``openai`` SDK, whose history handling
can be broken the ways that make a request leave its recording (``tests/test_gate_every_request.py``).

``python tests/window_agent.py SHAPE REWRITE`` (the SDK reads ``OPENAI_BASE_URL``):

- SHAPE ``chat``: five questions, one call each, every reply appended to the history;
  ``tools``: one question, four tool calls (``step``) and the answer -- five calls too.
- REWRITE ``none``: the honest agent (the golden is its recording); ``window``: from its 4th
  call it sends only ``[system, newest user message]`` -- a sliding window of one message;
  ``edit``: from its 4th call every earlier reply is cut to its first sentence, in place.

Each call's reply is what a model would say; the agent only carries it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import openai

SYSTEM = "You are a terse assistant. Answer in one line."
QUESTIONS = [f"Question {k}: what is {k} squared?" for k in range(1, 6)]
TASK = "Count to four with the step tool, then say done."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "step",
            "description": "Take one step.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
        },
    }
]
#: the 4th call (1-based) is the first one rewritten
FROM_CALL = 4


def rewritten(history: list[dict[str, Any]], call: int, rewrite: str) -> list[dict[str, Any]]:
    """What the agent sends on its ``call``-th call."""
    if call < FROM_CALL or rewrite == "none":
        return history
    if rewrite == "window":
        newest = next(m for m in reversed(history) if m["role"] == "user")
        return [history[0], newest]
    out = []
    for m in history:
        if m["role"] == "assistant" and isinstance(m.get("content"), str) and ". " in m["content"]:
            m = {**m, "content": m["content"].split(". ")[0] + "."}
        out.append(m)
    return out


def main(shape: str, rewrite: str, env: Mapping[str, str] | None = None) -> int:
    kw: dict[str, Any] = {"max_retries": 0}
    if env is not None:
        kw.update(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"])
    client = openai.OpenAI(**kw)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    call = 0
    questions = QUESTIONS if shape == "chat" else [TASK]
    for question in questions:
        history.append({"role": "user", "content": question})
        while True:
            call += 1
            extra: dict[str, Any] = {"tools": TOOLS} if shape == "tools" else {}
            sent: Any = rewritten(history, call, rewrite)  # plain dicts, as an agent builds them
            reply = client.chat.completions.create(model="gpt-test", messages=sent, **extra)
            msg = reply.choices[0].message
            calls: list[Any] = list(msg.tool_calls or ())
            turn: dict[str, Any] = {"role": "assistant", "content": msg.content}
            if calls:
                turn["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ]
            history.append(turn)
            for c in calls:
                history.append({"role": "tool", "tool_call_id": c.id, "content": f"stepped: {c.function.arguments}"})
            if not calls:
                break
    print(history[-1]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
