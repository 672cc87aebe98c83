"""A pydantic-ai agent whose every model call ctxwright records and audits, in process.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python examples/integrations/pydantic_ai_agent.py "What is 2 + 3?"

Needs ``pip install 'ctxwright[pydantic-ai]'``. ``OPENAI_BASE_URL`` (or ``--base-url``): any
OpenAI-compatible chat-completions server (default: llama.cpp's on port 8080); ``AGENT_MODEL``
names the model; ``--null-content ""`` for llama-cpp-python's server. One instruction changes on every call (a clock); registered with pydantic-ai's
``on_change="append"`` it leaves the system prompt byte-identical and arrives as an appended
message, so every call is an append. Then: ``ctxwright audit --proxy-session <id> --db ctxwright.db``.
"""

from __future__ import annotations

import argparse
import os
import time

from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

from ctxwright.integrations.pydantic_ai import recorded_model


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("question", nargs="?", default="What is 2 + 3? Use the add tool.")
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    p.add_argument("--db", default="ctxwright.db")
    p.add_argument("--null-content", help='send "content": null as this text ("" for llama-cpp-python\'s server)')
    a = p.parse_args(argv)

    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    model, recorder = recorded_model(
        a.db, base_url=a.base_url, api_key=api_key, model=a.model, null_content=a.null_content, max_retries=0
    )
    agent = Agent(model, instructions="You answer in one short sentence. Use tools for arithmetic.", tools=[add])

    @agent.instructions(name="clock", on_change="append")
    def clock() -> str:
        return f"The time is {time.time():.3f}."

    with recorder:
        try:
            print(agent.run_sync(a.question, usage_limits=UsageLimits(request_limit=6)).output)
        except UsageLimitExceeded as exc:  # a tiny local model may call the tool forever
            print(exc)
        sid = recorder.session_id
    print(f"session {sid}: ctxwright audit --proxy-session {sid} --db {a.db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
