"""Appends per second and per-append latency of the session store on SQLite and PostgreSQL,
with 1, 4 and 16 writer processes, side by side in one run.

A writer is a process of its own (``multiprocessing``, spawn) with its own
:class:`~ctxwright.store.sessions.Store`, appending ``UserEvent``s of 1-2 KB of agent-like
text to a session of its own, as an agent does, and one ``CallRecord`` per ``--calls-every``
events (an agent records each model call between its events). Every call is timed on its own
(``time.perf_counter`` around ``append_event`` / ``record_call``). The writers open their
store and create their session first, then wait at a common barrier; the cell's appends/s is
every event appended divided by the wall clock from the first writer's start after the
barrier to the last writer's end (``time.monotonic``, one clock for every process).

Three databases, each a fresh one per run (migrated before the writers start):

* ``sqlite``: a file in a temporary folder, as the store sets it up (WAL,
  ``synchronous=NORMAL``: a commit is not fsynced, a checkpoint is);
* ``postgresql``: ``tests/pgserver.py``'s server, started here with PostgreSQL's default
  durability (``fsync=on``, ``synchronous_commit=on``: each commit waits for its WAL flush);
* ``postgresql_async``: the same server, the writers' connections with
  ``synchronous_commit=off`` (libpq ``options`` in the URL): a commit returns before its WAL
  is flushed, like SQLite's ``synchronous=NORMAL`` in WAL mode.

``--url postgresql://...`` runs the PostgreSQL rows against an existing server instead (its
own ``fsync`` and the database given; the JSON records the server's settings). Cells are
interleaved (each writer count runs every database in turn, the order rotating per repeat)
and repeated ``--repeats`` times; the table reports medians. After each run the store is read
back: the events and calls stored per session must equal what each writer appended.

    python benchmarks/store.py [--quick] [--writers 1,4,16] [--appends 2000] [--repeats 3]
                               [--url postgresql://USER@HOST:PORT/DB] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import multiprocessing
import os
import queue
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, machine, save, table

#: the tables have 15 columns
wide = Console(highlight=False, width=230)

DATABASES = ("sqlite", "postgresql", "postgresql_async")
LABELS = {
    "sqlite": "SQLite (WAL, synchronous=NORMAL)",
    "postgresql": "PostgreSQL (synchronous_commit=on)",
    "postgresql_async": "PostgreSQL (synchronous_commit=off)",
}
SHORT = {"sqlite": "SQLite", "postgresql": "PG", "postgresql_async": "PG async"}
#: an append at or over this many milliseconds counts as a stall (a lock wait, a checkpoint)
SLOW_MS = 100.0
#: how long a run may take before the benchmark gives up on its writers
RUN_TIMEOUT_S = 1800.0

# -- the payload ---------------------------------------------------------------------------------

#: the words of the messages' sentences
_VOCABULARY = (
    "the file function returns list of tokens when parser reads config and test fails because value is "
    "missing from cache so we should check path before calling tool again with updated arguments then "
    "compare output against expected result schema field error line module import request response "
    "session agent step plan next run command build patch diff commit branch merge review report summary"
)


def agent_texts(seed: int, n: int) -> list[str]:
    """``n`` deterministic agent-like messages of 1,000-2,000 characters: sentences, a file
    path with a line number now and then, a short code line."""
    rng = random.Random(seed)
    vocabulary = _VOCABULARY.split()
    out = []
    for _ in range(n):
        target = rng.randint(1000, 2000)
        parts: list[str] = []
        size = 0
        while size < target:
            r = rng.random()
            if r < 0.12:
                part = f"See src/pkg/module_{rng.randint(1, 40)}.py:{rng.randint(1, 900)}."
            elif r < 0.2:
                part = f"`result = run(step={rng.randint(0, 99)}, retries={rng.randint(0, 5)})`"
            else:
                words = rng.choices(vocabulary, k=rng.randint(8, 18))
                part = " ".join(words).capitalize() + "."
            parts.append(part)
            size += len(part) + 1
        out.append(" ".join(parts)[:target])
    return out


# -- one writer (a process of its own) ------------------------------------------------------------


def _settings(store: Any) -> dict[str, str]:
    """The durability settings this writer's connection runs with."""
    db = store.db
    if db.dialect.name == "sqlite":
        return {
            "journal_mode": str(db.fetchone("PRAGMA journal_mode")[0]),
            "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(
                int(db.fetchone("PRAGMA synchronous")[0]), "?"
            ),
        }
    out = {}
    for name in ("fsync", "synchronous_commit"):
        out[name] = str(db.fetchone(f"SHOW {name}")[name])
    return out


def writer(
    target: str,
    session_id: str,
    appends: int,
    calls_every: int,
    seed: int,
    barrier: Any,
    results: Any,
) -> None:
    """Open a store, create ``session_id``, wait at ``barrier``, then append ``appends`` events
    (and a call record per ``calls_every``), timing each; put the figures on ``results``."""
    out: dict[str, Any] = {
        "session_id": session_id,
        "pid": os.getpid(),
        "appends_ok": 0,
        "calls_ok": 0,
        "errors": 0,
        "error_messages": [],
        "append_ms": [],
        "call_ms": [],
    }
    store = None
    ready = False
    try:
        from ctxwright.core.events import UserEvent
        from ctxwright.core.messages import user
        from ctxwright.core.records import CallRecord
        from ctxwright.store.sessions import Store

        texts = agent_texts(seed, appends)
        t0 = time.perf_counter()
        store = Store(target)
        out["open_ms"] = (time.perf_counter() - t0) * 1000
        store.create_session(
            {"system_prompt": "You are a careful coding agent.", "tools": []},
            "0" * 64,
            backend="bench",
            model="bench-model",
            session_id=session_id,
        )
        out["settings"] = _settings(store)
        out["payload_chars"] = sum(len(t) for t in texts)
        ready = True
    except Exception as exc:  # recorded; the writer still meets the barrier so the others start
        out["setup_error"] = f"{type(exc).__name__}: {exc}"
    try:
        barrier.wait(timeout=300)
    except threading.BrokenBarrierError:
        out["setup_error"] = out.get("setup_error") or "the start barrier broke (another writer failed)"
        ready = False
    out["start"] = time.monotonic()
    if ready and store is not None:
        append_ms: list[float] = out["append_ms"]
        call_ms: list[float] = out["call_ms"]
        prompt = 2000
        slowest = -1.0
        for i in range(appends):
            event = UserEvent(seq=i, created_at=time.time(), message=user(texts[i]))
            t = time.perf_counter()
            try:
                store.append_event(session_id, event)
            except Exception as exc:  # a StoreUnusable is what the store promises; anything else too
                out["errors"] += 1
                if len(out["error_messages"]) < 5:
                    out["error_messages"].append(f"{type(exc).__name__}: {exc}")
                continue
            took = (time.perf_counter() - t) * 1000
            append_ms.append(took)
            if took > slowest:
                slowest, out["append_max_at"] = took, time.monotonic()
            out["appends_ok"] += 1
            if calls_every and (i + 1) % calls_every == 0:
                prompt += len(texts[i]) // 4
                k = i // calls_every
                record = CallRecord(
                    session_id=session_id,
                    call_index=k,
                    request_sha256=hashlib.sha256(f"{session_id} {k}".encode()).hexdigest(),
                    request_bytes=prompt * 4,
                    prefix_sha256="0" * 64,
                    created_at=time.time(),
                    prompt_tokens=prompt,
                    cached_tokens=prompt - 400,
                    completion_tokens=120,
                    model="bench-model",
                    max_tokens=1024,
                    temperature=0.0,
                    event_count=i + 1,
                    wall_ms=850.0,
                    usage={
                        "prompt_tokens": prompt,
                        "completion_tokens": 120,
                        "prompt_tokens_details": {"cached_tokens": prompt - 400},
                    },
                    ledger={"system": 600, "tools": 1400, "messages": prompt - 2000, "total": prompt},
                )
                t = time.perf_counter()
                try:
                    store.record_call(record)
                except Exception as exc:
                    out["errors"] += 1
                    if len(out["error_messages"]) < 5:
                        out["error_messages"].append(f"{type(exc).__name__}: {exc}")
                    continue
                call_ms.append((time.perf_counter() - t) * 1000)
                out["calls_ok"] += 1
    out["end"] = time.monotonic()
    if store is not None:
        with contextlib.suppress(Exception):
            store.close()
    results.put(out)


# -- one run: N writers on one database ------------------------------------------------------------


def _p(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def count_stored(target: str, session_ids: list[str]) -> dict[str, dict[str, int]]:
    """Events and calls stored per session, read back through a new :class:`Store`."""
    from ctxwright.store.sessions import Store

    store = Store(target)
    try:
        out = {}
        for sid in session_ids:
            ev = store.db.fetchone("SELECT COUNT(*) AS n FROM events WHERE session_id=?", (sid,))
            ca = store.db.fetchone("SELECT COUNT(*) AS n FROM calls WHERE session_id=?", (sid,))
            out[sid] = {"events": int(ev["n"]), "calls": int(ca["n"])}
        return out
    finally:
        store.close()


def run_cell(
    ctx: Any, database: str, target: str, writers: int, appends: int, calls_every: int, run_id: int
) -> dict[str, Any]:
    """``writers`` processes appending ``appends`` events each to ``target``; the figures."""
    from ctxwright.store.sessions import Store

    Store(target).close()  # migrated before the writers start, as a deployment would
    tag = uuid.uuid4().hex[:6]
    load_before = os.getloadavg()[0]
    sids = [f"bench-{run_id:03d}-{tag}-w{i:02d}" for i in range(writers)]
    barrier = ctx.Barrier(writers)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=writer,
            args=(target, sid, appends, calls_every, run_id * 1000 + i, barrier, results),
            daemon=True,
        )
        for i, sid in enumerate(sids)
    ]
    for proc in procs:
        proc.start()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while len(got) < writers and time.monotonic() < deadline:
        try:
            got.append(results.get(timeout=1.0))
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                try:  # the last results may still be in the pipe
                    got.append(results.get(timeout=2.0))
                except queue.Empty:
                    break
    for proc in procs:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    reported = {w["pid"] for w in got}
    lost = [f"writer process exited with code {p.exitcode} and no figures" for p in procs if p.pid not in reported]
    append_ms = [x for w in got for x in w["append_ms"]]
    call_ms = [x for w in got for x in w["call_ms"]]
    appended = sum(w["appends_ok"] for w in got)
    calls = sum(w["calls_ok"] for w in got)
    errors = sum(w["errors"] for w in got) + len(lost) + sum(1 for w in got if "setup_error" in w)
    messages = lost + [m for w in got for m in ([w["setup_error"]] if "setup_error" in w else []) + w["error_messages"]]
    started = [w for w in got if "setup_error" not in w]
    first = min((w["start"] for w in started), default=0.0)
    wall = max(w["end"] for w in started) - first if started else 0.0
    stored = count_stored(target, [w["session_id"] for w in got])
    verified = len(got) == writers and all(
        stored[w["session_id"]] == {"events": w["appends_ok"], "calls": w["calls_ok"]} for w in got
    )
    per_writer = [
        {
            "session_id": w["session_id"],
            "appends_ok": w["appends_ok"],
            "calls_ok": w["calls_ok"],
            "errors": w["errors"],
            "stored_events": stored[w["session_id"]]["events"],
            "stored_calls": stored[w["session_id"]]["calls"],
            "open_ms": _r(w.get("open_ms")),
            "seconds": _r(w["end"] - w["start"], 4),
            "append_p50_ms": _r(_p(w["append_ms"], 0.5)),
            "append_p99_ms": _r(_p(w["append_ms"], 0.99)),
            "append_max_ms": _r(max(w["append_ms"], default=None)),
            # when its slowest append ended, in seconds from the first writer's start
            "append_max_at_s": _r(w["append_max_at"] - first, 4) if "append_max_at" in w else None,
        }
        for w in got
    ]
    settings: dict[str, str] = next((w["settings"] for w in got if "settings" in w), {})
    from ctxwright.core.redact import redact

    return {
        "database": database,
        "writers": writers,
        "run": run_id,
        "store": target if database == "sqlite" else redact(target),
        "appends_per_writer": appends,
        "calls_every": calls_every,
        "appends": appended,
        "calls": calls,
        "expected_appends": writers * appends,
        "errors": errors,
        "error_messages": messages[:10],
        "wall_s": round(wall, 4),
        "load_average_1m_before": round(load_before, 2),
        "appends_per_s": round(appended / wall, 1) if wall else None,
        "writes_per_s": round((appended + calls) / wall, 1) if wall else None,
        "append_p50_ms": _r(_p(append_ms, 0.5)),
        "append_p90_ms": _r(_p(append_ms, 0.9)),
        "append_p99_ms": _r(_p(append_ms, 0.99)),
        "append_p999_ms": _r(_p(append_ms, 0.999)),
        "append_max_ms": _r(max(append_ms, default=None)),
        "append_mean_ms": _r(statistics.fmean(append_ms) if append_ms else None),
        "appends_at_or_over_100ms": sum(1 for x in append_ms if x >= SLOW_MS),
        "call_p50_ms": _r(_p(call_ms, 0.5)),
        "call_p99_ms": _r(_p(call_ms, 0.99)),
        "payload_bytes_mean": round(sum(w.get("payload_chars", 0) for w in got) / max(1, writers * appends)),
        "settings": settings,
        "verified": verified,
        "per_writer": per_writer,
    }


# -- the databases -----------------------------------------------------------------------------------


def async_url(url: str) -> str:
    """``url`` with ``synchronous_commit=off`` for its connections (libpq ``options``)."""
    return url + ("&" if "?" in url else "?") + "options=-c%20synchronous_commit%3Doff"


def server_settings(url: str) -> dict[str, str]:
    import psycopg

    names: tuple[str, ...] = (
        "server_version",
        "fsync",
        "synchronous_commit",
        "full_page_writes",
        "wal_sync_method",
        "shared_buffers",
    )
    names += ("max_wal_size", "commit_delay")
    with psycopg.connect(url, autocommit=True) as conn:
        return {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}  # type: ignore[index]


def fsync_probe(folder: Path, n: int = 200) -> dict[str, float | None]:
    """What one ``fdatasync`` of a 4 KB append costs in ``folder`` (ms): the floor under a
    durable commit on this disk, measured beside the runs."""
    path = folder / "fsync-probe"
    took = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        block = b"x" * 4096
        for _ in range(n):
            os.write(fd, block)
            t = time.perf_counter()
            os.fdatasync(fd)
            took.append((time.perf_counter() - t) * 1000)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return {"median_ms": _r(statistics.median(took)), "p99_ms": _r(_p(took, 0.99)), "writes": n}


def filesystem(path: Path) -> str:
    """The filesystem type ``path`` is on (``/proc/mounts``: the longest mount point above it)."""
    best, kind = "", "?"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and str(path).startswith(fields[1]) and len(fields[1]) > len(best):
                best, kind = fields[1], f"{fields[2]} ({fields[0]})"
    except OSError:
        pass
    return kind


class Postgres:
    """Where the PostgreSQL runs go: a server started here (``tests/pgserver.py``, default
    durability, a fresh database per run), or ``--url`` (its database, shared by the runs)."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self.server: Any = None
        self.log: deque[str] = deque(maxlen=100)
        if url is None:
            sys.path.insert(0, str(ROOT / "tests"))
            import pgserver  # type: ignore[import-not-found]

            try:
                self.server = pgserver.start(fast=False)
            except RuntimeError as exc:
                raise SystemExit(f"{exc}; or give --url postgresql://... of a running server") from None
            stderr = self.server.proc.stderr
            if stderr is not None:  # drained, so a chatty server never blocks on a full pipe
                threading.Thread(target=lambda: self.log.extend(stderr), daemon=True).start()

    def new_target(self) -> str:
        return str(self.server.new_database()) if self.server is not None else str(self.url)

    @property
    def folder(self) -> Path | None:
        return Path(self.server.folder) if self.server is not None else None

    def admin_url(self) -> str:
        return str(self.server.url()) if self.server is not None else str(self.url)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


# -- the report ---------------------------------------------------------------------------------------


def summarize(runs: list[dict[str, Any]], databases: list[str], writer_counts: list[int]) -> list[dict[str, Any]]:
    cells = []
    for w in writer_counts:
        for db in databases:
            rs = [r for r in runs if r["database"] == db and r["writers"] == w]
            rates = [r["appends_per_s"] for r in rs if r["appends_per_s"] is not None]
            cells.append(
                {
                    "database": db,
                    "writers": w,
                    "repeats": len(rs),
                    "appends_per_s": _r(statistics.median(rates), 1) if rates else None,
                    "appends_per_s_min": min(rates, default=None),
                    "appends_per_s_max": max(rates, default=None),
                    "writes_per_s": _r(statistics.median(r["writes_per_s"] or 0 for r in rs), 1) if rs else None,
                    **{
                        k: _r(statistics.median(r[k] for r in rs if r[k] is not None))
                        if any(r[k] is not None for r in rs)
                        else None
                        for k in (
                            "append_p50_ms",
                            "append_p90_ms",
                            "append_p99_ms",
                            "call_p50_ms",
                            "call_p99_ms",
                        )
                    },
                    "append_max_ms": max(
                        (r["append_max_ms"] for r in rs if r["append_max_ms"] is not None), default=None
                    ),
                    "appends_at_or_over_100ms": sum(r["appends_at_or_over_100ms"] for r in rs),
                    "appends": sum(r["appends"] for r in rs),
                    "expected_appends": sum(r["expected_appends"] for r in rs),
                    "errors": sum(r["errors"] for r in rs),
                    "verified": all(r["verified"] for r in rs),
                }
            )
    return cells


def ratios(runs: list[dict[str, Any]], cells: list[dict[str, Any]], writer_counts: list[int]) -> list[dict[str, Any]]:
    """PostgreSQL's appends/s over SQLite's: of the medians, and the median of each repeat's
    ratio (the two measured a few seconds apart)."""
    out = []
    for w in writer_counts:
        base = next((c for c in cells if c["database"] == "sqlite" and c["writers"] == w), None)
        for db in ("postgresql", "postgresql_async"):
            cell = next((c for c in cells if c["database"] == db and c["writers"] == w), None)
            if base is None or cell is None or not base["appends_per_s"] or cell["appends_per_s"] is None:
                continue
            per_repeat = []
            for r in (r for r in runs if r["database"] == db and r["writers"] == w):
                s = next(
                    (x for x in runs if x["database"] == "sqlite" and x["writers"] == w and x["repeat"] == r["repeat"]),
                    None,
                )
                if s and s["appends_per_s"] and r["appends_per_s"] is not None:
                    per_repeat.append(r["appends_per_s"] / s["appends_per_s"])
            out.append(
                {
                    "database": db,
                    "writers": w,
                    "of_medians": round(cell["appends_per_s"] / base["appends_per_s"], 3),
                    "per_repeat": [round(x, 3) for x in per_repeat],
                    "median_per_repeat": round(statistics.median(per_repeat), 3) if per_repeat else None,
                }
            )
    return out


def print_tables(
    cells: list[dict[str, Any]], rat: list[dict[str, Any]], databases: list[str], writers: list[int]
) -> None:
    cols = ["writers"]
    for db in databases:
        cols += [f"{SHORT[db]} appends/s", f"{SHORT[db]} p50 ms", f"{SHORT[db]} p99 ms", f"{SHORT[db]} err"]
    pg = [db for db in databases if db != "sqlite"]
    if "sqlite" in databases:
        cols += [f"{SHORT[db]}/SQLite" for db in pg]
    rows = []
    for w in writers:
        row: list[Any] = [w]
        for db in databases:
            c = next(c for c in cells if c["database"] == db and c["writers"] == w)
            rate = None if c["appends_per_s"] is None else round(c["appends_per_s"])
            row += [rate, c["append_p50_ms"], c["append_p99_ms"], c["errors"]]
        if "sqlite" in databases:
            for db in pg:
                x = next((r for r in rat if r["database"] == db and r["writers"] == w), None)
                row.append(x["of_medians"] if x else None)
        rows.append(row)
    wide.print(table("store appends: medians of the repeats", cols, rows))
    cols = ["database", "writers", "writes/s", "appends/s min-max", "p90 ms", "max ms", "appends >=100 ms (all)"]
    cols += ["call p50 ms", "call p99 ms", "verified"]
    rows = [
        [
            SHORT[c["database"]],
            c["writers"],
            c["writes_per_s"],
            f"{c['appends_per_s_min']:,.0f}-{c['appends_per_s_max']:,.0f}" if c["appends_per_s_min"] else None,
            c["append_p90_ms"],
            c["append_max_ms"],
            c["appends_at_or_over_100ms"],
            c["call_p50_ms"],
            c["call_p99_ms"],
            "yes" if c["verified"] else "NO",
        ]
        for c in cells
    ]
    wide.print(table("detail (writes = appends + call records)", cols, rows))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer appends, one repeat (a smoke run)")
    p.add_argument("--writers", default="1,4,16", help="writer process counts, comma-separated (default 1,4,16)")
    p.add_argument("--appends", type=int, help="events each writer appends per run (default 2000; quick 200)")
    p.add_argument("--repeats", type=int, help="runs of each cell; the table reports medians (default 3; quick 1)")
    p.add_argument("--calls-every", type=int, default=4, help="one call record per this many events (0: none)")
    p.add_argument("--url", help="run the PostgreSQL rows on this existing server's database instead")
    p.add_argument("--sqlite-dir", help="keep the SQLite files here (default: a temporary folder, removed)")
    p.add_argument("--json", metavar="PATH", help="write the results as JSON here")
    args = p.parse_args(argv)
    from ctxwright.core.redact import redact

    writer_counts = [int(x) for x in args.writers.split(",") if x.strip()]
    appends = args.appends or (200 if args.quick else 2000)
    repeats = args.repeats or (1 if args.quick else 3)
    databases = list(DATABASES)
    load_start = os.getloadavg()[0]
    ctx = multiprocessing.get_context("spawn")
    sqlite_dir = Path(args.sqlite_dir) if args.sqlite_dir else Path(tempfile.mkdtemp(prefix="ctxwright-store-bench-"))
    sqlite_dir.mkdir(parents=True, exist_ok=True)
    pg = Postgres(args.url)
    runs: list[dict[str, Any]] = []
    warmup: list[dict[str, Any]] = []
    started = time.monotonic()
    fsync_before = fsync_probe(sqlite_dir)
    console.print(
        f"fdatasync of a 4 KB append here: median {fsync_before['median_ms']} ms, p99 {fsync_before['p99_ms']} ms"
    )
    try:
        pg_settings = server_settings(pg.admin_url())
        run_id = 0

        def target(db: str) -> str:
            if db == "sqlite":
                return str(sqlite_dir / f"run{run_id:03d}.db")
            url = pg.new_target()
            return async_url(url) if db == "postgresql_async" else url

        for db in databases:  # one small untimed run each: imports, caches, the server's first files
            warmup.append(run_cell(ctx, db, target(db), 1, min(100, appends), args.calls_every, run_id))
            run_id += 1
        for rep in range(repeats):
            for w in writer_counts:
                shift = (rep + writer_counts.index(w)) % len(databases)
                for db in databases[shift:] + databases[:shift]:  # interleaved, the order rotating
                    r = run_cell(ctx, db, target(db), w, appends, args.calls_every, run_id)
                    r["repeat"] = rep
                    runs.append(r)
                    run_id += 1
                    console.print(
                        f"repeat {rep + 1}/{repeats} {SHORT[db]:>8} {w:>2} writers: {r['appends_per_s'] or 0:>8,.0f} "
                        f"appends/s, p50 {r['append_p50_ms'] or 0:.2f} ms, p99 {r['append_p99_ms'] or 0:.2f} ms, "
                        f"max {r['append_max_ms'] or 0:.1f} ms, errors {r['errors']}"
                        + ("" if r["verified"] else "  [stored counts differ]")
                    )
                    for m in r["error_messages"][:3]:
                        console.print(f"  [red]{m}[/]")
        fsync_after = fsync_probe(sqlite_dir)
    finally:
        pg_log = list(pg.log)
        pg_folder = pg.folder
        pg.stop()
        if not args.sqlite_dir:
            shutil.rmtree(sqlite_dir, ignore_errors=True)
    elapsed = time.monotonic() - started
    cells = summarize(runs, databases, writer_counts)
    rat = ratios(runs, cells, writer_counts)
    print_tables(cells, rat, databases, writer_counts)
    errors = sum(r["errors"] for r in runs + warmup)
    verified = all(r["verified"] for r in runs + warmup)
    checks = {"errors==0": errors == 0, "every_event_stored": verified}
    for name, ok in checks.items():
        console.print(f"{'PASS' if ok else 'FAIL'}  {name}")
    load = os.getloadavg()
    console.print(
        f"{elapsed:.0f} s; load average (1 min): {load_start:.1f} at the start, {load[0]:.1f} at the end, on "
        f"{os.cpu_count()} cores (writers and the PostgreSQL server share them)"
    )
    save(
        args,
        {
            "benchmark": "store",
            "machine": machine(),
            "load_average_1m_at_start": round(load_start, 2),
            "load_average_1m_at_end": round(load[0], 2),
            "seconds": round(elapsed, 1),
            "quick": args.quick,
            "writers": writer_counts,
            "appends_per_writer": appends,
            "repeats": repeats,
            "calls_every": args.calls_every,
            "slow_ms": SLOW_MS,
            "databases": {db: LABELS[db] for db in databases},
            "sqlite_version": sqlite3.sqlite_version,
            "sqlite_dir": str(sqlite_dir) if args.sqlite_dir else None,
            "sqlite_filesystem": filesystem(sqlite_dir.resolve()),
            "postgresql_server": "--url" if args.url else "tests/pgserver.py, started by this run (fast=False)",
            "postgresql_url": redact(args.url) if args.url else None,
            "postgresql_settings": pg_settings,
            "postgresql_filesystem": filesystem(pg_folder) if pg_folder else None,
            "postgresql_log_tail": pg_log[-20:],
            "fdatasync_4kb_before": fsync_before,
            "fdatasync_4kb_after": fsync_after,
            "cells": cells,
            "ratios_pg_over_sqlite": rat,
            "runs": runs,
            "warmup": warmup,
            "checks": checks,
            "pass": all(checks.values()),
        },
    )
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
