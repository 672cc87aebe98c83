"""Compression that keeps the facts: one scripted tool-heavy coding/ops session, sent five ways,
and what each way costs and keeps in front of the model.

The session is generated here, deterministically: about 46 tool calls whose results are JSON
listings of 100-300 objects, real source files read from this Python's standard library, long
build and test logs, and the same command run again with one line changed -- with 32 planted
facts (``FACT-17: build id 7f3a...``, unique strings) at the start, middle or end of their
results. The "model" is a loopback OpenAI-compatible server (Starlette on uvicorn, the
project's own stack) that records every request it receives and answers with the plan's next
tool call; the agent side is the official ``openai`` SDK. Every arm runs the same plan:

* ``direct`` -- the agent appends every result whole;
* ``Context 32K`` / ``Context 128K`` -- the agent loop of README's "Your own loop: Context",
  ctxwright deciding what the model sees (result budget, compaction, ``read_result``, ``recall``);
* ``proxy --compress`` -- the direct agent through ``ctxwright proxy`` with its compressors on
  (reported as not available when this build's proxy has no such option);
* ``headroom`` (and ``headroom token``) -- the direct agent through the peer compression proxy
  ``headroom-ai`` run offline (``make peers`` installs it outside the clone, under
  ``~/.cache/ctxwright/peers`` or ``$CTXWRIGHT_PEERS``); not installed: reported as not available.

Measured per arm, from the requests the upstream received (the audit of ``audit/compare.py``
over them, so every arm is counted the same way): tokens per call (the project's token counter),
prefix reuse (Σ reusable ÷ Σ prompt), prefix breaks (calls whose cause is neither ``first`` nor
``append``), cost units (uncached tokens written at 1.25×, reusable ones read at 0.1×, relative to
direct), facts the model saw in the request that first showed their result, facts in the last
request, facts retrievable by the arm's own means (``Context``: ``recall`` and ``read_result``;
a proxy: its offloaded files), and the CPU the arm's machinery spent per call.

    python benchmarks/compression_facts.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import console, free_port, machine, save, table, wait_port
from ctxwright.audit.compare import Auditor
from ctxwright.audit.logs import request_from_record
from ctxwright.core.events import ToolEvent
from ctxwright.core.tokens import TokenCounter
from ctxwright.report.data import NOT_A_BREAK

SYSTEM = (
    "You are a coding and operations agent working on the shop service. Use the tools to inspect the "
    "repository, the cluster and the CI, then report what you found with the exact identifiers."
)
TASK = "The release candidate failed in CI. Find out why, which build and deploy are affected, and report."
MODEL = "gpt-4"  # a name whose tokenizer (cl100k_base) the peer can load offline
#: what a cache read and a cache write cost relative to an uncached input token
READ_PRICE, WRITE_PRICE = 0.1, 1.25
#: where ``make peers`` installs the peer proxy and the tokenizer file it needs offline
PEERS = Path(os.environ.get("CTXWRIGHT_PEERS", Path.home() / ".cache" / "ctxwright" / "peers"))
#: the facts planted in the session
FACTS = 30
#: the standard-library modules whose real source the session reads
SOURCES = [
    "json.decoder",
    "textwrap",
    "shlex",
    "heapq",
    "json.encoder",
    "string",
    "fnmatch",
    "bisect",
    "functools",
    "contextlib",
    "base64",
    "calendar",
]


# -- the session ---------------------------------------------------------------------------------
@dataclass
class Fact:
    key: str  # FACT-07
    label: str  # build id
    value: str  # 7f3a9c...
    call: int  # the call whose result holds it
    kind: str  # json, source, log, repeat
    where: str  # start, middle, end

    @property
    def text(self) -> str:
        return f"{self.key}: {self.label} {self.value}"


@dataclass
class PlannedCall:
    tool: str
    args: dict[str, Any]
    result: str
    kind: str
    facts: list[Fact] = field(default_factory=list)


LABELS = [
    ("build id", "hex"),
    ("deploy owner", "name"),
    ("failing test seed", "int"),
    ("artifact path", "path"),
    ("incident ticket", "ticket"),
    ("db migration", "hex"),
    ("canary port", "int"),
    ("release tag", "tag"),
]
NAMES = ["Ilse Brandvold", "Tomasz Wierzba", "Amaru Quispe", "Oona Halloran", "Kenji Morikawa", "Dalia Rahimi"]


def fact_value(rng: random.Random, kind: str) -> str:
    if kind == "hex":
        return "".join(rng.choice("0123456789abcdef") for _ in range(16))
    if kind == "name":
        return f"{rng.choice(NAMES)} (team {rng.choice(['payments', 'search', 'infra', 'checkout'])}-{rng.randint(10, 99)})"
    if kind == "int":
        return str(rng.randint(10_000, 65_000))
    if kind == "path":
        return f"/srv/releases/{rng.randint(2024, 2026)}-{rng.randint(1, 12):02d}/rc{rng.randint(1, 9)}/shop-{rng.randint(100, 999)}.tar.zst"
    if kind == "ticket":
        return f"OPS-{rng.randint(1000, 9999)}"
    return f"v{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 99)}-rc{rng.randint(1, 9)}"


def place(lines: list[str], line: str, where: str) -> list[str]:
    """``line`` inserted at the start, middle or end of ``lines``."""
    at = {"start": 1 if len(lines) > 1 else 0, "middle": len(lines) // 2, "end": len(lines)}[where]
    return [*lines[:at], line, *lines[at:]]


def json_listing(rng: random.Random, kind: str, n: int, fact: Fact | None) -> str:
    """A listing as an API returns it: ``n`` objects of the same keys, the fact in one's note."""
    regions = ["eu-west-1", "eu-central-1", "us-east-2", "ap-south-1"]
    at = {"start": 0, "middle": n // 2, "end": n - 1}[fact.where] if fact else -1
    items = []
    for i in range(n):
        items.append(
            {
                "id": f"{kind[:3]}-{rng.randint(100000, 999999)}",
                "name": f"{kind}-{i:03d}",
                "status": rng.choice(["Running", "Running", "Running", "Pending", "Succeeded"]),
                "region": rng.choice(regions),
                "cpu_m": rng.randint(50, 4000),
                "memory_mi": rng.randint(64, 8192),
                "restarts": rng.choice([0, 0, 0, 1, 2]),
                "image": f"registry.local/shop/{kind}:{rng.randint(1, 40)}.{rng.randint(0, 9)}",
                "note": fact.text if i == at and fact else "",
            }
        )
    return json.dumps({"kind": f"{kind}List", "items": items}, indent=2)


def source_file(module: str, fact: Fact | None) -> str:
    """A real standard-library file, read from disk, with the fact as a comment line."""
    mod = __import__(module, fromlist=["_"])
    path = inspect.getsourcefile(mod)
    assert path is not None
    lines = Path(path).read_text().splitlines()
    if fact:
        lines = place(lines, f"# {fact.text}", fact.where)
    return "\n".join(lines)


def build_log(rng: random.Random, n: int, fact: Fact | None) -> str:
    lines = []
    for i in range(n):
        pct = 100 * i // n
        r = rng.random()
        if r < 0.04:
            lines.append(f"src/module_{i % 97:03d}.c:{rng.randint(10, 900)}: warning: unused variable 'tmp{i % 7}'")
        else:
            lines.append(f"[{pct:3d}%] Building C object src/CMakeFiles/shop.dir/module_{i % 97:03d}.c.o")
    if fact:
        lines = place(lines, f"-- {fact.text}", fact.where)
    return "\n".join(["$ cmake --build build -j2", *lines, "[100%] Linking C executable shop"])


def test_log(rng: random.Random, n: int, fact: Fact | None) -> str:
    lines = ["============================= test session starts =============================="]
    for i in range(n):
        lines.append(
            f"tests/test_{['cart', 'orders', 'stock', 'auth'][i % 4]}.py::test_case_{i:04d} PASSED [{100 * i // n:3d}%]"
        )
    if fact:
        lines = place(lines, f"E   {fact.text}", fact.where)
    lines.append(
        f"======================= {n} passed in {rng.randint(20, 90)}.{rng.randint(10, 99)}s ======================="
    )
    return "\n".join(lines)


def service_log(rng: random.Random, n: int, fact: Fact | None) -> str:
    lines = []
    for i in range(n):
        lines.append(
            f"2026-11-0{1 + i % 9}T10:{i % 60:02d}:{(i * 7) % 60:02d}Z INFO api request path=/cart/{rng.randint(1, 9)} status=200 ms={rng.randint(2, 80)}"
        )
    if fact:
        lines = place(lines, f"2026-11-03T10:00:00Z ERROR api {fact.text}", fact.where)
    return "\n".join(lines)


def small(i: int) -> str:
    return "\n".join(
        ["On branch release/rc", "Changes not staged for commit:", f"  modified:   src/shop/cart_{i}.py", ""]
    )


def make_plan(quick: bool, seed: int = 37) -> tuple[list[PlannedCall], list[Fact]]:
    """The session: a fixed sequence of result kinds, sizes and fact positions (same seed, same
    bytes), ``len(facts)`` ≥ 30 in both modes; quick mode has smaller results only."""
    rng = random.Random(seed)
    kinds = [
        "json", "source", "build", "test", "small", "json", "source", "service", "repeat",
        "json", "build", "source", "repeat", "service", "json", "small", "source", "test",
        "repeat", "json", "build", "source", "service", "repeat", "json", "small", "source",
        "test", "json", "build", "repeat", "source", "service", "json", "test", "small",
        "source", "repeat", "json", "build", "source", "service", "repeat", "json", "test", "small",
    ]  # fmt: skip
    scale = 0.25 if quick else 1.0
    plan: list[PlannedCall] = []
    facts: list[Fact] = []
    wheres = ["start", "middle", "end"]
    repeat_base: dict[str, list[str]] = {}
    src_i = 0
    # FACTS of the calls that can hold one carry one, evenly spread; the others (a git status, a
    # rerun that printed the same) carry none
    able = [i for i, k in enumerate(kinds) if k != "small"]
    carriers = {able[round(j * (len(able) - 1) / (FACTS - 1))] for j in range(FACTS)}
    for i, kind in enumerate(kinds):
        has_fact = i in carriers
        fact = None
        if has_fact:
            label, vkind = LABELS[len(facts) % len(LABELS)]
            fact = Fact(f"FACT-{len(facts) + 1:02d}", label, fact_value(rng, vkind), i, kind, wheres[len(facts) % 3])
            facts.append(fact)
        if kind == "json":
            what = ["pods", "deployments", "jobs", "nodes", "services"][i % 5]
            n = int(rng.randint(100, 160) * scale)
            plan.append(PlannedCall("list_items", {"kind": what}, json_listing(rng, what, n, fact), kind))
        elif kind == "source":
            module = SOURCES[src_i % len(SOURCES)]
            src_i += 1
            text = source_file(module, fact)
            if quick:
                text = text[:6000] + ("\n# " + fact.text if fact and fact.where != "start" else "")
            plan.append(PlannedCall("read_file", {"path": module.replace(".", "/") + ".py"}, text, kind))
        elif kind == "build":
            plan.append(
                PlannedCall("run", {"cmd": "cmake --build build -j2"}, build_log(rng, int(450 * scale), fact), kind)
            )
        elif kind == "test":
            plan.append(
                PlannedCall("run", {"cmd": "pytest tests/integration -v"}, test_log(rng, int(350 * scale), fact), kind)
            )
        elif kind == "service":
            plan.append(
                PlannedCall(
                    "run", {"cmd": "kubectl logs deploy/api --since=1h"}, service_log(rng, int(250 * scale), fact), kind
                )
            )
        elif kind == "repeat":
            cmd = ["pytest -q tests/unit", "kubectl get pods -o wide"][i % 2]
            if cmd not in repeat_base:
                repeat_base[cmd] = [
                    f"tests/unit/test_{j % 40:02d}.py ....................................... [{j % 100:3d}%]"
                    if cmd.startswith("pytest")
                    else f"api-{j:04d}-{rng.randint(10000, 99999)}   1/1   Running   0   {j % 50}h   10.2.{j % 250}.{rng.randint(2, 250)}   node-{j % 9}"
                    for j in range(int(250 * scale))
                ]
            lines = list(repeat_base[cmd])
            if fact:  # this run differs from the others by one line: the fact
                at = {"start": 2, "middle": len(lines) // 2, "end": len(lines) - 1}[fact.where]
                lines[at] = f"FAILED {fact.text}"
            plan.append(PlannedCall("run", {"cmd": cmd}, "\n".join(lines), kind))
        else:
            plan.append(PlannedCall("run", {"cmd": "git status"}, small(i), kind))
        if fact:
            plan[-1].facts.append(fact)
    return plan, facts


class Script:
    """The tools' side: each call returns the plan's next result (the same command run twice
    prints what the plan says for that run)."""

    def __init__(self, plan: list[PlannedCall]) -> None:
        self.plan = plan
        self.k = 0

    def next(self, tool: str) -> str:
        call = self.plan[self.k]
        if call.tool != tool:
            raise RuntimeError(f"call {self.k}: the plan has {call.tool}, the agent ran {tool}")
        self.k += 1
        return call.result

    def tools(self) -> list[Callable[..., str]]:
        def run(cmd: str) -> str:
            """Run a shell command in the repository and return its output.

            Args:
                cmd: the command line
            """
            return self.next("run")

        def read_file(path: str) -> str:
            """Read a file of the repository.

            Args:
                path: the file's path
            """
            return self.next("read_file")

        def list_items(kind: str) -> str:
            """List the cluster's objects of one kind as JSON.

            Args:
                kind: pods, deployments, jobs, nodes or services
            """
            return self.next("list_items")

        return [run, read_file, list_items]

    def run(self, name: str, args: dict[str, Any]) -> str:
        fn = {f.__name__: f for f in self.tools()}[name]
        return str(fn(**args))


# -- the loopback model ---------------------------------------------------------------------------
class Upstream:
    """The scripted model on real HTTP: request k is answered with the plan's call k, after the
    plan with a final answer; every request body is kept (parsed), in order."""

    def __init__(self, plan: list[PlannedCall]) -> None:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from ctxwright.proxy.server import ProxyThread

        self.plan = plan
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

        async def chat(request: Request) -> JSONResponse:
            body = json.loads(await request.body())
            with self.lock:
                k = len(self.bodies)
                self.bodies.append(body)
            if k < len(self.plan):
                c = self.plan[k]
                fn = {"name": c.tool, "arguments": json.dumps(c.args)}
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": f"call_{k}", "type": "function", "function": fn}],
                }
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": "The release candidate failed; see above."}, "stop"
            return JSONResponse(
                {
                    "id": f"chatcmpl-{k}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", MODEL),
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                }
            )

        routes = [Route(p, chat, methods=["POST"]) for p in ("/v1/chat/completions", "/chat/completions")]
        self.thread = ProxyThread(Starlette(routes=routes)).start()

    @property
    def url(self) -> str:
        return self.thread.url

    def stop(self) -> None:
        self.thread.stop()


def request_text(body: dict[str, Any]) -> str:
    """Everything a request shows the model: each message's text and tool calls, the tools."""
    parts: list[str] = []
    for m in body.get("messages") or []:
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):
            parts.extend(str(p.get("text", "")) for p in c if isinstance(p, dict))
        for tc in m.get("tool_calls") or []:
            parts.append(str((tc.get("function") or {}).get("arguments", "")))
    return "\n".join(parts)


def thread_cpu(native_id: int | None) -> float:
    """CPU seconds one thread of this process has used (Linux ``/proc``), 0 where unknown."""
    try:
        fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the agents --------------------------------------------------------------------------------
def direct_agent(base_url: str, plan: list[PlannedCall]) -> None:
    """The agent without ctxwright: every result appended whole."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=300)
    script = Script(plan)
    specs = [tool_spec(f) for f in script.tools()]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    while True:
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=specs, temperature=0)  # type: ignore[arg-type]
        msg = reply.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return
        for tc in msg.tool_calls:
            out = script.run(tc.function.name, json.loads(tc.function.arguments))  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": out})


def tool_spec(fn: Callable[..., Any]) -> dict[str, Any]:
    from ctxwright.tools.registry import Tool

    return Tool.from_function(fn).spec.to_wire()


@dataclass
class ArmRun:
    bodies: list[dict[str, Any]]
    cpu_s: float
    calls: int
    retrievable: Callable[[Fact], bool] = lambda f: False
    retrieval: str = "last request"
    #: per call that compacted: the pass (its first tier's start to its last event, wall ms) and
    #: ctxwright's whole overhead of that turn (``CallReport.overhead_ms``)
    compaction_ms: list[float] = field(default_factory=list)
    compaction_turn_ms: list[float] = field(default_factory=list)
    note: str = ""


def run_direct(plan: list[PlannedCall]) -> ArmRun:
    up = Upstream(plan)
    try:
        t0 = time.thread_time()
        direct_agent(up.url + "/v1", plan)
        # the client's own CPU, for scale: this arm has no machinery in between
        return ArmRun(up.bodies, time.thread_time() - t0, len(plan), note="the agent's own CPU")
    finally:
        up.stop()


def run_context(plan: list[PlannedCall], window: int, work: Path) -> ArmRun:
    """README's loop: ``ctx.request()`` → the SDK → ``ctx.record()`` → ``ctx.run_tools()``."""
    from openai import OpenAI

    from ctxwright import Context

    up = Upstream(plan)
    script = Script(plan)
    client = OpenAI(base_url=up.url + "/v1", api_key="sk-local", max_retries=0, timeout=300)
    ctx = Context(
        system=SYSTEM,
        tools=script.tools(),
        db=str(work / f"context-{window}.db"),
        window=window,
        read_result=True,
        recall=True,
        summaries=False,
        max_iterations=len(plan) + 5,
    )
    cpu = 0.0
    passes: list[float] = []
    turns: list[float] = []
    try:
        ctx.add_user(TASK)
        while True:
            t0 = time.thread_time()
            body = ctx.request()
            cpu += time.thread_time() - t0
            reply = client.chat.completions.create(model=MODEL, **body)
            t0 = time.thread_time()
            step = ctx.record(reply)
            done = [c for c in step.report.compactions if c.started_at is not None and c.ended_at is not None]
            if done:
                passes.append(1000 * (max(c.ended_at for c in done) - min(c.started_at for c in done)))
            if step.report.compactions and step.report.overhead_ms is not None:
                turns.append(step.report.overhead_ms)
            if step.tool_calls:
                ctx.run_tools(step)
            cpu += time.thread_time() - t0
            if not step.tool_calls:
                break
    finally:
        up.stop()
    by_call: dict[str, str] = {}
    for ev in ctx.session.events:
        if isinstance(ev, ToolEvent) and ev.result_id and ev.message.tool_call_id:
            by_call[ev.message.tool_call_id] = ev.result_id
    recall = ctx.tools.get("recall")
    reader = ctx.tools.get("read_result")

    def retrievable(f: Fact) -> bool:
        found = recall(query=f"{f.key} {f.label}", limit=5)
        if f.text in (found.content if hasattr(found, "content") else str(found)):
            return True
        rid = by_call.get(f"call_{f.call}")
        offset = 0
        while rid is not None:  # page the whole result back, as a model following the pointers would
            page = str(reader(result_id=rid, offset=offset, limit=8000))
            if f.text in page:
                return True
            if "this is the end" in page.split("\n", 1)[0]:
                return False
            offset += 8000 - 200  # pages overlap, so a fact across a page border is found
        return False

    return ArmRun(up.bodies, cpu, len(plan), retrievable, "recall, read_result", passes, turns, "ctxwright's own CPU")


def run_proxy_compress(plan: list[PlannedCall], work: Path) -> ArmRun | str:
    """The direct agent through ``ctxwright proxy --compress``, in process; its CPU is the
    process's less the agent's thread and the upstream's."""
    from ctxwright.proxy.serve import RecordingProxy
    from ctxwright.proxy.server import ProxyConfig
    from ctxwright.store.sessions import Store

    if "compress" not in getattr(ProxyConfig, "__dataclass_fields__", {}):
        return "not available in this build (the proxy has no compress option)"
    up = Upstream(plan)
    folder = work / "proxy"
    folder.mkdir()
    store = Store(folder / "proxy.db")
    proxy = RecordingProxy.start(ProxyConfig(upstream=up.url, compress=True), store, printer=lambda s: None)
    try:
        p0, a0, u0 = time.process_time(), time.thread_time(), thread_cpu(up.thread.thread.native_id)
        direct_agent(proxy.url + "/v1", plan)
        cpu = (time.process_time() - p0) - (time.thread_time() - a0) - (thread_cpu(up.thread.thread.native_id) - u0)
    finally:
        proxy.stop()
        up.stop()

    def retrievable(f: Fact) -> bool:
        return any(f.text in text for text in offloaded(folder))

    return ArmRun(up.bodies, max(cpu, 0.0), len(plan), retrievable, "offloaded files", note="the proxy's CPU")


def offloaded(folder: Path) -> Iterator[str]:
    """The text of every file the proxy wrote beside its database (not the database itself)."""
    for p in sorted(folder.rglob("*")):
        if p.is_file() and ".db" not in p.name:
            yield p.read_text(errors="replace")


def headroom_paths() -> tuple[Path, Path] | None:
    exe = PEERS / "headroom" / "bin" / "headroom"
    cache = PEERS / "tiktoken_cache"
    return (exe, cache) if exe.exists() and cache.is_dir() else None


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the process group this benchmark started (SIGTERM, then SIGKILL after 20 s)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_headroom(plan: list[PlannedCall], work: Path, mode: str | None) -> ArmRun | str:
    """The direct agent through the peer proxy, offline, its CPU read from ``/proc``."""
    found = headroom_paths()
    if found is None:
        return "not installed (make peers)"
    exe, cache = found
    up = Upstream(plan)
    port = free_port()
    env = {
        **os.environ,
        "HEADROOM_OFFLINE": "1",
        "TIKTOKEN_CACHE_DIR": str(cache),
        "HOME": str(work / "headroom-home"),
        "OPENAI_API_KEY": "sk-local",
    }
    cmd = [str(exe), "proxy", "--host", "127.0.0.1", "--port", str(port), "--openai-api-url", up.url]
    cmd += ["--no-telemetry", "--no-rate-limit", "--no-cache", "--no-http2"]
    if mode:
        cmd += ["--mode", mode]
    log = (work / f"headroom-{mode or 'default'}.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_port(port, proc, "headroom proxy", timeout=120)
        c0 = process_cpu(proc.pid)
        try:
            direct_agent(f"http://127.0.0.1:{port}/v1", plan)
        except Exception as exc:  # the peer failed the session: say so, do not count it
            return f"failed: {type(exc).__name__}: {str(exc)[:120]} (log {log.name})"
        cpu = process_cpu(proc.pid) - c0
    except SystemExit as exc:  # it did not start: say why, with its log
        return f"did not start ({exc}; log {log.name})"
    finally:
        stop_group(proc)
        log.close()
        up.stop()
    return ArmRun(up.bodies, cpu, len(plan), note="the peer process's CPU")


# -- measuring ----------------------------------------------------------------------------------
def measure(run: ArmRun, plan: list[PlannedCall], facts: list[Fact], counter: TokenCounter) -> dict[str, Any]:
    auditor = Auditor(counter)
    rows = [auditor.add(request_from_record(b)) for b in run.bodies]
    prompt = [r.prompt_tokens for r in rows]
    reusable = [r.reusable_prefix_tokens for r in rows]
    cost = sum(WRITE_PRICE * (p - r) + READ_PRICE * r for p, r in zip(prompt, reusable, strict=True))
    texts = [request_text(b) for b in run.bodies]
    complete = len(run.bodies) == len(plan) + 1
    seen = [f.key for f in facts if complete and f.text in texts[f.call + 1]]
    last = [f.key for f in facts if f.text in texts[-1]]
    own = [f.key for f in facts if run.retrievable(f)]  # by the arm's own means alone
    retrievable = [f.key for f in facts if f.key in last or f.key in own]
    passes, turns = sorted(run.compaction_ms), sorted(run.compaction_turn_ms)
    return {
        "requests": len(rows),
        "complete": complete,
        "tokens_per_call": round(statistics.mean(prompt)),
        "max_prompt_tokens": max(prompt),
        "total_prompt_tokens": sum(prompt),
        "reuse": round(sum(reusable) / max(1, sum(prompt)), 4),
        "prefix_breaks": sum(1 for r in rows if r.cause not in NOT_A_BREAK),
        "causes": dict(sorted({r.cause: sum(1 for x in rows if x.cause == r.cause) for r in rows}.items())),
        "cost_units": round(cost),
        "facts": len(facts),
        "facts_seen": len(seen),
        "facts_in_last_request": len(last),
        "facts_retrievable": len(retrievable),
        "retrieved_by": run.retrieval,
        "facts_retrievable_by_own_means": len(own),
        "facts_not_seen": [f.key for f in facts if f.key not in seen],
        "cpu_ms_per_call": round(1000 * run.cpu_s / max(1, run.calls), 3),
        "cpu_is": run.note,
        "compaction_passes": len(passes),
        "compaction_pass_ms_p95": p95(passes),
        "compaction_pass_ms_max": round(passes[-1], 3) if passes else None,
        "compaction_turn_ms_p95": p95(turns),
        "compaction_pass_ms": [round(x, 3) for x in run.compaction_ms],  # in call order
    }


def p95(xs: list[float]) -> float | None:
    """The 95th percentile of sorted ``xs`` (nearest rank), ``None`` for none."""
    return round(xs[min(len(xs) - 1, int(0.95 * len(xs)))], 3) if xs else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the same plan with smaller results (a test's size)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--keep", action="store_true", help="keep the stores and logs (their folder is printed)")
    args = p.parse_args()

    plan, facts = make_plan(args.quick)
    counter = TokenCounter()
    output_tokens = sum(counter.count(c.result) for c in plan)
    work = Path(tempfile.mkdtemp(prefix="ctxwright-facts-"))
    runs: dict[str, ArmRun | str] = {"direct": run_direct(plan)}
    runs["Context 32K"] = run_context(plan, 32_768, work)
    runs["Context 128K"] = run_context(plan, 131_072, work)
    runs["proxy --compress"] = run_proxy_compress(plan, work)
    runs["headroom"] = run_headroom(plan, work, None)
    if not args.quick:
        runs["headroom token"] = run_headroom(plan, work, "token")
    arms: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        arms[name] = (
            {"available": False, "why": run}
            if isinstance(run, str)
            else {"available": True, **measure(run, plan, facts, counter)}
        )
    base = arms["direct"]["cost_units"]
    for a in arms.values():
        if a["available"]:
            a["cost_vs_direct"] = round(a["cost_units"] / base, 3)
    n = len(facts)
    rows = []
    for name, a in arms.items():
        if not a["available"]:
            rows.append([name, *["n/a"] * 10])
            continue
        rows.append(
            [
                name,
                a["tokens_per_call"],
                a["reuse"],
                a["prefix_breaks"],
                a["cost_vs_direct"],
                f"{a['facts_seen']}/{n}",
                f"{a['facts_in_last_request']}/{n}",
                f"{a['facts_retrievable']}/{n}",
                a["retrieved_by"],
                a["cpu_ms_per_call"],
                "-" if a["compaction_pass_ms_p95"] is None else a["compaction_pass_ms_p95"],
            ]
        )
    console.print(
        table(
            f"compression_facts{' --quick' if args.quick else ''} · {len(plan)} tool calls · {n} planted facts · "
            f"{output_tokens:,} tokens of tool output ({counter.source})",
            [
                "arm",
                "tokens/call",
                "reuse",
                "breaks",
                "cost×",
                "seen",
                "in last",
                "retrievable",
                "by",
                "CPU ms/call",
                "compaction pass p95 ms",
            ],
            rows,
        )
    )
    for name, a in arms.items():
        if not a["available"]:
            console.print(f"{name}: {a['why']}")
        elif a["facts_not_seen"]:
            console.print(f"[dim]{name}: not seen {', '.join(a['facts_not_seen'])}[/]")
    if args.keep:
        console.print(f"[dim]stores and logs in {work}[/]")
    else:
        shutil.rmtree(work, ignore_errors=True)
    save(
        args,
        {
            "quick": args.quick,
            "tool_calls": len(plan),
            "facts": n,
            "tool_output_tokens": output_tokens,
            "tokens_counted_by": counter.source,
            "prices": {"cache_read": READ_PRICE, "cache_write": WRITE_PRICE},
            "facts_planted": [{"key": f.key, "call": f.call, "kind": f.kind, "where": f.where} for f in facts],
            "arms": arms,
            "plan_sha256": hashlib.sha256("".join(c.result for c in plan).encode()).hexdigest(),
            "machine": machine(),
        },
    )


if __name__ == "__main__":
    main()
