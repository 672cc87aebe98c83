"""Issue 11's terminal and memory targets, offline (the scripted backend, no model):

* the echo of a 30 MB answer by ``ctxwright run`` (it took six minutes before the echo
  cap) and ``ctxwright show`` printing all of it, in seconds;
* the peak memory (tracemalloc) of a run whose tool returns 50 MB of ``bytes``, text or
  binary, with compaction (offloaded) and without (cut to a head and a tail); the target
  is at most twice the output, the output itself included.

    python benchmarks/terminal.py [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import tempfile
import time
import tracemalloc
from contextlib import redirect_stdout
from pathlib import Path

from rich.console import Console

from common import console, machine, save, table
from ctxwright import CompactionConfig, Harness, ScriptedBackend, tool
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main as cli
from ctxwright.cli.progress import RunPrinter
from ctxwright.core.messages import Message

MB = 1024 * 1024


def echo(tmp: Path, size: int) -> dict:
    """Seconds to run and echo a ``size``-byte answer, and to ``show`` it whole."""
    answer = "START " + "lorem ipsum [dolor] sit amet\n" * (size // 29) + " THE END"
    out = io.StringIO()
    printer = RunPrinter(Console(file=out, width=80), Console(file=io.StringIO(), width=80), live=False)
    db = tmp / "echo.db"
    with Harness("sys", [], backend=ScriptedBackend([answer]), db=db, on_event=printer, status=False) as h:
        printer.session_id = h.session_id
        t0 = time.perf_counter()
        h.run("write a lot")
        run_s = time.perf_counter() - t0
        sid = h.session_id
    shown = io.StringIO()
    t0 = time.perf_counter()
    with redirect_stdout(shown):
        cli(["--db", str(db), "show", sid])
    show_s = time.perf_counter() - t0
    assert answer in shown.getvalue()
    return {
        "answer_mb": round(len(answer) / MB, 1),
        "run_echo_s": round(run_s, 3),
        "echoed_chars": len(out.getvalue()),
        "show_s": round(show_s, 3),
        "shown_chars": len(shown.getvalue()),
    }


def memory(tmp: Path, kind: str, compaction: bool, size: int) -> dict:
    """Peak traced memory of one run whose only tool returns ``size`` bytes."""

    @tool
    def dump() -> bytes:
        """Return the output."""
        if kind == "text":
            return b"0123456789abcde\n" * (size // 16)
        return hashlib.shake_128(b"50 MB").digest(size)

    backend = ScriptedBackend([Message(role="assistant", tool_calls=(call("dump", {}, "d1"),)), "done"])
    cfg = CompactionConfig(results_dir=tmp / f"{kind}-{compaction}") if compaction else False
    with Harness("sys", [dump], backend=backend, db=None, compaction=cfg, tool_timeout=600) as h:
        tracemalloc.start()
        t0 = time.perf_counter()
        try:
            h.run("go")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        seconds = time.perf_counter() - t0
    return {
        "output": kind,
        "compaction": compaction,
        "output_mb": round(size / MB, 1),
        "peak_mb": round(peak / MB, 1),
        "peak_x_output": round(peak / size, 2),
        "seconds": round(seconds, 2),
    }


def run() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        e = echo(tmp, 30 * MB)
        mem = [memory(tmp, kind, comp, 50 * MB) for kind in ("text", "binary") for comp in (True, False)]
    console.print(
        table(
            "echo of a 30 MB answer",
            ["answer MB", "run: echo s", "chars echoed", "show: all of it, s", "chars shown"],
            [[e["answer_mb"], e["run_echo_s"], e["echoed_chars"], e["show_s"], e["shown_chars"]]],
        )
    )
    console.print(
        table(
            "peak memory of a run whose tool returns 50 MB of bytes (target: at most 2x the output)",
            ["output", "compaction", "output MB", "peak MB", "peak / output", "s"],
            [
                [
                    m["output"],
                    "on" if m["compaction"] else "off",
                    m["output_mb"],
                    m["peak_mb"],
                    m["peak_x_output"],
                    m["seconds"],
                ]
                for m in mem
            ],
        )
    )
    save(args, {"machine": machine(), "echo": e, "memory": mem})


if __name__ == "__main__":
    run()
