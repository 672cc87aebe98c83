"""An OpenAI Agents SDK agent whose every model call ctxwright records and audits, in process.

    OPENAI_BASE_URL=http://127.0.0.1:8080/v1 python examples/integrations/openai_agents_agent.py "Weather in Paris?"

Needs ``pip install 'ctxwright[openai-agents]'``. ``OPENAI_BASE_URL`` (or ``--base-url``): any
OpenAI-compatible chat-completions server (default: llama.cpp's on port 8080); ``AGENT_MODEL``
names the model. The instructions change on every call (a clock); ``FrozenInstructions`` keeps
what is sent append-only. Then: ``ctxwright audit --proxy-session <id> --db ctxwright.db``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

from ctxwright.integrations.openai_agents import CtxwrightProvider, FrozenInstructions


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"It is sunny and 21 C in {city}."


def instructions(ctx: object, agent: object) -> str:
    return f"You answer in one short sentence. Use tools for facts.\nThe time is {time.time():.3f}."


async def run(question: str, base_url: str, model: str, db: str) -> int:
    set_tracing_disabled(True)  # the SDK's tracing would upload to OpenAI
    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    provider = CtxwrightProvider(db, base_url=base_url, api_key=api_key, model=model, max_retries=0)
    agent = Agent(name="weather", instructions=instructions, tools=[get_weather])
    config = RunConfig(model_provider=provider, call_model_input_filter=FrozenInstructions())
    try:
        result = await Runner.run(agent, question, run_config=config, max_turns=4)
        print(result.final_output)
        sid = provider.session_id
    finally:
        await provider.aclose()
    print(f"session {sid}: ctxwright audit --proxy-session {sid} --db {db}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("question", nargs="?", default="What is the weather in Paris?")
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    p.add_argument("--db", default="ctxwright.db")
    a = p.parse_args(argv)
    return asyncio.run(run(a.question, a.base_url, a.model, a.db))


if __name__ == "__main__":
    raise SystemExit(main())
