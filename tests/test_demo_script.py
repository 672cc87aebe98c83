"""``make demo``'s first part, ``examples/cache_break_demo.py``, run as a user runs it: a real
llama-cpp-python server on the bundled model, the proxy, the ``openai`` SDK as the agent.

What must hold whatever the tiny model answers: the two runs are two sessions of three calls,
the run with the time in its system prompt is ``first, system_changed, system_changed`` with the
break named at message 0 and a byte, the static run is ``first, append, append``, and each call
has a prefill time and a price. The prefill times themselves are measured, not asserted (a
loaded CI machine); the demo's docs quote a run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_demo_names_the_timestamp_break_and_prices_both_runs(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "cache_break_demo.py"), "--rules", "8", "--keep", str(db)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [
        line.split()
        for line in done.stdout.splitlines()
        if re.match(r"^(\S.*?)?\s+[0-2]\s+(first|append|system_changed)\s", line)
    ]
    causes = [next(w for w in row if w in ("first", "append", "system_changed")) for row in rows]
    assert causes == ["first", "system_changed", "system_changed", "first", "append", "append"], done.stdout
    assert len(re.findall(r"system_changed\s+msg#0 @\d+", done.stdout)) == 2, done.stdout
    for row in rows:
        spent, lost = float(row[-2]), float(row[-1])
        assert spent > 0 and lost >= 0
        assert float(row[-3].replace(",", "")) >= 0  # the prefill time, measured
    lost_by_run = re.findall(r"session (px-\w+)\s+[\d,]+\s+([\d.]+)\s+([\d.]+)", done.stdout)
    assert len(lost_by_run) == 2 and float(lost_by_run[0][2]) > 0 and float(lost_by_run[1][2]) == 0
    assert db.exists() and f"--db {db}" in done.stdout
