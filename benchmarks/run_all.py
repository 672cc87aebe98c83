"""Run every benchmark one after another (never two at once: on 2 cores, concurrent llama.cpp
processes slow each other down unevenly) and write their JSON to benchmarks/results/.

    python benchmarks/run_all.py [--quick] [--base-url URL --model NAME]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small versions (a few minutes in all)")
    p.add_argument("--base-url")
    p.add_argument("--model")
    args = p.parse_args()
    served = ["--base-url", args.base_url, "--model", args.model or ""] if args.base_url else []
    out = HERE / "results"
    runs = [
        ["prefill_reuse.py", "--runs", "3" if args.quick else "7"],
        ["kv_cache_patterns.py", "--runs", "1" if args.quick else "5"],
        ["call_limit.py", "--runs", "5" if args.quick else "20"],
        ["context_distillation.py", *(["--quick"] if args.quick else [])],
        ["audit_speed.py", *(["--requests", "200", "--memory-sizes", "10000,20000"] if args.quick else [])],
        ["startup.py", *(["--runs", "5", "--requests", "200"] if args.quick else [])],  # CPU and RSS of a start
        ["long_session.py"],
        ["compaction_stall.py", *(["--calls", "240"] if args.quick else [])],  # 2 s summaries, two runs
        ["per_turn.py"],
        ["compression.py", *(["--quick"] if args.quick else [])],
        ["compression_facts.py", *(["--quick"] if args.quick else [])],  # loopback model; peers if installed
        ["compressors.py", *(["--quick"] if args.quick else [])],
        ["terminal.py"],
        ["tool_search.py", "--part", "search", *(["--quick"] if args.quick else [])],
        ["tool_search.py", "--part", "session"],
        ["tool_search.py", "--part", "e2e", *(["--quick"] if args.quick else [])],
        ["tool_catalogs.py", *(["--quick"] if args.quick else [])],
        ["proxy_overhead.py", *(["--quick"] if args.quick else [])],
        ["wrap_latency.py", *(["--quick"] if args.quick else [])],  # ctxwright wrap per call; no model
        ["hostile.py", *(["--quick"] if args.quick else [])],
        ["skills.py", *(["--quick"] if args.quick else [])],
        ["injection.py", *(["--quick"] if args.quick else [])],
        ["provider_cache.py", *(["--quick"] if args.quick else [])],
        ["gate_overhead.py", *(["--quick"] if args.quick else [])],
        ["gate_catches.py"],  # known cache bugs planted in the example agent, gated
        ["store.py", *(["--quick"] if args.quick else [])],  # SQLite and PostgreSQL, 1-16 writers; no model
        ["integrations.py", *(["--quick"] if args.quick else [])],  # three frameworks, scripted; no model
        ["agent_logs.py", *(["--mb", "20"] if args.quick else [])],  # Claude Code logs beside ccusage; no model
        ["statusline.py", *(["--quick"] if args.quick else [])],  # a process per Claude Code message; no model
        ["ablation.py", *(["--quick"] if args.quick else [])],
    ]
    # offline: no backend arguments (tool_search's e2e part is the one that runs a model)
    no_model = {
        "audit_speed.py",
        "startup.py",  # child processes of the CLI, no model
        "long_session.py",
        "compaction_stall.py",  # scripted backends with real sleeps, no model
        "per_turn.py",
        "compression_facts.py",  # a scripted loopback model, no model
        "compressors.py",  # the compressors on generated tool results, no model
        "terminal.py",
        "tool_search.py",
        "tool_catalogs.py",  # rankers on public tool sets, no model
        "proxy_overhead.py",
        "wrap_latency.py",  # an openai SDK agent against a loopback upstream, no model
        "hostile.py",
        "provider_cache.py",  # the loopback provider simulators, no model
        "gate_overhead.py",  # the replay of a recording, no model
        "gate_catches.py",  # the golden is recorded from a scripted server (or --base-url), no model
        "store.py",  # appends into SQLite and PostgreSQL, no model
        "integrations.py",  # the frameworks against a scripted server, no model
        "agent_logs.py",  # generated Claude Code logs, ctxwright audit and ccusage, no model
        "statusline.py",  # generated Claude Code transcripts, no model
    }
    failed = []
    for script, *extra in runs:
        part = extra[1] if extra[:1] == ["--part"] and extra[1] != "search" else None  # one JSON per part
        name = script.removesuffix(".py") + (f"_{part}" if part else "") + ("_quick" if args.quick else "")
        cmd = [sys.executable, str(HERE / script), *extra, "--json", str(out / f"{name}.json")]
        if script not in no_model or part == "e2e":
            cmd += served
        print("$", " ".join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            failed.append(script)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
