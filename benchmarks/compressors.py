"""The lossless compressors of ``compaction/compress/``, measured one rule at a time.

Each case is a tool result of a kind agents see (a JSON listing, a build log, a test suite run
again, a standard-library source file) with facts planted in it (ids, ports, URLs, error
lines), plus the hostile inputs the rules must survive (JSON nested 200,000 deep, a
single-line result of 100 MB, a log whose every line holds a new id). Per case: the rule that
applied, the characters saved, the planted facts still in the text the model sees, the median
time of ``--runs`` runs and the peak of Python allocations (``tracemalloc``, one more run).

    python benchmarks/compressors.py [--quick] [--runs N] [--json PATH]

Targets: every planted fact shown; hostile inputs in bounded time and memory (the 100 MB
line in well under a second and a few MB, nothing parsed or copied whole).
"""

from __future__ import annotations

import argparse
import argparse as _argparse_module
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import console, machine, save, table
from ctxwright.compaction.compress import Compressed, Earlier, compress_result, outline


def _listing() -> tuple[str, list[str]]:
    items = [
        {"id": f"svc-{i:03d}", "status": "running", "port": 8000 + i, "image": f"registry.local/app:{i}.0"}
        for i in range(200)
    ]
    items[137]["status"] = "crashloop"
    items[61]["image"] = "registry.local/app@sha256:9f86d081884c7d65"
    return json.dumps({"kind": "List", "items": items}, indent=2), ['"crashloop"', "9f86d081884c7d65", "8199"]


def _log() -> tuple[str, list[str]]:
    lines = [
        f"2026-12-06T12:{i // 60 % 60:02d}:{i % 60:02d}Z [INFO] fetched layer {i} ({i * 7} kB)" for i in range(5000)
    ]
    lines[1200] = "2026-12-06T12:20:00Z [WARN] slow mirror https://mirror.example.net/v2/blobs"
    lines[3100] = "2026-12-06T12:51:40Z [ERROR] checksum mismatch in layer 3100"
    lines[4500] = "2026-12-06T13:15:00Z [INFO] fetched layer from 10.4.7.21:5000 commit 4be1a9e0c2"
    return "\n".join(lines), ["slow mirror https://mirror.example.net/v2/blobs", "checksum mismatch", "4be1a9e0c2"]


def _suite(failing: int) -> str:
    lines = [f"tests/test_mod{i:03d}.py::test_case PASSED [{i * 100 // 800:3d}%]" for i in range(800)]
    lines[failing] = lines[failing].replace("PASSED", "FAILED")
    return "\n".join([*lines, f"FAILED tests/test_mod{failing:03d}.py::test_case - assert 41 == 42"])


def _source() -> tuple[str, list[str]]:
    return Path(_argparse_module.__file__).read_text(), ["def parse_known_args(", "class ArgumentParser("]


def _case(name: str, text: str, facts: list[str], run: Callable[[], Compressed | None], runs: int) -> dict[str, Any]:
    times = []
    out: Compressed | None = None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = run()
        times.append((time.perf_counter() - t0) * 1000)
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    shown = out.text if out is not None else text
    return {
        "case": name,
        "chars": len(text),
        "rule": out.rule if out is not None else "none",
        "saved_pct": round(100 * (out.saved_chars if out else 0) / max(len(text), 1), 1),
        "facts": f"{sum(f in shown for f in facts)}/{len(facts)}",
        "median_ms": round(statistics.median(times), 2),
        "peak_mb": round(peak / 2**20, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer runs and a 20 MB line instead of 100 MB")
    p.add_argument("--runs", type=int, default=5, help="timed runs per case (default 5)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args()
    runs = 2 if args.quick else args.runs
    rows: list[dict[str, Any]] = []

    listing, lf = _listing()
    rows.append(_case("JSON listing, 200 objects", listing, lf, lambda: compress_result(listing, call_id="c1"), runs))
    log, gf = _log()
    rows.append(_case("build log, 5,000 lines", log, gf, lambda: compress_result(log, call_id="c2"), runs))
    earlier = Earlier()
    earlier.add("c3", _suite(7))
    again = _suite(512)
    suite_facts = ["test_mod512.py::test_case FAILED", "assert 41 == 42"]
    rows.append(
        _case(
            "test suite run again",
            again,
            suite_facts,
            lambda: compress_result(again, call_id="c4", earlier=earlier),
            runs,
        )
    )
    src, sf = _source()
    rows.append(_case("argparse.py, under the cap", src, sf, lambda: compress_result(src, call_id="c5"), runs))
    rows.append(_case("argparse.py, over the cap", src, sf, lambda: outline(src, ["parse_known_args"]), runs))

    deep = "[" * 200_000 + "]" * 200_000
    rows.append(_case("hostile: JSON 200,000 deep", deep, [], lambda: compress_result(deep, call_id="h1"), runs))
    size = (20 if args.quick else 100) * 2**20
    line = "2026-12-06 ERROR 0xdeadbeef " * (size // 28)
    rows.append(
        _case(
            f"hostile: one line of {size // 2**20} MB",
            line,
            [],
            lambda: compress_result(line, call_id="h2", earlier=Earlier()),
            runs,
        )
    )
    ids = "\n".join(f"worker {i % 8} batch {i} id {i * 2654435761 % 2**32:08x}" for i in range(60_000))
    rows.append(
        _case("hostile: a new id on each of 60,000 lines", ids, [], lambda: compress_result(ids, call_id="h3"), 1)
    )

    console.print(
        table(
            "compaction/compress: one rule at a time",
            ["case", "chars", "rule", "saved %", "facts shown", "median ms", "peak MB"],
            [
                [r["case"], f"{r['chars']:,}", r["rule"], r["saved_pct"], r["facts"], r["median_ms"], r["peak_mb"]]
                for r in rows
            ],
        )
    )
    save(args, {"machine": machine(), "runs": runs, "cases": rows})


if __name__ == "__main__":
    main()
