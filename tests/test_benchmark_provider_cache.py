"""``benchmarks/provider_cache.py --quick`` runs end to end on the loopback simulators and
writes every provider x arm, and the rules it measures hold: ctxwright's choice costs less than
sending no cache hints, and on Anthropic ctxwright's placement reads more than one breakpoint
after the system prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # 13 sessions of 20 calls: ~10 s idle, up to ~30 s on a loaded 2-core machine
def test_the_quick_benchmark_covers_every_arm_and_ctxwright_costs_less_than_none(tmp_path: Path) -> None:
    out = tmp_path / "provider_cache.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "provider_cache.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "anthropic: a 20-call session" in proc.stdout and "openai-responses: a 20-call session" in proc.stdout
    data = json.loads(out.read_text())
    assert data["calls"] == 20 and data["gaps_min"] == [1.0, 6.0, 70.0] and "ceil" in data["token_rule"]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from provider_cache import arms

    expected = {(a.provider, a.name if a.provider == "anthropic" else f"{a.model}: {a.name}") for a in arms()}
    got = {(p, name) for p, v in data["providers"].items() for name in v["arms"]}
    assert got == expected
    for provider, v in data["providers"].items():
        rows = v["arms"]
        for name, e in rows.items():
            # every request valid for the provider's rules (the simulators refuse the rest), 20 real calls
            assert e["refused"] == 0 and e["calls"] == 20, (provider, name)
            assert e["cache_read"] + e["cache_write"] + e["uncached"] == e["prompt_tokens"]
            assert e["max_breakpoints"] <= 4
        for model in {e["model"] for e in rows.values()}:
            same = [e for e in rows.values() if e["model"] == model]
            none = next(e for e in same if e["is_none"])
            for e in same:
                if e["ctxwright_choice"]:
                    assert e["cost_usd"] < none["cost_usd"], (provider, model, e["arm"])
                    assert e["hit_ratio"] > none["hit_ratio"]
    anthropic = data["providers"]["anthropic"]["arms"]
    assert anthropic["none"]["cache_read"] == 0
    # the 6- and 70-minute gaps outlive a 5m entry; keep-warm saves the 6-minute one
    assert anthropic["ctxwright, TTL 5m"]["expiries"] == 2
    assert anthropic["ctxwright, 5m + keep-warm"]["expiries"] == 1
    assert anthropic["ctxwright, 5m + keep-warm"]["keep_warm_refreshes"] >= 1
    assert anthropic["ctxwright, TTL 5m"]["cost_usd"] < anthropic["system breakpoint only, 5m"]["cost_usd"]
