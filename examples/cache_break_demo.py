"""What ctxwright is for, on the embedded model: one short task, run twice through the proxy.

An ordinary ``openai`` SDK program -- the kind of agent people already run -- talks to
llama-cpp-python's own OpenAI-compatible server (``python -m llama_cpp.server``) on the bundled
SmolLM2-135M model, through ``ctxwright proxy``. It runs the same three-turn task twice: once
with the current time written into its system prompt (a common habit, and a cache break on
every call), once without. The proxy needs no session header: it places each call by the
messages it repeats, so each run is one session, and its audit names the break and its byte.

Two costs are measured on this run, not assumed:

* **prefill time**: the time to the first streamed token of each call, through the proxy.
  llama.cpp keeps the previous prompt's KV cache and re-uses its longest common prefix, so a
  call whose first bytes changed prefills the whole prompt again;
* **$**: the server reports no cached tokens, so each call is priced *as if* a hosted model with
  automatic prompt caching (``--price-as``, default gpt-4.1 at its list price in the built-in
  table) read from its cache exactly the prefix the audit found reusable. Say so when quoting it.

Run it with ``make demo`` (which then runs the weather agent), or ``python
examples/cache_break_demo.py [--price-as MODEL] [--keep DB]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import openai
from clock_agent import TURNS, rules, run_task  # this folder's agent: the program the demo runs twice

from ctxwright.backends.embedded import find_model_file
from ctxwright.cache.prices import call_cost, held_usage, price_for
from ctxwright.core.threads import default_threads
from ctxwright.core.usage import CacheUsage
from ctxwright.proxy.log import proxy_session_requests, proxy_sessions
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store


@dataclass
class Run:
    label: str
    session: str = ""
    ttft_ms: list[float] = field(default_factory=list)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """llama-cpp-python's own server on the bundled model, on a free loopback port."""
    port = free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(find_model_file()), "--model_alias", "smollm2"]
    argv += ["--chat_format", "chatml", "--n_ctx", "4096", "--n_threads", str(default_threads())]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama_cpp.server exited with {proc.returncode}; its log: {log}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.25)
    proc.kill()
    raise SystemExit(f"llama_cpp.server did not answer within 180 s; its log: {log}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--price-as", default="gpt-4.1", help="price the calls as this model of the built-in table")
    ap.add_argument("--rules", type=int, default=48, help="how many rules the system prompt holds (default 48)")
    ap.add_argument("--keep", metavar="DB", help="record into this store and keep it (default: a temporary one)")
    args = ap.parse_args()
    price = price_for("openai", args.price_as) or price_for("anthropic", args.price_as)
    if price is None:
        print(f"ctxwright: no built-in price for {args.price_as!r}; try gpt-4.1 or claude-sonnet-4-5", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="ctxwright-demo-"))
    db = Path(args.keep) if args.keep else tmp / "demo.db"
    server, upstream = start_server(tmp / "llama_server.log")
    try:
        store = Store(db)
        print("ctxwright proxy, live (one line per call):")
        with_ts, without = Run("time in the system prompt"), Run("static system prompt")
        proxy = RecordingProxy.start(ProxyConfig(upstream=upstream), store, printer=lambda s: print("  " + s))
        try:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="not-needed-locally", max_retries=0)
            # load the model's weights before anything is timed (not through the proxy: not a call of the task)
            openai.OpenAI(base_url=upstream + "/v1", api_key="-", max_retries=0).chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
            )
            for run, timestamp in ((with_ts, True), (without, False)):
                before = {s["id"] for s in proxy_sessions(store)}
                run.ttft_ms = run_task(client, timestamp, rules(args.rules))
                proxy.recorder.wait_idle(60, at_least=3 * (2 if run is without else 1))
                run.session = next(s["id"] for s in proxy_sessions(store) if s["id"] not in before)
        finally:
            proxy.stop()
        print()
        print(f"the same task twice ({len(TURNS)} calls each); $ as if on {price.model} with its prompt cache")
        print(
            f"{'run':<27} {'call':>4} {'cause':<15} {'break at':<16} {'prefill ms':>10} {'$ spent':>10} {'$ lost':>10}"
        )
        for run in (with_ts, without):
            spent = lost = 0.0
            previous = 0  # the previous call's prompt: what an append-only call would have read back
            for i, record in enumerate(proxy_session_requests(store, run.session)):
                audit = record["proxy"].get("audit") or {}
                prompt = int(audit.get("prompt_tokens") or 0)
                asked = CacheUsage(uncached_input=prompt, output=_output_tokens(record))
                paid = call_cost(held_usage(asked, int(audit.get("reusable_prefix_tokens") or 0)), price)
                lost_here = max(0.0, paid - call_cost(held_usage(asked, previous), price))
                spent, lost, previous = spent + paid, lost + lost_here, prompt
                where = audit.get("first_divergence") or {}
                at = f"msg#{where['message_index']} @{where['byte_offset']}" if where else "-"
                label = run.label if i == 0 else ""
                print(
                    f"{label:<27} {i:>4} {audit.get('cause', '?')!s:<15} {at:<16} {run.ttft_ms[i]:>10,.0f} "
                    f"{paid:>10.6f} {lost_here:>10.6f}"
                )
            print(
                f"{'':<27} {'':>4} {'session ' + run.session:<32} {sum(run.ttft_ms):>10,.0f} {spent:>10.6f} {lost:>10.6f}"
            )
        print(f"\nrecorded in {db}; see one run with: ctxwright audit --proxy-session {with_ts.session} --db {db}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    return 0


def _output_tokens(record: dict[str, object]) -> int:
    """The answer's tokens from the usage the stream ended with (``include_usage``)."""
    response = record.get("response")
    events = response if isinstance(response, list) else [response]
    for event in reversed(events):
        usage = event.get("usage") if isinstance(event, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
