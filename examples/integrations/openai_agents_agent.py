"""An OpenAI Agents SDK agent whose every model call ctxwright records and audits, in process.

    python examples/integrations/openai_agents_agent.py [--base-url URL] [--model NAME] [--db PATH] [PROMPT]

The three examples in this folder take the same arguments and store in the same place:
``--base-url`` (default ``$OPENAI_BASE_URL``, else a local server at http://127.0.0.1:8080/v1),
``--model`` (default ``$AGENT_MODEL``, else ``smollm2``), ``--db`` (default ctxwright's own store,
``$CTXWRIGHT_DB``, which ``ctxwright audit`` reads without ``--db``) and the prompt. Needs
``pip install 'ctxwright[openai-agents]'``. The instructions change on every call (a clock);
``FrozenInstructions`` keeps what is sent append-only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.exceptions import MaxTurnsExceeded

from ctxwright.integrations.openai_agents import CtxwrightProvider, FrozenInstructions
from ctxwright.store.sqlite import default_db_target


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def instructions(ctx: object, agent: object) -> str:
    return f"You answer in one short sentence. Use tools for arithmetic.\nThe time is {time.time():.3f}."


async def run(prompt: str, base_url: str, model: str, db: str) -> int:
    set_tracing_disabled(True)  # the SDK's tracing would upload to OpenAI
    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    # the provider sends a tool-call turn's "content": null as "" by default (llama-cpp-python's
    # server answers the null with HTTP 500)
    provider = CtxwrightProvider(db, base_url=base_url, api_key=api_key, model=model, max_retries=0)
    agent = Agent(name="adder", instructions=instructions, tools=[add], model_settings=ModelSettings(max_tokens=64))
    config = RunConfig(model_provider=provider, call_model_input_filter=FrozenInstructions())
    try:
        try:
            result = await Runner.run(agent, prompt, run_config=config, max_turns=3)
            print(result.final_output)
        except MaxTurnsExceeded as exc:  # a tiny local model may call the tool forever
            print(exc)
        sid = provider.session_id
    finally:
        await provider.aclose()
    print(f"session {sid}: ctxwright audit {sid} --db {db}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    p.add_argument("--db", default=str(default_db_target()), help="the ctxwright store (default: its own)")
    p.add_argument("prompt", nargs="?", default="What is 17 + 25? Use the add tool.")
    a = p.parse_args(argv)
    return asyncio.run(run(a.prompt, a.base_url, a.model, a.db))


if __name__ == "__main__":
    raise SystemExit(main())
