"""One long scripted conversation through each framework, with and without ctxwright's compaction.

    python benchmarks/integrations.py [--rounds 30] [--result-chars 2000] [--json out.json]

Each framework (the OpenAI Agents SDK, pydantic-ai, LangChain v1) runs the same agent: one tool,
``read_file(path)``, whose result is ``--result-chars`` characters of a file listing. A scripted
loopback server (``tests/fakeserver.py``: it rejects a request with an unanswered tool call or a
tool result without its call, as OpenAI does) answers ``--rounds`` tool calls, one per request,
then a final answer. Every call is recorded by the framework's ctxwright adapter
(``integrations/``), so the numbers are the live audit's: prompt tokens per call (ctxwright's own
count of the request, the same for every framework), the tokens it shares with the request
before it (reusable), and the calls that do not extend the one before (prefix breaks). With
compaction, each adapter runs the shared compactor (``integrations/compaction.py``) through the
framework's own hook: the Agents SDK's ``call_model_input_filter``, a LangChain middleware, and
for pydantic-ai the request itself (its history stays whole).

No model runs here: the answers are scripted, so every framework sends the same conversation and
the difference between two arms is what the framework or the compaction sends.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from ctxwright.integrations.compaction import WireCompactor  # noqa: E402
from ctxwright.proxy.store import ProxyLog  # noqa: E402
from ctxwright.store.sessions import Store  # noqa: E402
from fakeserver import FakeOpenAIServer as F  # noqa: E402

QUESTION = "Read the files the task needs, one call at a time, then say which one defines main()."


def listing(path: str, chars: int) -> str:
    """The scripted tool result: a file listing with identifiers the ledger can follow."""
    head = f"{path}: 4{len(path)}2 lines, sha 9f{len(path):04d}c1\n"
    body = "".join(f"    {i:04d}  def helper_{i}(x): return x + {i}\n" for i in range(chars // 40 + 1))
    return (head + body)[:chars]


def responder(rounds: int) -> Callable[[dict[str, Any]], Any]:
    """The scripted model: a read_file call per request until ``rounds`` results are in, then an answer."""

    def respond(req: dict[str, Any]) -> Any:
        done = sum(1 for m in req["messages"] if m.get("role") == "tool")
        if done >= rounds:
            return F.reply_text("/src/mod0.py defines main().")
        call = {
            "id": f"call_{done:03d}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"/src/mod{done}.py"})},
        }
        return F.reply_json(F.completion_body({"content": None, "tool_calls": [call]}, finish_reason="tool_calls"))

    return respond


def run_openai_agents(url: str, db: str, rounds: int, chars: int, compact: WireCompactor | None) -> str | None:
    from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled

    from ctxwright.integrations.openai_agents import CompactingFilter, CtxwrightProvider

    set_tracing_disabled(True)

    @function_tool
    def read_file(path: str) -> str:
        """Read one file."""
        return listing(path, chars)

    provider = CtxwrightProvider(db, base_url=url, api_key="sk-bench", model="bench", on_warning=lambda w: None)
    agent = Agent(name="reader", instructions="You read source files.", tools=[read_file])
    config = RunConfig(model_provider=provider)
    if compact is not None:
        config = RunConfig(model_provider=provider, call_model_input_filter=CompactingFilter(compactor=lambda: compact))

    async def go() -> None:
        await Runner.run(agent, QUESTION, run_config=config, max_turns=rounds + 5)
        await provider.aclose()

    asyncio.run(go())
    return provider.session_id


def run_pydantic_ai(url: str, db: str, rounds: int, chars: int, compact: WireCompactor | None) -> str | None:
    from pydantic_ai import Agent
    from pydantic_ai.usage import UsageLimits

    from ctxwright.integrations.pydantic_ai import recorded_model

    model, rec = recorded_model(
        db, base_url=url, model="bench", api_key="sk-bench", on_warning=lambda w: None, compactor=compact
    )
    agent = Agent(model, instructions="You read source files.")

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read one file."""
        return listing(path, chars)

    with rec:
        agent.run_sync(QUESTION, usage_limits=UsageLimits(request_limit=rounds + 5))
        return rec.session_id


def run_langchain(url: str, db: str, rounds: int, chars: int, compact: WireCompactor | None) -> str | None:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from ctxwright.integrations.langchain import CompactToolResults, recorded_chat_model

    @tool
    def read_file(path: str) -> str:
        """Read one file."""
        return listing(path, chars)

    model, rec = recorded_chat_model(
        db, model="bench", base_url=url, api_key="sk-bench", max_retries=0, on_warning=lambda w: None
    )
    middleware = [CompactToolResults(compactor=compact)] if compact is not None else []
    with rec:
        agent = create_agent(model, tools=[read_file], system_prompt="You read source files.", middleware=middleware)
        agent.invoke({"messages": [{"role": "user", "content": QUESTION}]}, {"recursion_limit": 2 * rounds + 10})
        return rec.session_id


FRAMEWORKS: dict[str, Callable[[str, str, int, int, WireCompactor | None], str | None]] = {
    "openai-agents": run_openai_agents,
    "pydantic-ai": run_pydantic_ai,
    "langchain": run_langchain,
}


def measure(db: str, sid: str) -> dict[str, Any]:
    """The session's calls as the live audit stored them."""
    store = Store(db)
    try:
        rows = ProxyLog(store).exchange_rows(sid)
    finally:
        store.close()
    audits = [r["audit"] for r in rows]
    prompt = [int(a.get("prompt_tokens") or 0) for a in audits]
    reusable = [int(a.get("reusable_prefix_tokens") or 0) for a in audits]
    causes = [str(a.get("cause")) for a in audits]
    return {
        "calls": len(rows),
        "prompt_tokens_per_call": prompt,
        "prompt_tokens_total": sum(prompt),
        "prompt_tokens_median": statistics.median(prompt) if prompt else 0,
        "prompt_tokens_last": prompt[-1] if prompt else 0,
        "reusable_total": sum(reusable),
        "reuse": round(sum(reusable) / sum(prompt), 3) if sum(prompt) else 0.0,
        "prefix_breaks": sum(1 for c in causes if c not in ("first", "append")),
        "causes": causes,
        "statuses": sorted({int(r["status"] or 0) for r in rows}),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=30, help="tool calls in the conversation (default 30)")
    p.add_argument("--result-chars", type=int, default=2000, help="characters of each tool result (default 2000)")
    p.add_argument("--trigger", type=int, default=6000, help="the compactor's trigger, in tokens (default 6000)")
    p.add_argument("--keep", type=int, default=2, help="tool results the compaction keeps whole (default 2)")
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated (default: all three)")
    p.add_argument("--quick", action="store_true", help="10 rounds")
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args()
    rounds = 10 if args.quick else args.rounds
    trigger = min(args.trigger, 2500) if args.quick else args.trigger
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ctxwright-bench-") as tmp:
        for name in [n.strip() for n in args.frameworks.split(",") if n.strip()]:
            for arm in ("plain", "compaction"):
                compact = WireCompactor(trigger_tokens=trigger, keep_results=args.keep) if arm == "compaction" else None
                db = str(Path(tmp) / f"{name}-{arm}.db")
                with F(fallback=responder(rounds)) as srv:
                    t0 = time.perf_counter()
                    sid = FRAMEWORKS[name](srv.url, db, rounds, args.result_chars, compact)
                    seconds = time.perf_counter() - t0
                    rejected = len(srv.rejected)
                assert sid is not None, f"{name}: no call was recorded"
                row = {"framework": name, "arm": arm, "seconds": round(seconds, 2), "rejected": rejected}
                row.update(measure(db, sid))
                if compact is not None:
                    row["compactions"] = compact.compactions
                    row["cleared"] = len(compact.ledger)
                    row["lost_items"] = sum(len(c.lost) for c in compact.ledger)
                results.append(row)
    _print(results, rounds, args.result_chars, trigger, args.keep)
    if args.json:
        out = {
            "benchmark": "integrations",
            "rounds": rounds,
            "result_chars": args.result_chars,
            "trigger_tokens": trigger,
            "keep_results": args.keep,
            "results": results,
        }
        args.json.write_text(json.dumps(out, indent=2) + "\n")


def _print(results: list[dict[str, Any]], rounds: int, chars: int, trigger: int, keep: int) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{rounds} tool rounds of {chars:,} characters; compaction: trigger {trigger:,} tokens, keep {keep}"
    )
    for col in ("framework", "arm", "calls", "prompt tok/call (median)", "last call", "total prompt tok",
                "reuse", "prefix breaks", "compactions", "rejected"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("framework", "arm") else "right")
    for r in results:
        t.add_row(
            r["framework"],
            r["arm"],
            str(r["calls"]),
            f"{r['prompt_tokens_median']:,.0f}",
            f"{r['prompt_tokens_last']:,}",
            f"{r['prompt_tokens_total']:,}",
            f"{r['reuse']:.3f}",
            str(r["prefix_breaks"]),
            str(r.get("compactions", "-")),
            str(r["rejected"]),
        )
    Console(width=170).print(t)


if __name__ == "__main__":
    main()
