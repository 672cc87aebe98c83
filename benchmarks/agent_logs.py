"""``ctxwright audit`` of Claude Code's own logs beside ccusage on the same files: wall time,
CPU time and peak RSS of each, and whether their token totals agree.

Generates, in a temporary folder and from a fixed seed, ``--mb`` megabytes (default 50) of
Claude Code session logs in its public format (``ctxwright.agent_logs.synth``: sessions with
compactions, a sub-agent, idle gaps past the 5-minute and 1-hour TTLs, a model switch; each
turn's tool result padded to ``--pad`` bytes, like a file read), then runs, each in a child
process whose CPU and peak RSS are read with ``os.wait4``:

* ``ctxwright audit DIR`` (the table) and ``ctxwright audit DIR --json``, output to /dev/null;
* ``ccusage session --json --offline`` (ccusage 18, ``make ccusage``) with ``CLAUDE_CONFIG_DIR``
  pointed at the same files, skipped when node or ccusage is absent.

    python benchmarks/agent_logs.py [--mb 50] [--pad 8000] [--json PATH]
    python benchmarks/agent_logs.py --mb 1024 --json benchmarks/results/agent_logs_1gb.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, console, machine, save, table
from ctxwright.agent_logs import synth

CCUSAGE = Path(os.environ.get("CTXWRIGHT_NPM_DIR", Path.home() / ".cache/ctxwright/npm")) / "node_modules/.bin/ccusage"


def generate(projects: Path, mb: float, pad: int) -> tuple[int, int, int]:
    """Sessions written until the logs hold ``mb`` megabytes: (sessions, files' bytes, planted calls)."""
    target = int(mb * 1024 * 1024)
    probe = projects.parent / "probe"
    synth.claude_code_logs(probe, sessions=1, pad=pad)
    per = sum(f.stat().st_size for f in probe.rglob("*.jsonl"))
    shutil.rmtree(probe)
    sessions = max(1, -(-target // per))
    per_project = 25
    planted = 0
    for p in range(-(-sessions // per_project)):
        n = min(per_project, sessions - p * per_project)
        planted += len(synth.claude_code_logs(projects / f"batch-{p:04d}", sessions=n, seed=p, pad=pad))
    size = sum(f.stat().st_size for f in projects.rglob("*.jsonl"))
    return sessions, size, planted


def measure(cmd: list[str], env: dict[str, str], out: Path | None = None) -> dict[str, Any]:
    """Run ``cmd`` as a child; its wall time, CPU time (user + system) and peak RSS."""
    sink = out.open("wb") if out is not None else open(os.devnull, "wb")  # noqa: SIM115
    try:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, env={**os.environ, **env})
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err = child.stderr.read().decode("utf-8", "replace") if child.stderr else ""
    finally:
        sink.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{cmd[0]} exited {code}: {err[-500:]}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=float, default=50, help="megabytes of logs to generate (default 50)")
    p.add_argument("--pad", type=int, default=8000, help="bytes of tool output per turn (default 8000)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctxwright-agent-logs-") as tmp:
        config = Path(tmp) / "claude"
        projects = config / "projects"
        t0 = time.perf_counter()
        sessions, size, calls = generate(projects, args.mb, args.pad)
        console.print(
            f"generated {size / 1e6:,.0f} MB: {sessions:,} sessions, {calls:,} calls in "
            f"{time.perf_counter() - t0:.0f} s"
        )
        env = {"PYTHONPATH": str(ROOT / "src")}
        ours = [sys.executable, "-m", "ctxwright", "audit", str(projects)]
        rows: list[dict[str, Any]] = []
        rows.append({"tool": "ctxwright audit (table)", **measure(ours, env)})
        our_json = Path(tmp) / "ours.json"
        rows.append({"tool": "ctxwright audit --json", **measure([*ours, "--json"], env, our_json)})
        doc = json.loads(our_json.read_text())
        agree: bool | None = None
        if shutil.which("node") and CCUSAGE.exists():
            theirs_json = Path(tmp) / "theirs.json"
            cc = [str(CCUSAGE), "session", "--json", "--offline"]
            rows.append(
                {
                    "tool": "ccusage session --json --offline",
                    **measure(cc, {"CLAUDE_CONFIG_DIR": str(config)}, theirs_json),
                }
            )
            theirs = json.loads(theirs_json.read_text())
            fields = {
                "inputTokens": "input_tokens",
                "cacheCreationTokens": "cache_creation_input_tokens",
                "cacheReadTokens": "cache_read_input_tokens",
                "outputTokens": "output_tokens",
            }
            agree = all(sum(s[k] for s in theirs["sessions"]) == doc["total"]["logged"][v] for k, v in fields.items())
        else:
            console.print("[yellow]ccusage not found (make ccusage): ours alone[/]")
    mb = size / 1e6
    for r in rows:
        r["mb_per_s"] = round(mb / r["wall_s"], 1) if r["wall_s"] else None
    console.print(
        table(
            f"Claude Code logs: {mb:,.0f} MB, {sessions:,} sessions, {doc['total']['calls']:,} calls",
            ["tool", "wall s", "CPU s", "peak RSS MB", "MB/s"],
            [[r["tool"], r["wall_s"], r["cpu_s"], r["peak_rss_mb"], r["mb_per_s"]] for r in rows],
        )
    )
    console.print(
        f"token totals equal to ccusage's: {'yes' if agree else 'NO' if agree is False else 'not compared'} · "
        f"lost ${doc['total']['lost_usd']:,.2f} of ${doc['total']['spent_usd']:,.2f} spent"
    )
    save(
        args,
        {
            "machine": machine(),
            "log_bytes": size,
            "sessions": sessions,
            "calls": doc["total"]["calls"],
            "pad": args.pad,
            "runs": rows,
            "totals_equal_ccusage": agree,
            "causes": doc["causes"],
        },
    )


if __name__ == "__main__":
    main()
