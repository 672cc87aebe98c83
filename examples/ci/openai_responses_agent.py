"""A small agent written with the official ``openai`` SDK on the Responses API, not with ctxwright.

    OPENAI_BASE_URL=http://127.0.0.1:8787/v1 python examples/ci/openai_responses_agent.py "What is 17 + 25?"

Stateless: every call sends the whole conversation as ``input`` (``store=False``), the system
prompt as ``instructions``. ``AGENT_MODEL`` names the model.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).parent))
from tools import responses_tools, run_tool

SYSTEM = Path(__file__).with_name("system_prompt.md").read_text(encoding="utf-8")
TOOL_NAMES = ["add", "lookup"]
MAX_CALLS = 6


def main(task: str) -> int:
    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "gpt-5.5")
    items: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for _ in range(MAX_CALLS):
        reply = client.responses.create(
            model=model,
            instructions=SYSTEM,
            input=items,  # type: ignore[arg-type]
            tools=responses_tools(TOOL_NAMES),  # type: ignore[arg-type]
            store=False,
            max_output_tokens=256,
        )
        calls = [o for o in reply.output if o.type == "function_call"]
        for o in reply.output:
            items.append(o.model_dump(exclude_none=True))
        if not calls:
            print(reply.output_text)
            return 0
        for c in calls:
            items.append(
                {"type": "function_call_output", "call_id": c.call_id, "output": run_tool(c.name, c.arguments)}
            )
    print("gave up after", MAX_CALLS, "calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(" ".join(sys.argv[1:]) or "What is 17 + 25? Use the add tool."))
