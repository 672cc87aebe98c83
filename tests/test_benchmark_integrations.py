"""``benchmarks/integrations.py`` in its quick form: each framework, with and without the
adapter's compaction, through the scripted server; the JSON holds what the table shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.slow
def test_the_quick_benchmark_measures_every_framework_both_ways(tmp_path: Path) -> None:
    out = tmp_path / "integrations.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "integrations.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    rows = {(r["framework"], r["arm"]): r for r in data["results"]}
    assert set(rows) == {(f, a) for f in ("openai-agents", "pydantic-ai", "langchain") for a in ("plain", "compaction")}
    for (framework, arm), r in rows.items():
        assert r["calls"] == data["rounds"] + 1 and r["rejected"] == 0 and r["statuses"] == [200], (framework, arm)
        assert len(r["prompt_tokens_per_call"]) == r["calls"]
        if arm == "plain":
            assert r["prefix_breaks"] == 0 and r["causes"] == ["first"] + ["append"] * (r["calls"] - 1)
        else:  # compaction: fewer tokens sent, a break exactly where it compacted
            plain = rows[(framework, "plain")]
            assert 1 <= r["compactions"] == r["prefix_breaks"]
            assert r["prompt_tokens_total"] < plain["prompt_tokens_total"]
            assert r["prompt_tokens_last"] < plain["prompt_tokens_last"]
