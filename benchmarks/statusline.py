"""What `ctxwright statusline` costs each time Claude Code runs it (after every message).

Each case runs the installed command as Claude Code does -- a new process, its JSON object on
stdin -- ``--runs`` times and reports the wall time (median, slowest) and the peak RSS of the
child. The transcripts are generated in Claude Code's format (``agent_logs/synth.py``), from a
short session to one padded with tool output to ``--mb`` megabytes; two cases take no
transcript: a shell prompt with no stdin (the store's latest proxied session, here none) and a
stdin that is not JSON.

    python benchmarks/statusline.py [--quick] [--json PATH]

Target: under 0.3 s median for a session of a few MB (Claude Code runs it at most every 300 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, machine, save, table
from ctxwright.agent_logs.synth import claude_code_logs

CTXWRIGHT = str(Path(sys.executable).with_name("ctxwright"))


def _once(stdin: bytes | None, env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [CTXWRIGHT, "statusline"],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        env=env,
        timeout=120,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"statusline failed: {done.returncode} {done.stderr[-500:]!r}")
    return wall, done.stdout.decode().strip()


def transcript(folder: Path, pad: int) -> Path:
    claude_code_logs(folder, sessions=1, pad=pad)
    return next(folder.rglob("*.jsonl"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=15, help="runs per case (default 15)")
    p.add_argument("--mb", type=float, default=20.0, help="size of the largest transcript (default 20 MB)")
    p.add_argument("--quick", action="store_true", help="5 runs, a 5 MB transcript at most")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    runs, mb = (5, min(args.mb, 5.0)) if args.quick else (args.runs, args.mb)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "CTXWRIGHT_DB": str(root / "none.db"), "CTXWRIGHT_WRAP_LOG": ""}
        small = transcript(root / "small", 0)
        # synth's pad is bytes of tool output per turn; about 20 turns a session
        big = transcript(root / "big", int(mb * 1024 * 1024 / 20))
        cases: list[tuple[str, bytes | None, Path | None]] = [
            ("Claude Code, short session", None, small),
            (f"Claude Code, {big.stat().st_size / 1e6:.0f} MB transcript", None, big),
            ("shell prompt, no stdin, no store", None, None),
            ("stdin not JSON", b"{garbage", None),
        ]
        for name, raw, path in cases:
            stdin = raw
            if path is not None:
                stdin = json.dumps(
                    {"transcript_path": str(path), "context_window": {"context_window_size": 200_000}}
                ).encode()
            before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            walls, line = [], ""
            for _ in range(runs):
                wall, line = _once(stdin, env)
                walls.append(wall)
            peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            results.append(
                {
                    "case": name,
                    "bytes": path.stat().st_size if path is not None else None,
                    "runs": runs,
                    "median_s": round(statistics.median(walls), 4),
                    "max_s": round(max(walls), 4),
                    "peak_rss_mb": round(max(peak, before) / 1024, 1),
                    "line": line,
                }
            )
    console.print(
        table(
            "ctxwright statusline, a new process per run (as Claude Code runs it)",
            ["case", "median s", "slowest s", "peak RSS MB", "line"],
            [[r["case"], r["median_s"], r["max_s"], r["peak_rss_mb"], r["line"]] for r in results],
        )
    )
    save(args, {"machine": machine(), "root": str(ROOT), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
