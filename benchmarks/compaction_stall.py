"""How long the loop stands still per compaction: summaries written in the call that needs them
(synchronous) against summaries written ahead in the background (``compaction/background.py``).

Both runs, one after the other in this process, drive the same agent: a scripted main model
that reads one page per call (a real sleep of ``--call-s`` per call, as a served model's
latency) and a summarizer that takes ``--summary-s`` seconds (a scripted backend with a real
sleep, deterministic: its summary is a digest of the text it was given). Full compaction,
policy eager. The synchronous run compacts at ``soft_ratio`` (its trigger); the background run
starts its summary there and goes on, applying it at the first boundary after it is ready
(its own trigger, at ``--trigger``, is the bound). Measured: each compaction's ``stall_ms`` as
recorded on its event (p50/p95), and whether the request sent at the boundary that applied a
background summary is byte for byte the one the synchronous run sent at that call.

    python benchmarks/compaction_stall.py [--summary-s 2.0] [--call-s 0.1] [--calls 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, console, machine, save, table
from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.compaction import CompactionConfig
from ctxwright.compaction.background import stall_summary
from ctxwright.core.events import CompactionEvent, SummaryFailedEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ChatRequest
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.tools.registry import ToolRegistry, tool

COUNT = TokenCounter(estimate_tokens, "estimate")
PAGE = "The ingest job for shard {n} finished; 4,096 rows checked, 3 warnings about late events. " * 12


@tool
def fetch(page: int) -> str:
    """Fetch one page of the job log."""
    return f"page {page}: " + PAGE.format(n=page)


def body(req: ChatRequest) -> str:
    return json.dumps(req.openai_body("model"), sort_keys=True)


def run(args: argparse.Namespace, background: bool, tmp: Path) -> dict[str, Any]:
    k = [0]

    def reply(req: ChatRequest) -> Message:
        time.sleep(args.call_s)
        k[0] += 1
        call = ToolCall(f"c{k[0]}", "fetch", json.dumps({"page": k[0]}))
        return Message(role="assistant", content=f"reading page {k[0]}", tool_calls=(call,))

    def summarize(req: ChatRequest) -> str:
        time.sleep(args.summary_s)
        text = req.messages[1].content or ""
        return "notes: pages read, no errors; digest " + hashlib.sha256(text.encode()).hexdigest()[:16]

    main, summarizer = ScriptedBackend([reply]), ScriptedBackend([summarize])
    reg = ToolRegistry([fetch])
    s = Session.start(Prefix.build("You read job logs and report.", tools=reg.specs()))
    cfg = CompactionConfig(
        results_dir=tmp / ("background" if background else "sync"),
        window_tokens=args.window,
        full_compaction=True,
        drop_unused=False,
        min_clear_tokens=10**9,
        policy="eager",
        background=background,
        soft_ratio=args.soft,
        trigger_ratio=args.trigger if background else args.soft,
        summary_timeout_s=max(30.0, 4 * args.summary_s),
    )
    agent_cfg = AgentConfig(compaction=cfg, max_iterations=args.calls)
    agent_cfg.max_repeats = None
    agent = Agent(s, main, reg, agent_cfg, counter=COUNT, summary_backend=summarizer)
    t0 = time.monotonic()
    result = agent.run("Read the job log page by page.")
    wall = time.monotonic() - t0
    events = [e for e in s.events if isinstance(e, CompactionEvent)]
    stalls = [e.stall_ms for e in events if e.stall_ms is not None]
    return {
        "mode": "background" if background else "synchronous",
        "stop_reason": result.stop_reason,
        "calls": len(main.requests),
        "wall_s": round(wall, 2),
        "summaries": len(summarizer.requests),
        "compactions": [
            {
                "call_index": e.call_index,
                "layer": e.layer,
                "stall_ms": e.stall_ms,
                "prepared_at_call": e.extra.get("prepared_at_call"),
            }
            for e in events
        ],
        "stall": stall_summary(stalls),
        "stale_discarded": sum(1 for e in s.events if isinstance(e, SummaryFailedEvent) and e.reason == "stale"),
        "summary_failures": sum(1 for e in s.events if isinstance(e, SummaryFailedEvent) and e.reason != "stale"),
        "_requests": [body(r) for r in main.requests],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--summary-s", type=float, default=2.0, help="seconds each summary takes")
    p.add_argument("--call-s", type=float, default=0.1, help="seconds each main model call takes")
    p.add_argument("--calls", type=int, default=300, help="model calls per run")
    p.add_argument("--window", type=int, default=60_000, help="context window, tokens")
    p.add_argument("--soft", type=float, default=0.45, help="soft_ratio (the synchronous run's trigger)")
    p.add_argument("--trigger", type=float, default=0.9, help="the background run's trigger_ratio")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "compaction_stall.json"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sync = run(args, False, Path(tmp))
        bg = run(args, True, Path(tmp))
    same = []
    for c in bg["compactions"]:
        i = c["call_index"]
        ok = i is not None and i < len(sync["_requests"]) and sync["_requests"][i] == bg["_requests"][i]
        c["same_bytes_as_synchronous"] = ok
        same.append(ok)
    for r in (sync, bg):
        del r["_requests"]
    s_st, b_st = sync["stall"] or {}, bg["stall"] or {}
    passed = (
        bool(same)
        and all(same)
        and b_st.get("p95_ms", 1e9) <= 100
        and s_st.get("p50_ms", 0) >= 2000
        and len(bg["compactions"]) >= 3
    )
    data = {
        "machine": machine(),
        "summarizer": f"ScriptedBackend with a real sleep of {args.summary_s:g} s per summary (in process)",
        "main_model": f"ScriptedBackend with a real sleep of {args.call_s:g} s per call",
        "settings": {
            "window_tokens": args.window,
            "soft_ratio": args.soft,
            "background_trigger_ratio": args.trigger,
            "calls": args.calls,
        },
        "runs": [sync, bg],
        "same_bytes_after_each_background_compaction": all(same) if same else None,
        "target": "background p95 stall <= 100 ms, synchronous >= 2,000 ms, same bytes after each compaction",
        "passed": passed,
    }
    rows = []
    for r in (sync, bg):
        st = r["stall"] or {}
        rows.append(
            [
                r["mode"],
                len(r["compactions"]),
                st.get("p50_ms"),
                st.get("p95_ms"),
                st.get("max_ms"),
                r["summaries"],
                r["stale_discarded"],
                r["wall_s"],
            ]
        )
    console.print(
        table(
            f"Stall per compaction (summaries {args.summary_s:g} s, calls {args.call_s:g} s)",
            ["mode", "compactions", "p50 ms", "p95 ms", "max ms", "summaries", "stale", "wall s"],
            rows,
        )
    )
    console.print(
        f"same request bytes at each background compaction's boundary: {sum(same)}/{len(same)}; "
        f"target met: {'yes' if passed else 'NO'}"
    )
    save(args, data)


if __name__ == "__main__":
    main()
