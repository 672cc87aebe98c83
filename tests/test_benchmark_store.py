"""``benchmarks/store.py`` in a tiny form (1 and 4 writer processes, 50 appends each) against
the tests' PostgreSQL server (``--url``) and SQLite files kept in a temporary folder: every
cell is measured, nothing fails, and the JSON's counts are what the stores hold when they are
read back here, independently of the benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwright.core.events import UserEvent
from ctxwright.store.sessions import Store

ROOT = Path(__file__).resolve().parent.parent
APPENDS = 50
CALLS_EVERY = 4


@pytest.mark.slow  # 18 spawned writer processes (3 databases x (1 + 4) + 3 warm-ups): ~5 s idle, more when loaded
def test_the_quick_store_benchmark_measures_every_cell_and_stores_every_event(pg_server, tmp_path: Path) -> None:
    url = str(pg_server.new_database())
    out = tmp_path / "store.json"
    sqlite_dir = tmp_path / "sqlite"
    proc = subprocess.run(
        [
            *(sys.executable, str(ROOT / "benchmarks" / "store.py"), "--quick", "--writers", "1,4"),
            *("--appends", str(APPENDS), "--calls-every", str(CALLS_EVERY), "--url", url),
            *("--sqlite-dir", str(sqlite_dir), "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "store appends: medians of the repeats" in proc.stdout and "PASS  errors==0" in proc.stdout
    data = json.loads(out.read_text())
    assert data["pass"] and data["checks"] == {"errors==0": True, "every_event_stored": True}
    assert data["writers"] == [1, 4] and data["appends_per_writer"] == APPENDS and data["repeats"] == 1
    assert data["machine"]["cpus"] and data["postgresql_settings"]["server_version"]
    databases = ["sqlite", "postgresql", "postgresql_async"]
    assert set(data["databases"]) == set(databases)

    # every cell measured once (quick), with numbers that mean something
    assert {(c["database"], c["writers"]) for c in data["cells"]} == {(d, w) for d in databases for w in (1, 4)}
    assert len(data["runs"]) == 6 and len(data["warmup"]) == 3
    for c in data["cells"]:
        assert c["repeats"] == 1 and c["errors"] == 0 and c["verified"], c
        assert c["appends"] == c["expected_appends"] == c["writers"] * APPENDS
        assert c["appends_per_s"] > 0 and 0 < c["append_p50_ms"] <= c["append_p99_ms"] <= c["append_max_ms"]
    assert {(r["database"], r["writers"]) for r in data["ratios_pg_over_sqlite"]} == {
        (d, w) for d in databases[1:] for w in (1, 4)
    }
    for r in data["ratios_pg_over_sqlite"]:
        sqlite = next(c for c in data["cells"] if c["database"] == "sqlite" and c["writers"] == r["writers"])
        pg = next(c for c in data["cells"] if c["database"] == r["database"] and c["writers"] == r["writers"])
        assert r["of_medians"] == pytest.approx(pg["appends_per_s"] / sqlite["appends_per_s"], rel=1e-2)

    # each database ran with the settings its row names
    by_db = {r["database"]: r["settings"] for r in data["runs"]}
    assert by_db["sqlite"] == {"journal_mode": "wal", "synchronous": "NORMAL"}
    assert by_db["postgresql_async"]["synchronous_commit"] == "off"
    assert by_db["postgresql"]["synchronous_commit"] == data["postgresql_settings"]["synchronous_commit"]

    # read the stores back: every writer's session holds exactly what it appended, in order
    for run in data["runs"] + data["warmup"]:
        assert len(run["per_writer"]) == run["writers"]
        store = Store(run["store"] if run["database"] == "sqlite" else url)
        try:
            for w in run["per_writer"]:
                events = store.events(w["session_id"])
                assert [e.seq for e in events] == list(range(run["appends_per_writer"]))
                assert all(isinstance(e, UserEvent) and 1000 <= len(e.message.content or "") <= 2000 for e in events)
                assert len(store.calls(w["session_id"])) == run["appends_per_writer"] // CALLS_EVERY
                assert w["appends_ok"] == w["stored_events"] == len(events) and w["errors"] == 0
        finally:
            store.close()
    assert sorted(p.name for p in sqlite_dir.glob("*.db")) == sorted(
        Path(r["store"]).name for r in data["runs"] + data["warmup"] if r["database"] == "sqlite"
    )
