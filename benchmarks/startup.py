"""What a `ctxwright` command costs before it does anything: CPU and peak memory of
`--version`, `--help` and `audit --help`, and of `ctxwright audit` on the audit benchmark's log
(1,000 requests of ~50K tokens, `benchmarks/audit_speed.py`), beside `python -c pass` (the
interpreter's own start, the floor) in the same run.

Each command runs in a child process; its CPU (user + system) and peak RSS come from the
kernel (GNU `/usr/bin/time`), not from a wall clock, so a busy machine adds little. The
commands are interleaved round by round and the medians reported.

    python benchmarks/startup.py [--runs 15] [--requests 1000] [--tokens 50000] [--json PATH]

Targets: `--version` and `--help` <= 0.15 s of CPU; `audit` of the log <= 1.5 s and <= 70 MiB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, console, machine, save, table

#: the commands measured, by label: the interpreter's floor, then ctxwright's print-only commands
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "ctxwright --version": [sys.executable, "-m", "ctxwright", "--version"],
    "ctxwright --help": [sys.executable, "-m", "ctxwright", "--help"],
    "ctxwright audit --help": [sys.executable, "-m", "ctxwright", "audit", "--help"],
}
#: CPU seconds ``--version`` and ``--help`` may take (``audit --help`` is measured, with no target)
START_TARGET_S = 0.15
TARGETED = ("ctxwright --version", "ctxwright --help")
AUDIT_TARGET_S = 1.5
AUDIT_TARGET_MIB = 70.0


#: the source tree the commands import (``--src``: another checkout's, for a before/after)
SRC = [ROOT / "src"]


def child(cmd: list[str]) -> tuple[float, float]:
    """``(CPU seconds, peak RSS in MiB)`` of one run of ``cmd`` with its output discarded.

    Measured by ``/usr/bin/time`` (GNU time: a small C program that forks and execs the
    command): the rusage of a child forked by this Python process would count the parent's
    pages it held before its exec as the child's peak RSS."""
    env = {**os.environ, "PYTHONPATH": str(SRC[0])}
    with tempfile.NamedTemporaryFile("r", suffix=".time") as out, open(os.devnull, "wb") as null:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", out.name, *cmd], stdout=null, stderr=subprocess.PIPE, env=env
        )
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace")
            raise SystemExit(f"{' '.join(cmd[1:])} exited {proc.returncode}: {err.strip()[-500:]}")
        user, system, max_kib = out.read().split()[-3:]
    return float(user) + float(system), int(max_kib) / 1024


def rounds(commands: dict[str, list[str]], runs: int) -> dict[str, dict[str, Any]]:
    """Each command once per round, ``runs`` rounds; the medians and the spread of each."""
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    rss: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(runs):
        for label, cmd in commands.items():
            c, m = child(cmd)
            cpu[label].append(c)
            rss[label].append(m)
    return {
        label: {
            "runs": runs,
            "cpu_s": round(statistics.median(cpu[label]), 3),
            "cpu_s_min": round(min(cpu[label]), 3),
            "cpu_s_max": round(max(cpu[label]), 3),
            "peak_rss_mib": round(statistics.median(rss[label]), 1),
        }
        for label in commands
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=15, help="interleaved rounds of the start-up commands")
    p.add_argument("--audit-runs", type=int, default=3, help="rounds of the audit (each with the floor)")
    p.add_argument("--requests", type=int, default=1000, help="requests in the audited log")
    p.add_argument("--tokens", type=int, default=50_000, help="median estimated tokens per request")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--src", metavar="DIR", help="the src/ folder to measure (default: this checkout's)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.src:
        SRC[0] = Path(args.src).resolve()

    start = rounds(COMMANDS, args.runs)
    floor = start["python -c pass"]["cpu_s"]
    rows = [
        [
            label,
            f"{r['cpu_s']:.3f}",
            f"{r['cpu_s'] - floor:+.3f}" if label != "python -c pass" else "",
            f"{r['cpu_s_min']:.3f}-{r['cpu_s_max']:.3f}",
            f"{r['peak_rss_mib']:.1f}",
            ("yes" if r["cpu_s"] <= START_TARGET_S else "NO") if label in TARGETED else "",
        ]
        for label, r in start.items()
    ]
    console.print(
        table(
            f"start-up: CPU and peak RSS of a child process, median of {args.runs} interleaved rounds",
            ["command", "CPU s", "over the floor", "min-max", "peak RSS MiB", f"<= {START_TARGET_S} s"],
            rows,
        )
    )

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from audit_speed import Generator

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "requests.jsonl"
        t = time.perf_counter()
        Generator(args.requests, args.tokens, args.seed).write(log)
        size = log.stat().st_size
        console.print(
            f"[dim]generated {args.requests:,} requests ({size / 1e6:,.0f} MB) in {time.perf_counter() - t:.0f} s[/]"
        )
        audit = rounds(
            {
                "python -c pass": COMMANDS["python -c pass"],
                "ctxwright audit LOG": [*COMMANDS["ctxwright --version"][:3], "audit", str(log)],
            },
            args.audit_runs,
        )
    a = audit["ctxwright audit LOG"]
    console.print(
        table(
            f"ctxwright audit of {args.requests:,} requests (~{args.tokens:,} tokens each, {size / 1e6:,.0f} MB), "
            f"median of {args.audit_runs}",
            ["command", "CPU s", "peak RSS MiB", f"<= {AUDIT_TARGET_S} s", f"<= {AUDIT_TARGET_MIB:g} MiB"],
            [
                [
                    "python -c pass",
                    f"{audit['python -c pass']['cpu_s']:.3f}",
                    f"{audit['python -c pass']['peak_rss_mib']:.1f}",
                    "",
                    "",
                ],
                [
                    "ctxwright audit LOG",
                    f"{a['cpu_s']:.3f}",
                    f"{a['peak_rss_mib']:.1f}",
                    "yes" if a["cpu_s"] <= AUDIT_TARGET_S else "NO",
                    "yes" if a["peak_rss_mib"] <= AUDIT_TARGET_MIB else "NO",
                ],
            ],
        )
    )
    save(
        args,
        {
            "benchmark": "startup",
            "machine": machine(),
            "src": str(SRC[0]),
            "targets": {
                "start_cpu_s": START_TARGET_S,
                "audit_cpu_s": AUDIT_TARGET_S,
                "audit_peak_rss_mib": AUDIT_TARGET_MIB,
            },
            "start": start,
            "audit": {"requests": args.requests, "tokens": args.tokens, "log_mb": round(size / 1e6, 1), **audit},
            "met": {
                **{label: start[label]["cpu_s"] <= START_TARGET_S for label in TARGETED},
                "ctxwright audit LOG cpu": a["cpu_s"] <= AUDIT_TARGET_S,
                "ctxwright audit LOG rss": a["peak_rss_mib"] <= AUDIT_TARGET_MIB,
            },
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
