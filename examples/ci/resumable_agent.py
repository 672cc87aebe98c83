"""A small agent that can be stopped and resumed, written with the official ``openai`` SDK.

    OPENAI_BASE_URL=http://127.0.0.1:8787/v1 python examples/ci/resumable_agent.py --state s.json "What is 17 + 25?"
    # Ctrl-C while it works: it saves its messages and exits 130; then, to go on:
    python examples/ci/resumable_agent.py --state s.json --resume

It saves its messages to the state file (JSON) after every step. On SIGINT it saves them and
exits 130; started with ``--resume`` -- or again with the same ``--state`` while that file
holds an interrupted run -- it reloads them and re-sends its pending request, which must be
the request it was stopped in, byte for byte, for the provider's cache to serve it.
``ctxwright gate --resume-after N`` checks exactly that (docs/ci.md, "Resume parity").

``--bug`` plants one of the resume bugs agents are known for, on reload only:

* ``reminder``: the reminder appended to the last user message moves into the system prompt;
* ``blocks``: a user message's content string becomes a list of text blocks;
* ``date``: the system prompt is re-synthesised with the current date and time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import openai

sys.path.insert(0, str(Path(__file__).parent))
from tools import chat_tools, run_tool

SYSTEM = Path(__file__).with_name("system_prompt.md").read_text(encoding="utf-8")
REMINDER = "\n\n<reminder>Use the tools for every fact; answer in one or two sentences.</reminder>"
TOOL_NAMES = ["add", "lookup"]
MAX_CALLS = 6


def save(path: Path, state: dict[str, Any]) -> None:
    """Whole or not at all: written beside the file, then renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def reload(path: Path, bug: str | None) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    messages = state["messages"]
    if bug == "reminder":  # the reminder leaves the user message for the system prompt
        for m in messages:
            if m["role"] == "user" and isinstance(m["content"], str) and m["content"].endswith(REMINDER):
                m["content"] = m["content"][: -len(REMINDER)]
        state["system"] += REMINDER
    elif bug == "blocks":  # a content string read back as text blocks
        for m in messages:
            if m["role"] == "user" and isinstance(m["content"], str):
                m["content"] = [{"type": "text", "text": m["content"]}]
    elif bug == "date":  # the system prompt built again, with today's date in it
        state["system"] = SYSTEM + f"\n\nCurrent date and time: {time.strftime('%Y-%m-%d %H:%M:%S')}"
    return state


def step(client: openai.OpenAI, model: str, state: dict[str, Any]) -> bool:
    """One model call and its tools; ``True`` when the agent answered."""
    reply = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": state["system"]}, *state["messages"]],
        tools=chat_tools(TOOL_NAMES),  # type: ignore[arg-type]
        max_tokens=64,
        temperature=0,
    )
    msg = reply.choices[0].message
    turn: dict[str, Any] = {"role": "assistant", "content": msg.content or ""}
    calls = [c for c in msg.tool_calls or [] if c.type == "function"]
    if calls:
        turn["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in calls
        ]
    state["messages"].append(turn)
    for c in calls:
        result = run_tool(c.function.name, c.function.arguments)
        state["messages"].append({"role": "tool", "tool_call_id": c.id, "content": result})
    if not calls:
        print(msg.content or "")
    return not calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", nargs="*")
    ap.add_argument("--state", default="agent_state.json", help="where the messages are saved")
    ap.add_argument("--resume", action="store_true", help="go on from the state file")
    ap.add_argument("--bug", choices=("reminder", "blocks", "date"), help="plant a resume bug (on reload)")
    args = ap.parse_args()
    path = Path(args.state)
    interrupted = path.exists() and json.loads(path.read_text(encoding="utf-8")).get("status") == "interrupted"
    if args.resume or interrupted:
        state = reload(path, args.bug)
    else:
        task = " ".join(args.task) or "What is 17 + 25? Use the add tool."
        state = {"system": SYSTEM, "messages": [{"role": "user", "content": task + REMINDER}]}
    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "smollm2")
    try:
        for _ in range(MAX_CALLS):
            state["status"] = "running"
            save(path, state)
            if step(client, model, state):
                state["status"] = "done"
                save(path, state)
                return 0
    except KeyboardInterrupt:  # Ctrl-C: what was said so far is kept, and the call is made again on resume
        state["status"] = "interrupted"
        save(path, state)
        print(f"interrupted; go on with: {sys.argv[0]} --state {path} --resume", file=sys.stderr)
        return 130
    state["status"] = "gave up"
    save(path, state)
    print("gave up after", MAX_CALLS, "calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
