"""``benchmarks/compression_facts.py`` in its quick form: every arm is in the table and the JSON,
and the arm that sends every result whole shows the model every planted fact -- the check that
the facts are really planted where the upstream can see them, so the other arms' counts mean
something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_the_quick_benchmark_measures_every_arm_and_direct_sees_every_fact(tmp_path: Path) -> None:
    out = tmp_path / "compression_facts.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compression_facts.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    arms = data["arms"]
    assert set(arms) == {"direct", "Context 32K", "Context 128K", "proxy --compress", "headroom"}
    for name in arms:
        assert name in done.stdout, name
    assert data["facts"] >= 30 and len(data["facts_planted"]) == data["facts"]
    assert {f["where"] for f in data["facts_planted"]} == {"start", "middle", "end"}
    direct = arms["direct"]
    assert direct["complete"] and direct["requests"] == data["tool_calls"] + 1
    assert direct["facts_seen"] == direct["facts_in_last_request"] == data["facts"], direct["facts_not_seen"]
    assert direct["prefix_breaks"] == 0 and direct["cost_vs_direct"] == 1.0
    for name in ("Context 32K", "Context 128K"):  # ctxwright's own arms always run
        a = arms[name]
        assert a["available"] and a["complete"], name
        assert a["tokens_per_call"] < direct["tokens_per_call"], name
        assert 0 <= a["facts_seen"] <= data["facts"] and a["facts_retrievable"] >= a["facts_in_last_request"]
    for a in arms.values():  # an arm that did not run says why instead of showing numbers
        assert a["available"] or a["why"]
