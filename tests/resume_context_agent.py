"""An agent loop of its own over ``ctxwright.Context``, stored in SQLite, resumed with
``Context.resume`` (``tests/test_gate_resume.py``).

``python tests/resume_context_agent.py --db DB [--resume] TASK`` calls ``$OPENAI_BASE_URL``
with the official ``openai`` SDK; ctxwright decides what each request holds and records every
event in DB. The session's id is kept in ``DB.session``. On SIGINT (a call in flight) it closes
the context and exits 130; with ``--resume`` it continues that session (``Context.resume``) and
sends the request it was stopped in again.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import openai

from ctxwright import Context, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers and return their sum."""
    return a + b


SYSTEM = "You add numbers with the add tool, then answer in one sentence."


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", nargs="*")
    ap.add_argument("--db", required=True)
    ap.add_argument("--resume", action="store_true")
    args = ap.parse_args()
    kept = Path(args.db + ".session")
    if args.resume:
        ctx = Context.resume(kept.read_text().strip(), tools=[add], db=args.db)
    else:
        ctx = Context(SYSTEM, [add], db=args.db)
        kept.write_text(ctx.session.id)
        ctx.add_user(" ".join(args.task))
    client = openai.OpenAI(max_retries=0)
    model = os.environ.get("AGENT_MODEL", "m")
    with ctx:
        try:
            for _ in range(6):
                reply = client.chat.completions.create(model=model, **ctx.request())
                step = ctx.record(reply)
                if not step.tool_calls:
                    print(step.message.content)
                    return 0
                ctx.run_tools(step)
        except KeyboardInterrupt:
            print("interrupted; go on with --resume", file=sys.stderr)
            return 130
    return 1


if __name__ == "__main__":
    sys.exit(main())
