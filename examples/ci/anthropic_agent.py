"""A small agent written with the official ``anthropic`` SDK, not with ctxwright.

    ANTHROPIC_BASE_URL=http://127.0.0.1:8787 python examples/ci/anthropic_agent.py "What is 17 + 25?"

The SDK reads ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``; ``AGENT_MODEL`` names the model.
One ``cache_control`` breakpoint at the end of the system prompt, as Anthropic's docs show.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anthropic

sys.path.insert(0, str(Path(__file__).parent))
from tools import anthropic_tools, run_tool

SYSTEM = Path(__file__).with_name("system_prompt.md").read_text(encoding="utf-8")
TOOL_NAMES = ["add", "lookup"]
MAX_CALLS = 6


def main(task: str) -> int:
    client = anthropic.Anthropic(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "claude-sonnet-4-5")
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(MAX_CALLS):
        reply = client.messages.create(
            model=model,
            max_tokens=512,
            system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            tools=anthropic_tools(TOOL_NAMES),  # type: ignore[arg-type]
            messages=messages,  # type: ignore[arg-type]
        )
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            print("".join(b.text for b in reply.content if b.type == "text"))
            return 0
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b.id, "content": run_tool(b.name, b.input)} for b in uses
                ],
            }
        )
    print("gave up after", MAX_CALLS, "calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]) or "What is 17 + 25? Use the add tool."))
