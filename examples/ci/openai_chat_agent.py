"""A small agent written with the official ``openai`` SDK (chat completions), not with ctxwright.

    OPENAI_BASE_URL=http://127.0.0.1:8787/v1 python examples/ci/openai_chat_agent.py "What is 17 + 25?"

The SDK reads ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``; ``AGENT_MODEL`` names the model. It
is the agent of docs/ci.md: its golden trace is recorded once through ``ctxwright proxy``, then
``ctxwright gate`` replays it in CI.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).parent))
from tools import chat_tools, run_tool

SYSTEM = Path(__file__).with_name("system_prompt.md").read_text(encoding="utf-8")
TOOL_NAMES = ["add", "lookup"]
MAX_CALLS = 6
#: how many of the latest messages are sent (None: all of them)
WINDOW: int | None = None


def tool_result(name: str, arguments: str) -> str:
    return run_tool(name, arguments)


def main(task: str) -> int:
    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "smollm2")
    history: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(MAX_CALLS):
        sent = history if WINDOW is None else history[-WINDOW:]
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": SYSTEM}, *sent],
            tools=chat_tools(TOOL_NAMES),  # type: ignore[arg-type]
            max_tokens=64,
            temperature=0,
        )
        msg = reply.choices[0].message
        turn: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
        if msg.tool_calls:
            turn["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in msg.tool_calls
                if c.type == "function"
            ]
        history.append(turn)
        if not msg.tool_calls:
            print(msg.content or "")
            return 0
        for c in turn["tool_calls"]:
            result = tool_result(c["function"]["name"], c["function"]["arguments"])
            history.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    print("gave up after", MAX_CALLS, "calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]) or "What is 17 + 25? Use the add tool."))
