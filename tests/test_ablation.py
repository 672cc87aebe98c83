"""Prompt ablation (``ctxwright.ablation``, ``ctxwright ablate``): sections cut from the prompt's
own bytes, arms, code scoring, the Wilson interval, the tasks file and its errors, the shipped
customer-service domain, and the command end to end -- on a loopback model that follows exactly
the sections it is shown, and (slow) on the embedded model."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwright.ablation import (
    ActualCall,
    Runner,
    load_tasks,
    make_arms,
    parse_task,
    run_ablation,
    score,
    split_builder,
    split_markdown,
    wilson,
)
from ctxwright.ablation.env import load_factory, make_environment
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.cli.main import main
from ctxwright.core.messages import Message
from ctxwright.core.sections import SystemPromptBuilder
from ctxwright.errors import AblationInputError, BackendError, DynamicSectionInPrefix
from fakeserver import FakeOpenAIServer as F

DOMAIN = Path(__file__).resolve().parents[1] / "benchmarks" / "support_domain"
POLICY = DOMAIN / "policy.md"
TASKS = DOMAIN / "tasks.jsonl"

PROMPT = """# Support agent
You help customers.

## Refunds
Refund within 30 days.

```text
## not a heading: inside a fence
```

### Details
Reason codes: damaged.

## Tone
Be brief.
"""


# -- sections and arms -----------------------------------------------------------------------


def test_markdown_sections_are_the_prompts_own_bytes():
    p = split_markdown(PROMPT)
    assert p.names() == ["Refunds", "Tone"]  # the level that occurs twice; '###' and the fence stay inside
    assert p.preamble == "# Support agent\nYou help customers.\n\n"
    assert p.render() == PROMPT
    without = p.render(without="refunds")  # names are matched without case
    assert "Refund within" not in without and "Reason codes" not in without and "not a heading" not in without
    assert without == PROMPT.replace(p.section("Refunds").text, "")
    assert p.render(without="Tone") == PROMPT[: PROMPT.index("## Tone")]


def test_duplicate_headings_get_their_own_names():
    p = split_markdown("## Rules\na\n## Rules\nb\n")
    assert p.names() == ["Rules", "Rules (2)"]
    assert p.render(without="Rules (2)") == "## Rules\na\n"


@pytest.mark.parametrize("text", ["Just one paragraph, no heading.", "```\n# inside a fence\n```\n", "Title\n=====\n"])
def test_a_prompt_without_headings_is_refused(text):
    with pytest.raises(AblationInputError, match="no Markdown headings"):
        split_markdown(text)


_title = st.text(alphabet="abcdefghij XYZ", min_size=1, max_size=12).filter(lambda s: s.strip())
_body = st.text(alphabet="abc .,\n-*", max_size=40).map(lambda s: s.replace("\n#", "\n"))


@given(st.lists(st.tuples(_title, _body), min_size=1, max_size=8), _body)
def test_every_arm_is_the_prompt_minus_exactly_one_section(parts, preamble):
    preamble = preamble.lstrip("#")
    text = preamble + "".join(f"\n## {t}\n{b}\n" for t, b in parts)
    p = split_markdown(text)
    assert p.render() == text
    assert len(p.sections) == len(parts)
    for s in p.sections:
        assert len(p.render(without=s.name)) == len(text) - len(s.text)
    arms = make_arms(p)
    assert [a.name for a in arms] == ["full", *(f"without {n}" for n in p.names())]
    assert len({a.system for a in arms[1:]}) >= 1 and arms[0].system == text


def test_builder_sections_build_the_same_prompt():
    b = SystemPromptBuilder().add("role", "You are support.").add("refunds", "Refund within 30 days.")
    b.add("beta", "Beta rules.", condition="beta_user").add("user", "The user is Ana.", scope="session")
    p = split_builder(b)
    assert p.names() == ["role", "refunds", "user"]  # a conditional section is not in the built prompt
    assert p.render() == b.build()
    assert p.render(without="refunds") == "You are support.\n\nThe user is Ana."
    with pytest.raises(DynamicSectionInPrefix):
        split_builder(SystemPromptBuilder().add("clock", "12:00", scope="dynamic"))


def test_arms_only_and_empty_and_unknown_section():
    p = split_markdown(PROMPT)
    arms = make_arms(p, ["tone", "Tone"], empty=True)
    assert [(a.name, a.removed) for a in arms] == [("full", None), ("without Tone", "Tone"), ("empty", None)]
    assert arms[-1].system == ""
    with pytest.raises(AblationInputError, match=r"no section 'Shipping'.*'Refunds', 'Tone'"):
        make_arms(p, ["Shipping"])


# -- the Wilson interval ---------------------------------------------------------------------


def test_wilson_known_values():
    lo, hi = wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    assert wilson(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson(3, 2)


@given(st.integers(min_value=1, max_value=5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_brackets_the_rate_and_is_symmetric(kn):
    k, n = kn
    lo, hi = wilson(k, n)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert lo < hi
    lo2, hi2 = wilson(n - k, n)
    assert math.isclose(lo, 1 - hi2, abs_tol=1e-12) and math.isclose(hi, 1 - lo2, abs_tol=1e-12)


# -- scoring ---------------------------------------------------------------------------------


def _task(**kw):
    return parse_task({"id": "t", "prompt": "p", **kw}, "tasks.jsonl:1")


def test_calls_match_as_a_subset_without_case_or_number_form():
    t = _task(
        expected_calls=[{"name": "refund_order", "arguments": {"order_id": "A1003", "reason": "damaged", "n": 2}}],
        forbidden_calls=["cancel_order"],
    )
    ok = score(t, [ActualCall("refund_order", {"order_id": " a1003", "reason": "DAMAGED", "n": 2.0, "x": 1})], None, "")
    assert ok.success and ok.calls_ok and ok.matched_calls == 1
    wrong = score(t, [ActualCall("refund_order", {"order_id": "A1003", "reason": "changed_mind", "n": 2})], None, "")
    assert not wrong.success and "matched 0 of 1" in wrong.problems[0]
    forbidden = score(
        t,
        [ActualCall("refund_order", {"order_id": "A1003", "reason": "damaged", "n": 2}), ActualCall("cancel_order")],
        None,
        "",
    )
    assert not forbidden.success and forbidden.problems == ("called forbidden cancel_order",)
    assert score(_task(expected_answer=["x"]), [], None, "x").calls_ok is None  # no call check


def test_each_expected_call_needs_its_own_call_and_bools_are_not_numbers():
    t = _task(expected_calls=[{"name": "get_order", "arguments": {"order_id": "A1"}}, {"name": "get_order"}])
    one = score(t, [ActualCall("get_order", {"order_id": "A1"})], None, None)
    assert one.matched_calls == 1 and not one.success
    two = score(t, [ActualCall("get_order", {}), ActualCall("get_order", {"order_id": "A1"})], None, None)
    assert two.matched_calls == 2 and two.success  # the strict expectation gets the matching call
    flag = _task(expected_calls=[{"name": "f", "arguments": {"on": True}}])
    assert not score(flag, [ActualCall("f", {"on": 1})], None, None).success


def test_state_paths_and_answer_substrings():
    t = parse_task(
        {
            "id": "t",
            "prompt": "p",
            "env": "x.py:f",
            "expected_state": {"orders.A1.status": "refunded", "tickets.0.order_id": "A1"},
            "expected_answer": ["A1", "anything else"],
        },
        "f:1",
    )
    state = {"orders": {"A1": {"status": "Refunded"}}, "tickets": [{"order_id": "a1"}]}
    s = score(t, [], state, "Order A1 is refunded. Anything else I can help with?")
    assert s.success and s.state_ok and s.answer_ok and s.calls_ok is None
    bad = score(t, [], {"orders": {"A1": {"status": "delivered"}}, "tickets": []}, "done")
    assert not bad.success and not bad.state_ok and not bad.answer_ok
    assert 'state orders.A1.status is "delivered", not "refunded"' in bad.problems
    assert "state tickets.0.order_id is missing" in " ".join(bad.problems)
    assert "answer lacks 'A1', 'anything else'" in bad.problems
    assert not score(t, [], state, None).answer_ok  # no final answer at all


# -- the tasks file --------------------------------------------------------------------------


def _write(tmp_path, *lines):
    p = tmp_path / "tasks.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"tasks.jsonl:2: not JSON"),
        ("[" * 100_000, r"tasks.jsonl:2: nested too deeply"),
        ("[1, 2]", r"tasks.jsonl:2: expected a JSON object"),
        ('{"id": "b", "prompt": "p", "expected_answer": ["x"], "colour": 1}', "unknown key"),
        ('{"id": "b", "expected_answer": ["x"]}', 'needs a "prompt"'),
        ('{"id": "b", "prompt": "p"}', "checks nothing"),
        ('{"id": "b", "prompt": "p", "expected_state": {"a.b": 1}}', "names no env"),
        ('{"id": "b", "prompt": "p", "expected_calls": [{"name": "f", "arguments": 3}]}', "arguments must be"),
        ('{"id": "a", "prompt": "p", "expected_answer": ["x"]}', "used again"),
    ],
)
def test_bad_task_lines_name_file_and_line(tmp_path, line, message):
    p = _write(tmp_path, '{"id": "a", "prompt": "p", "expected_answer": ["x"]}', line)
    with pytest.raises(AblationInputError, match=message) as exc:
        load_tasks(p)
    assert "tasks.jsonl:2" in str(exc.value)


def test_tasks_file_bounds(tmp_path, monkeypatch):
    with pytest.raises(AblationInputError, match="no such file"):
        load_tasks(tmp_path / "missing.jsonl")
    with pytest.raises(AblationInputError, match="no task in the file"):
        load_tasks(_write(tmp_path, "", "// a comment"))
    import ctxwright.ablation.tasks as tasks_mod

    monkeypatch.setattr(tasks_mod, "MAX_FILE_BYTES", 10)
    with pytest.raises(AblationInputError, match="more than 10"):
        load_tasks(_write(tmp_path, '{"id": "a", "prompt": "p", "expected_answer": ["x"]}'))


# -- the shipped domain ----------------------------------------------------------------------


def _domain():
    tasks = load_tasks(TASKS)
    return tasks, load_factory(tasks[0].env or "", base=tasks[0].base)


def test_the_domain_has_20_to_30_tasks_over_every_section():
    tasks, _ = _domain()
    assert 20 <= len(tasks) <= 30
    sections = split_markdown(POLICY.read_text(encoding="utf-8")).names()
    assert 5 <= len(sections) <= 7
    covered = {t.note.split(":")[0] for t in tasks}
    assert covered >= set(sections) - {"Role"}, covered
    assert {c for t in tasks for c in t.checks()} == {"calls", "state", "answer"}


def test_every_environment_is_fresh_and_deterministic():
    _, factory = _domain()
    a = make_environment(factory, "domain")
    b = make_environment(factory, "domain")
    refund = next(t for t in a.tools if t.__name__ == "refund_order")
    assert refund("A1003", "damaged")["status"] == "refunded"
    assert a.state()["orders"]["A1003"]["status"] == "refunded"
    assert b.state()["orders"]["A1003"]["status"] == "delivered"  # another run's shop is untouched
    assert b.state() == make_environment(factory, "domain").state()


def test_every_task_is_passed_by_its_own_expected_calls_and_failed_by_forbidden_ones():
    """The tasks are consistent with the tools: doing exactly the expected calls on a fresh shop
    reaches the expected state; a forbidden call breaks the task."""
    tasks, factory = _domain()
    for t in tasks:
        env = make_environment(factory, "domain")
        tools = {f.__name__: f for f in env.tools}
        made = []
        for c in t.expected_calls:
            tools[c.name](**{**dict.fromkeys(_params(tools[c.name]), "x"), **c.arguments})
            made.append(ActualCall(c.name, dict(c.arguments)))
        answer = " ".join(t.expected_answer)
        s = score(t, made, env.state(), answer)
        assert s.success, (t.id, s.problems)
        if t.forbidden_calls:
            env2 = make_environment(factory, "domain")
            order = re.search(r"A1\d{3}", t.prompt)
            assert order is not None
            bad = t.forbidden_calls[0]
            args = {p: order.group(0) if p == "order_id" else "changed_mind" for p in _params(tools[bad])}
            next(f for f in env2.tools if f.__name__ == bad)(**args)
            s2 = score(t, [ActualCall(bad, args)], env2.state(), answer)
            assert not s2.success and s2.state_ok is False, t.id


def _params(f):
    import inspect

    return set(inspect.signature(f).parameters)


# -- the runner on a scripted model ----------------------------------------------------------


def test_a_first_model_failure_stops_the_ablation():
    tasks, _ = _domain()
    runner = Runner(backend=ScriptedBackend([BackendError("connection refused")]))
    arms = make_arms(split_markdown(POLICY.read_text(encoding="utf-8")), ["Refunds"])
    with pytest.raises(BackendError, match="connection refused"):
        run_ablation(runner, arms, tasks[:2])


def test_runs_are_scored_and_the_state_is_fresh_per_run():
    tasks = [t for t in load_tasks(TASKS) if t.id in ("refund-damaged", "cancel-processing")]
    backend = ScriptedBackend(
        [
            Message(role="assistant", tool_calls=(call("refund_order", {"order_id": "A1003", "reason": "damaged"}),)),
            "Refunded A1003.",
            Message(role="assistant", tool_calls=(call("refund_order", {"order_id": "A1003", "reason": "damaged"}),)),
            "Refunded A1003.",  # the wrong action for the cancel task
        ]
    )
    arms = make_arms(split_markdown(POLICY.read_text(encoding="utf-8")), ["Refunds"])[:1]
    result = run_ablation(Runner({"tool_choice_first": "auto"}, backend=backend), arms, tasks)
    first, second = result.runs
    assert first.success and first.state_ok and first.calls == ("refund_order(order_id='A1003', reason='damaged')",)
    assert not second.success and second.state_ok is False  # the refund above did not carry over
    (arm,) = result.arms
    assert (arm.runs, arm.successes, arm.call_accuracy) == (2, 1, 0.5)
    assert (arm.low, arm.high) == wilson(1, 2)


# -- the command -----------------------------------------------------------------------------


def _oracle(tasks):
    """A model that follows exactly the sections it is shown: for a task whose section (its
    note's first word) is in the system prompt it makes the expected calls and answers with the
    expected words; without that section it makes the forbidden call, or none, and answers vaguely."""
    by_prompt = {t.prompt: t for t in tasks}

    def reply(body):
        msgs = body["messages"]
        system = msgs[0]["content"] if msgs[0]["role"] == "system" else ""
        user = next(m["content"] for m in msgs if m["role"] == "user" and m["content"] in by_prompt)
        t = by_prompt[user]
        knows = f"## {t.note.split(':')[0]}" in system
        words = (" ".join(t.expected_answer) or "Done.") if knows else "Sorry, I am not sure."
        if msgs[-1]["role"] != "user":
            return F.reply_text(words)
        params = {tool["function"]["name"]: tool["function"]["parameters"] for tool in body.get("tools", [])}

        def full(name, args):  # every required argument, as a real model would fill them
            return json.dumps({**dict.fromkeys(params[name].get("required", []), "x"), **args})

        if knows:
            calls = [(f"c{i}", c.name, full(c.name, c.arguments)) for i, c in enumerate(t.expected_calls)]
        elif t.forbidden_calls:
            order = re.search(r"A1\d{3}", t.prompt)
            calls = [("c0", t.forbidden_calls[0], full(t.forbidden_calls[0], {"order_id": order.group(0)}))]
        else:
            calls = []
        return F.reply_tool_calls(calls) if calls else F.reply_text(words)

    return reply


def _ablate(*args):
    return main(["ablate", "--system", str(POLICY), "--tasks", str(TASKS), *args])


def test_ablate_runs_the_shipped_domain_end_to_end_with_every_arm_scored(tmp_path, capsys):
    tasks = load_tasks(TASKS)
    out = tmp_path / "ablation.json"
    with F(fallback=_oracle(tasks)) as srv:
        rc = _ablate(
            "--base-url",
            srv.url,
            "--model",
            "oracle",
            "--no-todo",
            "--no-delegate",
            "--no-read-result",
            "--no-status",
            "--json",
            str(out),
        )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(out.read_text(encoding="utf-8"))
    sections = split_markdown(POLICY.read_text(encoding="utf-8")).names()
    assert [a["arm"] for a in data["arms"]] == ["full", *(f"without {s}" for s in sections)]
    assert len(data["runs"]) == len(data["arms"]) * len(tasks)
    rates = {a["arm"]: (a["successes"], a["runs"]) for a in data["arms"]}
    assert rates["full"] == (len(tasks), len(tasks))
    for s in sections:  # each arm fails exactly the tasks of the section it removed
        failed = {r["task"] for r in data["runs"] if r["arm"] == f"without {s}" and not r["success"]}
        assert failed == {t.id for t in tasks if t.note.split(":")[0] == s}, s
    assert rates["without Refunds"][0] < len(tasks) and rates["without Role"] == rates["full"]
    assert "prompt ablation" in captured.out and "without Refunds" in captured.out
    assert re.search(r"full\s+│\s+24\s+│\s+24/24 100%", captured.out)
    assert data["complete"] is True and data["runs_done"] == data["runs_total"] == len(data["runs"])
    lines = [x for x in captured.err.splitlines() if x.startswith("[")]
    assert len(lines) == len(data["runs"])
    assert all(re.search(r"about [\d h]+ (s|min) left", x) for x in lines[:-1]) and "left" not in lines[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tasks", "nowhere.jsonl"], "--tasks nowhere.jsonl: no such file"),
        (["--trials", "0"], "--trials 0: give 1 to"),
        (["--only", "Shipping"], "no section 'Shipping'"),
        (["--limit", "0"], "--limit 0"),
    ],
)
def test_ablate_input_errors_are_one_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["ablate", "--system", str(POLICY), "--tasks", str(TASKS), *args, "--list"])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_ablate_refuses_a_prompt_without_sections_and_a_malformed_task_file(tmp_path, capsys):
    flat = tmp_path / "flat.md"
    flat.write_text("You are a support agent. Be kind.\n", encoding="utf-8")
    assert main(["ablate", "--system", str(flat), "--tasks", str(TASKS), "--list"]) == 2
    err = capsys.readouterr().err
    assert "has no Markdown headings" in err and "Traceback" not in err
    bad = _write(tmp_path, '{"id": "a", "prompt": "p", "expected_answer": ["x"]}', '{"id": "b", "prompt": ')
    assert main(["ablate", "--system", str(POLICY), "--tasks", str(bad), "--list"]) == 2
    err = capsys.readouterr().err
    assert "tasks.jsonl:2: not JSON" in err and len(err.strip().splitlines()) == 1
    assert main(["ablate", "--tasks", str(TASKS), "--list"]) == 2
    assert "give the prompt to ablate once" in capsys.readouterr().err


def test_ablate_list_shows_the_arms(capsys):
    assert _ablate("--list", "--empty", "--only", "refunds") == 0
    out = capsys.readouterr().out
    assert "6 section(s) (markdown), 24 task(s)" in out
    assert re.findall(r"^  (\S.*?)  \(", out, re.M) == ["full", "without Refunds", "empty"]


@pytest.mark.slow
def test_ablate_on_the_embedded_model(tmp_path, capsys):
    out = tmp_path / "a.json"
    # One task, two model calls per run, short answers: what is tested is that the arms run on the
    # real model and the section leaves the prompt, not how well a 135M model serves customers
    # (benchmarks/ablation measures that); unbounded, this one test took half an hour on a loaded CI box.
    small = ("--limit", "1", "--max-iterations", "2", "--max-tokens", "48")
    assert _ablate(*small, "--only", "Refunds", "--json", str(out), "--quiet") == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["backend"] == "embedded" and [a["arm"] for a in data["arms"]] == ["full", "without Refunds"]
    assert len(data["runs"]) == 2 and all(isinstance(r["success"], bool) for r in data["runs"])
    assert all(r["stop_reason"] != "backend_error" and r["prompt_tokens"] for r in data["runs"])
    full, without = data["arms"]
    assert full["prompt_tokens"] > without["prompt_tokens"] + 50  # the section's tokens left the prompt


# -- a stopped ablation keeps what it did --------------------------------------------------------

ORACLE_FLAGS = ["--model", "oracle", "--no-todo", "--no-delegate", "--no-read-result", "--no-status"]
ARMS3 = ["--limit", "3", "--only", "Refunds", "--only", "Answer format"]  # 3 arms x 3 tasks = 9 runs


def _read(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):  # not written yet (a half-written file never exists)
        return None


@pytest.mark.slow
def test_a_killed_ablation_leaves_its_runs_and_resumes_where_it_stopped(tmp_path, capsys):
    """``ctxwright ablate --json`` as a subprocess, killed with SIGKILL once its first arm is in the
    file: the file is whole JSON with every run so far and the first arm's summary, marked
    incomplete; the same command refuses to overwrite it, and with ``--resume`` makes only the
    missing runs and completes the file."""
    import dataclasses
    import os
    import signal
    import subprocess
    import sys
    import time

    tasks = load_tasks(TASKS, limit=3)
    oracle = _oracle(tasks)
    out = tmp_path / "ablation.json"
    args = ["ablate", "--system", str(POLICY), "--tasks", str(TASKS), *ARMS3, *ORACLE_FLAGS, "--json", str(out)]
    with F(fallback=lambda body: dataclasses.replace(oracle(body), delay_s=0.3)) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxwright", *args, "--base-url", srv.url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        try:
            deadline = time.monotonic() + 300
            while (data := _read(out)) is None or not data["arms"]:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the first arm was never written"
                time.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait(timeout=30)
            err = proc.stderr.read() if proc.stderr else ""
        assert "about" in err and "left" in err  # the estimate of the time remaining, after the first run
        stopped = _read(out)
        assert stopped is not None and stopped["complete"] is False and stopped["runs_total"] == 9
        assert [a["arm"] for a in stopped["arms"]] == ["full"] and stopped["arms"][0]["runs"] == 3
        assert 3 <= stopped["runs_done"] == len(stopped["runs"]) < 9
        assert [(r["arm"], r["task"]) for r in stopped["runs"][:3]] == [("full", t.id) for t in tasks]
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no half-written file

        # the same command without --resume refuses to overwrite the stopped one
        capsys.readouterr()
        assert main([*args, "--base-url", srv.url]) == 2
        assert "add --resume to continue it" in capsys.readouterr().err
        assert _read(out) == stopped

        before = len(srv.requests)
        assert main([*args, "--base-url", srv.url, "--resume"]) == 0
        made = len(srv.requests) - before
    done = _read(out)
    assert done["complete"] is True and done["runs_done"] == 9
    assert [a["arm"] for a in done["arms"]] == ["full", "without Refunds", "without Answer format"]
    assert done["runs"][: stopped["runs_done"]] == stopped["runs"]  # kept as they were, not made again
    assert sorted((r["arm"], r["task"]) for r in done["runs"]) == sorted(
        (a, t.id) for a in ("full", "without Refunds", "without Answer format") for t in tasks
    )
    assert 0 < made <= 3 * (9 - stopped["runs_done"])  # at most a few model calls per missing run


def test_resume_refuses_another_plan_and_needs_json(tmp_path, capsys):
    out = tmp_path / "a.json"
    out.write_text(json.dumps({"complete": False, "runs_done": 1, "runs_total": 9, "plan": {"model": "x"}}))
    with F(fallback=_oracle(load_tasks(TASKS))) as srv:
        base = ["ablate", "--system", str(POLICY), "--tasks", str(TASKS), *ARMS3, "--base-url", srv.url, *ORACLE_FLAGS]
        assert main([*base, "--json", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert "its backend differ from this command's" in err and len(err.strip().splitlines()) == 1
        assert main([*base, "--resume"]) == 2
        assert "give --json PATH too" in capsys.readouterr().err
    assert srv.requests == []  # refused before any model call


def test_the_checkpoint_writes_at_arm_ends_and_at_most_every_interval(tmp_path):
    from ctxwright.ablation import AblationResult
    from ctxwright.ablation.results import Checkpoint

    out = tmp_path / "a.json"
    built = []

    def so_far():
        built.append(1)
        return AblationResult(arms=[], runs=[], tasks=1, trials=1, complete=False, runs_total=5)

    cp = Checkpoint(out, min_interval_s=3600)
    cp(so_far, False)
    cp(so_far, False)
    assert cp.writes == 0 and not out.exists() and built == []  # inside the interval: nothing built or written
    cp(so_far, True)  # an arm ended
    assert cp.writes == 1 and json.loads(out.read_text())["complete"] is False
    cp.flush()
    assert cp.writes == 1  # nothing new since
    cp(so_far, False)
    cp.flush()  # a stop: the latest state, whatever the time
    assert cp.writes == 2 and len(built) == 2


def test_duration_reads_as_a_wait():
    from ctxwright.cli.ablate import duration

    assert [duration(s) for s in (0.4, 40, 89, 90, 725, 3599, 3600, 4 * 3600 + 5 * 60)] == [
        "0 s",
        "40 s",
        "89 s",
        "2 min",
        "12 min",
        "1 h 00 min",
        "1 h 00 min",
        "4 h 05 min",
    ]
