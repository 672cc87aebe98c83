"""``benchmarks/attention.py``: the prompts of experiments 2-2 and 2-7 are what the tables
say they are, and one arm of each runs on the real model (the full run is the benchmark's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import attention as bench
from ctxwright.status.bar import STATUS_OPEN


def test_the_answer_section_moves_and_nothing_else_changes():
    prompts = {p: bench.handbook_request(0, p) for p in bench.POSITIONS}
    heads = [h for h, *_ in bench.SECTIONS]
    for position, (req, label, value) in prompts.items():
        system = req.messages[0].content or ""
        order = [line[2:] for line in system.splitlines() if line.startswith("# ")]
        assert sorted(order) == sorted(heads) and label == "system § Returns" and value == "45"
        assert order.index("Returns") == {"start": 0, "middle": 7, "end": 15}[position]
        assert system.count(" 45 ") == 1  # the value is written once, in its section
        assert req.messages[-1].content.startswith("How many days")


@pytest.mark.parametrize("arm", list(bench.ARMS))
def test_each_status_arm_counts_right_and_differs_only_in_its_last_message(arm):
    req, count, counted = bench.session_request(3, arm)
    base, _, _ = bench.session_request(3, "no_status")
    calls = [m for m in req.messages if m.role == "assistant"]
    assert len(calls) == 12 and sum(m.tool_calls[0].name == bench.COUNTED for m in calls) == count
    assert all(req.messages[i].role in ("assistant", "tool") for i in counted) and len(counted) == 2 * count
    if arm == "no_status":
        assert not any((m.content or "").startswith(STATUS_OPEN) for m in req.messages)
        return
    assert req.messages[:-1] == base.messages  # the shared prefix the reader reuses
    status = req.messages[-1].content or ""
    lines = status.splitlines()[1:-1]
    mine = [line for line in lines if bench.COUNTED in line]
    assert len(mine) == 1 and str(count) in mine[0]
    _, which = bench.ARMS[arm]
    assert len(lines) == (1 if which == "one" else len({m.tool_calls[0].name for m in calls}))
    if which == "first":
        assert lines[0] == mine[0]
    if which == "last":
        assert lines[-1] == mine[0]


@pytest.mark.slow
def test_one_status_scenario_on_the_real_model():
    from ctxwright.attention.capture import AttentionReader

    with AttentionReader() as reader:
        out = bench.run_status(reader, [0], tuple(range(15, 25)))
    for arm, r in out.items():
        assert 0 <= r["status_share"] <= 1 and 0 < r["turns_share"] < 1 and 0 < r["p_right"] < 1
        assert (r["status_tokens"] == 0) == (arm == "no_status")
        assert r["runs"][0]["top"]
