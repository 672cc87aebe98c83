"""A LangChain v1 agent (``create_agent``, one tool, a dynamic system prompt) whose every model
call ctxwright records and audits, with the system prompt kept frozen.

    python examples/integrations/langchain_agent.py [--base-url URL] [--model NAME] [--db PATH] [PROMPT]

The three examples in this folder take the same arguments and store in the same place:
``--base-url`` (default ``$OPENAI_BASE_URL``, else a local server at http://127.0.0.1:8080/v1),
``--model`` (default ``$AGENT_MODEL``, else ``smollm2``), ``--db`` (default ctxwright's own store,
``$CTXWRIGHT_DB``, which ``ctxwright audit`` reads without ``--db``) and the prompt. Needs
``pip install 'ctxwright[langchain]'``. The system prompt changes on every call (a message count);
``FrozenSystemPrompt`` keeps what is sent append-only.
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
    p.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1"))
    p.add_argument("--model", default=os.environ.get("AGENT_MODEL", "smollm2"))
    p.add_argument("--db", default=str(default_db_target()), help="the ctxwright store (default: its own)")
    p.add_argument("prompt", nargs="?", default="What is 17 + 25? Use the add tool.")
    a = p.parse_args(argv)
    api_key = os.environ.get("OPENAI_API_KEY", "not-needed")
    # the adapter sends a tool-call turn's "content": null as "" by default (llama-cpp-python's
    # server answers the null with HTTP 500)
    model, recorder = recorded_chat_model(
        a.db, model=a.model, base_url=a.base_url, api_key=api_key, max_retries=0, max_tokens=64
    )
    with recorder:
        # FrozenSystemPrompt after with_step: it sees the prompt with_step built, sends the first one
        agent = create_agent(model, tools=[add], middleware=[with_step, FrozenSystemPrompt()])
        state = agent.invoke({"messages": [{"role": "user", "content": a.prompt}]}, {"recursion_limit": 8})
        print(state["messages"][-1].text)
        sid = recorder.session_id
    print(f"session {sid}: ctxwright audit {sid} --db {a.db}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
