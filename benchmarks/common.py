"""Shared plumbing for the benchmarks: pick a backend, take medians, print and save.

Every benchmark runs offline on the embedded model by default and on any
OpenAI-compatible server with ``--base-url URL --model NAME``. Numbers are measured on
this run only; nothing from the seeds is printed as if measured.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

console = Console(highlight=False, width=160)


def add_backend_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-url", help="OpenAI-compatible endpoint; default: the embedded model")
    p.add_argument("--model", help="model name on the endpoint")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")


def make_backend(args: argparse.Namespace, n_ctx: int = 8192):
    if args.base_url:
        from ctxwright.backends.openai_compat import OpenAIBackend

        if not args.model:
            sys.exit("--base-url needs --model NAME")
        return OpenAIBackend(model=args.model, base_url=args.base_url, api_key_env=args.api_key_env)
    from ctxwright.backends.embedded import EmbeddedBackend

    return EmbeddedBackend(n_ctx=n_ctx)


def median(xs: Iterable[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return round(statistics.median(vals), 3) if vals else None


def machine() -> dict[str, Any]:
    import os

    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def save(args: argparse.Namespace, data: dict[str, Any]) -> None:
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        console.print(f"[dim]wrote {args.json}[/]")


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*["?" if v is None else (f"{v:,.2f}" if isinstance(v, float) else str(v)) for v in r])
    return t


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server started next binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    """Wait until ``proc`` listens on ``port``; stop the benchmark if it exits or never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{what} did not start")


async def serve_lifespan(receive: Any, send: Any) -> None:
    """Answer an ASGI ``lifespan`` scope (startup, then shutdown): the benchmarks' minimal
    upstreams run under uvicorn, which sends one before any request."""
    while True:
        msg = await receive()
        if msg["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif msg["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
