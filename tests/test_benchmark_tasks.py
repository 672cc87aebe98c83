"""The generated benchmark tasks are right by construction: answers recomputed from the logs,
covering status bars hold the answer, uncovered ones do not, noisy ones are 10% wrong."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import context_distillation as cd
import kv_cache_patterns as kv


def est(text: str) -> int:
    return len(text) // 4


@pytest.mark.parametrize("seed", range(8))
def test_counting_answer_matches_log_and_status(seed):
    t = cd.make_task("counting", seed, 1000, est)
    size, color, animal = re.match(r"How many (\w+) (\w+) (\w+)s", t.question).groups()
    assert t.answer == t.log.count(f": {size} {color} {animal}\n") + t.log.endswith(f": {size} {color} {animal}")
    assert t.status[f"count.{size}_{color}_{animal}"] == str(t.answer)
    assert not any(k.count("_") == 2 for k in t.uncovered)  # pairs only: the triple is not covered
    wrong = sum(t.status[k] != t.noisy[k] for k in t.status)
    assert wrong == max(1, round(len(t.status) * 0.1))


@pytest.mark.parametrize("seed", range(8))
def test_state_tracking_answer_is_last_move(seed):
    t = cd.make_task("state_tracking", seed, 1000, est)
    item = re.match(r"Where is the (.+) now", t.question).group(1)
    last = [ln for ln in t.log.splitlines() if f"the {item} " in ln][-1]
    assert last.rsplit(" ", 1)[-1] == t.answer
    assert t.status[f"location.{item.replace(' ', '_')}"] == t.answer


@pytest.mark.parametrize("seed", range(8))
def test_limit_rule_answer_and_status_agree(seed):
    t = cd.make_task("limit_rule", seed, 1000, est)
    m, d = re.search(r"May I call (\w+) (\w+) again", t.question).groups()
    n = t.log.count(f"phoned {m} {d},")
    assert t.answer == ("yes" if n < cd.LIMIT else "no")
    assert t.status[f"calls.{m}_{d}"].startswith(f"{n}/{cd.LIMIT}")
    assert f"calls.{m}_{d}" not in t.uncovered


def test_task_sizes_near_target():
    for kind in cd.KINDS:
        t = cd.make_task(kind, 1, 2000, est)
        assert 1600 <= est(t.log) <= 2400


def test_kv_modes_render_as_described():
    import random

    from ctxwright.core.messages import Message, ToolCall

    reg = kv.build_tools()
    hist = [Message(role="user", content=kv.QUESTION)]
    for i in range(4):
        tc = ToolCall(f"c{i}", "find_order", '{"order_id":"A-1042"}')
        hist += [Message(role="assistant", tool_calls=(tc,)), Message(role="tool", tool_call_id=tc.id, content="x")]
    rng = random.Random(0)
    base, tools = kv.render("correct", hist, reg.specs(), 3, rng)
    assert base[1:] == tuple(hist) and tools == reg.specs()
    timed, _ = kv.render("dynamic_system_time", hist, reg.specs(), 3, rng)
    assert timed[0].content.startswith("Current time:")
    window, _ = kv.render("sliding_window", hist, reg.specs(), 3, rng)
    assert window[1].role != "tool" and len(window) - 1 <= kv.WINDOW
    text, _ = kv.render("text_format", hist, reg.specs(), 3, rng)
    assert len(text) == 2 and text[1].content.startswith("USER: ")
    shuffled = {kv.render("shuffled_tools", hist, reg.specs(), i, rng)[1] for i in range(6)}
    assert len(shuffled) > 1
    # the chain's tools answer only the right arguments
    from ctxwright.backends.scripted import call

    assert reg.execute(call("get_customer", {"customer_id": "C-77812"})).ok
    assert not reg.execute(call("get_customer", {"customer_id": "C-1"})).ok


@pytest.mark.parametrize("kind", cd.KINDS)
def test_questions_share_one_log_and_stay_right(kind):
    tasks = cd.make_tasks(kind, 3, 1000, est, questions=5)
    assert len(tasks) == 5 and len({t.log for t in tasks}) == 1
    assert len({t.question for t in tasks}) == 5  # distinct questions over one log
    for t in tasks:
        if kind == "limit_rule":
            m, d = re.search(r"May I call (\w+) (\w+) again", t.question).groups()
            n = t.log.count(f"phoned {m} {d},")
            assert t.answer == ("yes" if n < cd.LIMIT else "no") and 1 <= n <= 4
        elif kind == "counting":
            size, color, animal = re.match(r"How many (\w+) (\w+) (\w+)s", t.question).groups()
            assert t.status[f"count.{size}_{color}_{animal}"] == str(t.answer)
        else:
            item = re.match(r"Where is the (.+) now", t.question).group(1)
            assert t.status[f"location.{item.replace(' ', '_')}"] == t.answer


def test_compression_corpus_facts_and_a_scripted_run():
    import argparse
    import json as _json

    import compression as cb
    from ctxwright.backends.scripted import ScriptedBackend, call
    from ctxwright.core.messages import Message
    from ctxwright.core.tokens import TokenCounter, estimate_tokens

    corpus = cb.make_corpus(1, 3, (5_000, 8_000))
    assert len(corpus["people"]) == 3 and all(5_000 <= len(p["text"]) <= 9_000 for p in corpus["pages"].values())
    for person, prof, news in corpus["plan"]:
        f = corpus["facts"][person]
        assert f"joined {f['company']} as {f['role']}" in corpus["pages"][prof]["text"]
        assert str(f["year"]) in corpus["pages"][news]["text"]

    def model(req):
        last = req.messages[-1]
        q = last.content or ""
        if [t.name for t in req.tools] == ["recall"]:  # the recall arm's turn: ask for the founder
            who = q[len("Where does ") : q.index(" work now")]
            return Message(role="assistant", tool_calls=(call("recall", {"query": who}, "r1"),))
        if last.role == "tool":  # answer from the passages recall returned, as a reader would
            asked = req.messages[-3].content or ""
            who = asked[len("Where does ") : asked.index(" work now")]
            joined = re.findall(rf"{who} (?:has joined|left .+? and joined) (.+?) as", q)
            return _json.dumps({"answer": joined[0] if joined else "nowhere"})
        if q.startswith("Where does"):
            who = q[len("Where does ") : q.index(" work now")]
            return _json.dumps({"answer": corpus["facts"][who]["company"]})
        return "summary"

    args = argparse.Namespace(window=8192, summary_input=500, summary_tokens=80, summary_timeout=30, recall=True)
    count = TokenCounter(estimate_tokens, "estimate")
    backend = ScriptedBackend([model])
    ext = cb.run_one("extractive", corpus, backend, args, count)
    assert ext["fact_retention"] == 1.0 and ext["answer_accuracy"] == 1.0 and ext["llm_calls"] == 0
    # the recall arm: each founder's news page was hidden, recall brings its sentence back
    assert ext["recall_found"] == 1.0 and ext["recall_accuracy"] == 1.0
    assert ext["compressions"] >= 6
    base = cb.run_one("none", corpus, backend, args, count, unlimited=True)
    assert base["prompt_tokens"] > 2 * ext["prompt_tokens"]
