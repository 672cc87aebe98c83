"""A pydantic-ai agent whose every model call ctxwright records and audits, in process.

    python examples/integrations/pydantic_ai_agent.py [--base-url URL] [--model NAME] [--db PATH] [PROMPT]

The three examples in this folder take the same arguments and store in the same place:
``--base-url`` (default ``$OPENAI_BASE_URL``, else a local server at http://127.0.0.1:8080/v1),
``--model`` (default ``$AGENT_MODEL``, else ``smollm2``), ``--db`` (default ctxwright's own store,
``$CTXWRIGHT_DB``, which ``ctxwright audit`` reads without ``--db``) and the prompt. Needs
``pip install 'ctxwright[pydantic-ai]'``. One instruction changes on every call (a clock);
registered with pydantic-ai's ``on_change="append"`` it leaves the system prompt byte-identical
and arrives as an appended message, so every call is an append.
"""

from __future__ import annotations

import argparse
import os
import time

from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.usage import UsageLimits

from ctxwright.integrations.pydantic_ai import recorded_model
from ctxwright.store.sqlite import default_db_target


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    p.add_argument("--db", default=str(default_db_target()), help="the ctxwright store (default: its own)")
    p.add_argument("prompt", nargs="?", default="What is 17 + 25? Use the add tool.")
    a = p.parse_args(argv)
    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    # the adapter sends a tool-call turn's "content": null as "" by default (llama-cpp-python's
    # server answers the null with HTTP 500)
    model, recorder = recorded_model(
        a.db, base_url=a.base_url, api_key=api_key, model=a.model, max_retries=0, settings={"max_tokens": 64}
    )
    agent = Agent(model, instructions="You answer in one short sentence. Use tools for arithmetic.", tools=[add])

    @agent.instructions(name="clock", on_change="append")
    def clock() -> str:
        return f"The time is {time.time():.3f}."

    with recorder:
        try:
            print(agent.run_sync(a.prompt, usage_limits=UsageLimits(request_limit=3)).output)
        except UsageLimitExceeded as exc:  # a tiny local model may call the tool forever
            print(exc)
        sid = recorder.session_id
    print(f"session {sid}: ctxwright audit {sid} --db {a.db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
