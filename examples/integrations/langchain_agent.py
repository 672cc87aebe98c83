"""A LangChain v1 agent (``create_agent``, one tool, a dynamic system prompt) whose every model
call ctxwright records and audits, with the system prompt kept frozen.

    python examples/integrations/langchain_agent.py [BASE_URL] [--db PATH] [--model NAME]

BASE_URL defaults to ``$OPENAI_BASE_URL``, else a local llama.cpp server at
http://127.0.0.1:8080/v1; the database to ctxwright's own (``$CTXWRIGHT_DB``).
"""

from __future__ import annotations

import argparse
import os

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, dynamic_prompt
from langchain_core.tools import tool

from ctxwright.integrations.langchain import FrozenSystemPrompt, recorded_chat_model
from ctxwright.store.sqlite import default_db_target


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@dynamic_prompt
def with_step(request: ModelRequest) -> str:  # the kind of prompt that breaks the cache every call
    return f"You add numbers with the add tool.\nMessages so far: {len(request.messages)}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("base_url", nargs="?", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--db", default=str(default_db_target()))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    args = p.parse_args(argv)
    api_key = os.environ.get("OPENAI_API_KEY", "sk-local")
    model, recorder = recorded_chat_model(
        args.db,
        model=args.model,
        base_url=args.base_url,
        api_key=api_key,
        max_retries=0,
        max_tokens=64,
        null_content="",  # a tool-call turn's "content": null, which llama-cpp-python's server rejects
    )
    with recorder:
        # FrozenSystemPrompt after with_step: it sees the prompt with_step built, sends the first one
        agent = create_agent(model, tools=[add], middleware=[with_step, FrozenSystemPrompt()])
        state = agent.invoke({"messages": [{"role": "user", "content": "What is 17 + 25?"}]}, {"recursion_limit": 8})
        print(state["messages"][-1].text)
        sid = recorder.session_id
        print(f"session {sid}: ctxwright audit --proxy-session {sid} --db {args.db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
