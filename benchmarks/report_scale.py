"""How ``ctxwright report`` scales with the number of calls: time to read and audit a log,
time to draw the page, and the size of the file, for one conversation of N requests.

    python benchmarks/report_scale.py [--quick] [--runs R] [--json PATH]

The log is synthetic and offline (no model): one conversation whose history grows by two
messages a call and is compacted every 50 calls (the task and a summary stay), with usage
reporting cached tokens. The page aggregates past 400 calls (``report/html.py``), so its size
should stay flat while the reading time grows with the log.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import console, machine, median, save, table


def write_log(path: Path, n: int) -> None:
    system = {"role": "system", "content": "You are a careful agent. " * 40}
    with path.open("w") as f:
        history: list[dict[str, str]] = []
        for i in range(n):
            if i % 50 == 0:
                history = [{"role": "user", "content": "the task"}, {"role": "user", "content": f"summary {i}"}]
            history.append({"role": "user", "content": f"step {i}: " + "observation " * 20})
            prompt = 300 + 30 * len(history)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": 8,
                "prompt_tokens_details": {"cached_tokens": prompt - 40},
            }
            f.write(
                json.dumps({"request": {"model": "m", "messages": [system, *history]}, "response": {"usage": usage}})
                + "\n"
            )
            history.append({"role": "assistant", "content": f"done {i}"})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="100 and 1,000 calls, one run each")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", default="100,1000,10000")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    from plotly.offline import get_plotlyjs

    from ctxwright.audit.compare import Prices
    from ctxwright.report import from_log, render_html

    sizes = [100, 1000] if args.quick else [int(x) for x in args.sizes.split(",")]
    runs = 1 if args.quick else args.runs
    plotly_bytes = len(get_plotlyjs().encode())
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            log = Path(tmp) / f"log{n}.jsonl"
            write_log(log, n)
            read_s, draw_s, size = [], [], 0
            for _ in range(runs):
                t0 = time.perf_counter()
                data = from_log(log)
                t1 = time.perf_counter()
                html = render_html(data, Prices(input=2.5, cached=0.25, output=10.0))
                t2 = time.perf_counter()
                read_s.append(t1 - t0)
                draw_s.append(t2 - t1)
                size = len(html.encode())
            results.append(
                {
                    "calls": n,
                    "log_mb": round(log.stat().st_size / 1e6, 2),
                    "read_audit_s": median(read_s),
                    "draw_s": median(draw_s),
                    "total_s": median([a + b for a, b in zip(read_s, draw_s, strict=True)]),
                    "file_mb": round(size / 1e6, 3),
                    "report_without_plotlyjs_kb": round((size - plotly_bytes) / 1e3, 1),
                }
            )
    base = results[0]
    rows = [
        [
            r["calls"],
            r["log_mb"],
            r["read_audit_s"],
            r["draw_s"],
            r["total_s"],
            r["file_mb"],
            r["report_without_plotlyjs_kb"],
            round(r["total_s"] / base["total_s"], 1) if base["total_s"] else None,
        ]
        for r in results
    ]
    console.print(
        table(
            f"report scale (median of {runs} run(s); plotly.js embedded: {plotly_bytes / 1e6:.2f} MB)",
            [
                "calls",
                "log MB",
                "read+audit s",
                "draw s",
                "total s",
                "file MB",
                "page w/o plotly.js KB",
                f"time ÷ {base['calls']} calls",
            ],
            rows,
        )
    )
    save(
        args,
        {
            "benchmark": "report_scale",
            "machine": machine(),
            "runs": runs,
            "plotlyjs_bytes": plotly_bytes,
            "results": results,
        },
    )


if __name__ == "__main__":
    main()
