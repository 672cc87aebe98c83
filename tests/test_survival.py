"""The survival contract (``compaction/survival.py``): what ``CompactionConfig(keep=...)``
declares is checked after every compaction on a real agent loop (scripted backend, real tools,
real SQLite store) -- a constraint in an old user turn that trim dropped is reported lost, one
still in view kept, and where; ``ctxwright show --compactions`` prints it; and the gate's rule
``compaction_lost_item`` fails a run whose compaction drops a declared item from the request
and passes one that keeps it (the fixture pair under ``tests/fixtures/rules/``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.audit.rules import compaction_lost_item as rule
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.ci.judge import Tolerances, calls_of, judge, named_regressions
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction import survival as sv
from ctxwright.compaction.ledger import Seen, appears, visible_text
from ctxwright.compaction.summarizer import Summarizer
from ctxwright.core.events import BudgetRecord, CompactionEvent, TodoEvent, TodoItem
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.defence.marking import wrap
from ctxwright.recipe.resolve import compaction_from_dict, compaction_to_dict
from ctxwright.store.sessions import Store
from ctxwright.testing import gate
from ctxwright.tools.registry import ToolRegistry, tool

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "tests" / "fixtures" / "rules" / "compaction_lost_item"
COUNT = TokenCounter(estimate_tokens, "estimate")
FILLER = " ".join(["lorem ipsum dolor sit amet consectetur"] * 8)
ONCE = "Never edit setup.py."
REPEATED = "Always run make test before you answer."
KEEP = ["task", "constraints", "files", "errors"]


def A(*calls: ToolCall, text: str | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=tuple(calls))


def _run(store: Store, tmp_path: Path, keep: list[Any]) -> Session:
    """Three tasks in one session under a small window: the second gives two constraints, the
    third repeats one of them; trim drops the second task's turns."""
    reg = ToolRegistry()

    @tool
    def fetch(page: int) -> str:
        """Fetch a page of the runbook.

        Args:
            page: page number
        """
        return f"Page {page}. {FILLER}\n{FILLER}"

    reg.register(fetch)
    replies: list[Message | str] = []
    for r in range(3):
        replies += [A(call("fetch", {"page": i}, f"r{r}p{i}"), text=f"reading page {i}. {FILLER}") for i in range(5)]
        replies.append(f"done {r}")
    cfg = CompactionConfig(
        results_dir=tmp_path, window_tokens=2048, keep_recent_results=2, drop_unused=False, keep=keep
    )
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    agent = Agent(s, ScriptedBackend(replies), reg, AgentConfig(compaction=cfg, max_iterations=40), counter=COUNT)
    for task in ("Fix the failing parser test.", f"{ONCE} {REPEATED}", f"{REPEATED} Now read more pages."):
        assert agent.run(task).stop_reason == "final_answer"
    return s


def _items(s: Session) -> list[tuple[CompactionEvent, sv.Item]]:
    out = []
    for ev in s.events:
        if isinstance(ev, CompactionEvent):
            found = sv.read(ev.ledger)
            assert found is not None, f"compaction {ev.seq} recorded no survival check"
            out += [(ev, i) for i in found.items]
    return out


def test_a_constraint_dropped_by_trim_is_reported_lost_and_one_still_in_view_kept(store: Store, tmp_path: Path):
    s = _run(store, tmp_path, KEEP)
    items = _items(s)
    constraints = {(i.text, i.kept, i.where, ev.layer) for ev, i in items if i.kind == "constraints"}
    assert (ONCE, False, None, "trim") in constraints
    assert (REPEATED, True, "view", "trim") in constraints
    # the record tells the truth about the view the model was sent afterwards
    view = s.prefix.system_prompt + "\n" + visible_text(s.trajectory())
    assert not appears(ONCE, view) and appears(REPEATED, view)
    # the task is checked on every compaction, and ctxwright's tiers never cut it
    tasks = [i for _, i in items if i.kind == "task"]
    assert tasks and all(i.kept and i.text == "Fix the failing parser test." for i in tasks)
    trim = next(ev for ev, i in items if i.text == ONCE)
    found = sv.read(trim.ledger)
    assert found is not None and found.lost >= 1 and found.declared == tuple(KEEP)
    assert found.items[0].kept is False  # lost first
    assert s.events[found.items[0].seq or 0].message.content.startswith(ONCE)  # type: ignore[attr-defined]


def test_nothing_declared_records_nothing(store: Store, tmp_path: Path):
    s = _run(store, tmp_path, [])
    comps = [ev for ev in s.events if isinstance(ev, CompactionEvent)]
    assert comps and all("survival" not in (ev.ledger or {}) for ev in comps)


def test_show_compactions_prints_the_survival_check(tmp_path: Path):
    db = tmp_path / "s.db"
    store = Store(db)
    s = _run(store, tmp_path / "results", KEEP)
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    base = [sys.executable, "-m", "ctxwright", "--db", str(db), "show", s.id, "--compactions"]
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    comps = json.loads(done.stdout)["compactions"]
    lost = {(i["kind"], i["text"]) for c in comps for i in (c["survival"] or {}).get("items", []) if not i["kept"]}
    assert ("constraints", ONCE) in lost and ("constraints", REPEATED) not in lost
    text = subprocess.run(base, capture_output=True, text=True, env=env, timeout=120)
    assert text.returncode == 0, text.stderr
    assert "survival (task, constraints, files, errors):" in text.stdout
    assert f"LOST constraints: {ONCE!r}" in text.stdout and "nowhere in view" in text.stdout
    assert f"kept constraints: {REPEATED!r}" in text.stdout and "in the view" in text.stdout


def test_a_summary_that_quotes_a_constraint_keeps_it_in_the_note(tmp_path: Path):
    page = "Alice works at Helix Robotics. " + " ".join([FILLER] * 6)
    s = Session.start(Prefix.build("sys"))
    s.add_user("Find where Alice works.")
    s.add_user("Never call the billing API. Always cite the page number.")
    for i in range(24):
        c = ToolCall(f"c{i}", "fetch_page", f'{{"page": {i}}}')
        s.add_assistant(Message(role="assistant", content=f"checking page {i}", tool_calls=(c,)))
        s.add_tool_result(c.id, page, tool_name="fetch_page", budget=BudgetRecord(c.id))
    cfg = CompactionConfig(
        results_dir=tmp_path,
        full_compaction=True,
        drop_unused=False,
        keep_recent_results=30,
        min_clear_tokens=10**9,
        keep=["constraints"],
    )
    m = ContextManager(cfg, COUNT, 6000)
    m.summarizer = Summarizer(ScriptedBackend([lambda req: "Rule: Never call the billing API. Alice: Helix."]), COUNT)
    m.bind(s)
    reports = m.before_call(s, 30)
    assert reports and reports[0].layer == "full_stage1"
    first = next(ev for ev in s.events if isinstance(ev, CompactionEvent))
    found = sv.read(first.ledger)
    assert found is not None
    marked = {i.text: (i.kept, i.where) for i in found.items}
    assert marked == {"Never call the billing API.": (True, "note"), "Always cite the page number.": (False, None)}


def test_files_errors_and_patterns_are_taken_from_what_was_hidden():
    turns = [
        (0, sv.Turn("user", "Fix the build. Ticket PROJ-4821.")),
        (1, sv.Turn("assistant", "", calls='edit {"path": "src/app/main.py"}')),
        (2, sv.Turn("tool", "Error: tests failed in tests/test_main.py", tool="run_tests", failed=True)),
        (3, sv.Turn("tool", "Traceback: lint failed", tool="lint", failed=True)),
        (4, sv.Turn("tool", "all green", tool="lint")),  # lint succeeded since: its error is fixed
        (6, sv.Turn("tool", wrap("fetch", "f1", "404 Not Found\nno page"), tool="fetch", failed=True)),
        (5, sv.Turn("user", "Go on, see PROJ-4822.")),
    ]
    c = sv.contract(["files", "errors", sv.Keep("ticket", r"PROJ-\d+")])
    got = {(d.kind, d.text) for d in c.items(turns, {1, 2, 3, 5, 6})}
    assert got == {
        ("files", "src/app/main.py"),
        ("files", "tests/test_main.py"),
        ("errors", "Error: tests failed in tests/test_main.py"),
        ("errors", "404 Not Found"),  # an untrusted result's first line inside its wrapper
        ("ticket", "PROJ-4822"),
    }
    # only what the compaction hid is at stake
    assert {d.text for d in c.items(turns, {5})} == {"PROJ-4822"}
    assert sv.clip("word " * 100).endswith("word") and len(sv.clip("word " * 100)) <= sv.MAX_TEXT


def test_open_todo_items_a_compaction_hid_are_checked_and_done_ones_are_not():
    s = Session.start(Prefix.build("sys"))
    s.add_user("Ship the release.")
    c = ToolCall("t1", "rewrite_todo_list", '{"items": ["bump the version", "tag v2.1.0", "write the notes"]}')
    s.add_assistant(A(c))
    s.add_tool_result(c.id, "[x] 1. bump the version; [ ] 2. tag v2.1.0; [>] 3. write the notes", tool_name="todo")
    s.append(
        TodoEvent(
            items=(
                TodoItem(1, "bump the version", "completed"),
                TodoItem(2, "tag v2.1.0", "pending"),
                TodoItem(3, "write the notes", "in_progress"),
            ),
            next_id=4,
        )
    )
    hidden = {1, 2}
    seen = Seen(["sys", "Ship the release.", "[ctxwright: 2 earlier message(s) were removed]", "next: write the notes"])
    found = sv.check(["todos"], s.events, hidden, seen)
    assert found is not None
    assert {(i["text"], i["kept"]) for i in found["items"]} == {("tag v2.1.0", False), ("write the notes", True)}


def test_the_request_reader_takes_errors_and_tools_from_anthropic_and_responses_shapes():
    anthropic = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the build."}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "tu1", "name": "make", "input": {"target": "all"}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "tu1", "is_error": True, "content": "cc: no such file"}],
        },
    ]
    responses = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the build."}]},
        {"type": "function_call", "call_id": "fc1", "name": "make", "arguments": '{"target": "src/app.c"}'},
        {"type": "function_call_output", "call_id": "fc1", "output": "Error: src/app.c:3: syntax error"},
    ]
    assert rule.turns_of(anthropic)[2] == ("tool", "cc: no such file", "make", True)
    wrapped = [
        {
            "role": "assistant",
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "make", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": wrap("make", "a", "Error: no rule to make target")},
    ]
    assert rule.turns_of(wrapped)[1][2:] == ("make", True)  # read inside ctxwright's wrapper
    assert rule.turns_of(responses)[1][0] == "assistant" and "src/app.c" in rule.turns_of(responses)[1][1]
    assert rule.turns_of(responses)[2] == ("tool", "Error: src/app.c:3: syntax error", "make", True)
    c = sv.contract(["errors", "files"])
    lost = c.lost_items(rule.turns_of(responses), {1, 2}, ["Fix the build."])
    assert ("errors", "Error: src/app.c:3: syntax error", 2) in lost and ("files", "src/app.c", 1) in lost
    # the same request with a later success of the tool: the error is fixed, not at stake
    fixed = [*responses, {"type": "function_call_output", "call_id": "fc1", "output": "built"}]
    assert [k for k, *_ in c.lost_items(rule.turns_of(fixed), {1, 2}, ["Fix the build."])] == ["files"]


def test_bad_declarations_fail_when_configured_and_a_recorded_keep_resumes():
    with pytest.raises(ValueError, match="neither a kind"):
        CompactionConfig(keep=["(("])
    with pytest.raises(ValueError, match="empty text"):
        CompactionConfig(keep=["x*"])
    with pytest.raises(ValueError, match="new, non-empty name"):
        sv.Keep("task", "x")
    cfg = CompactionConfig(keep=["task", sv.Keep("ticket", r"PROJ-\d+")])
    again = compaction_from_dict(json.loads(json.dumps(compaction_to_dict(cfg))), "recorded")
    assert sv.contract(again.keep).declared == ["task", "ticket"]


# -- the gate's rule -------------------------------------------------------------------------------
def _calls(kind: str) -> list[Any]:
    doc = json.loads((RULES / f"{kind}.json").read_text())
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}
    found, problems = calls_of([("c", [{"request": doc[k], "response": answer} for k in ("previous", "current")])])
    assert not problems
    return found


def test_the_gate_rule_fails_a_run_that_drops_a_declared_item_and_passes_one_that_keeps_it():
    keep = Tolerances(keep=("task", "files", "constraints"))
    lost, kept = _calls("fires"), _calls("quiet")
    regs = named_regressions(lost, lost, keep)  # the golden made the same compaction: still a failure
    assert [r.rule for r in regs] == ["compaction_lost_item"]
    assert "'Never edit setup.py.'" in regs[0].line and "on call 2 of c" in regs[0].line
    assert {i["text"] for i in regs[0].details["lost"]} == {
        "Never edit setup.py.",
        "The fix must keep the public API as it is.",
    }
    assert judge(lost, lost, tolerances=keep).exit_code == 1
    assert named_regressions(kept, kept, keep) == []
    assert named_regressions(lost, lost, Tolerances()) == []  # nothing declared: the rule is quiet


def test_the_pytest_gate_fails_an_sdk_agent_that_drops_a_declared_item(tmp_path: Path):
    doc = json.loads((RULES / "fires.json").read_text())
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }
    golden = tmp_path / "golden.jsonl"
    golden.write_text(
        "".join(json.dumps({"request": doc[k], "response": answer}) + "\n" for k in ("previous", "current"))
    )

    def agent(env: Mapping[str, str]) -> None:
        client = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"], max_retries=0)
        for k in ("previous", "current"):
            client.chat.completions.create(**doc[k])

    assert gate(golden, agent).exit_code == 0  # nothing declared: the same run passes
    with pytest.raises(AssertionError, match=r"compaction_lost_item: .*'Never edit setup\.py\.'"):
        gate(golden, agent, keep=["constraints"])
    with pytest.raises(ValueError, match="neither a kind"):
        gate(golden, agent, keep=["(("])


@pytest.mark.slow
def test_ctxwright_gate_keep_end_to_end(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for kind, status in (("fires", 1), ("quiet", 0)):
        doc = json.loads((RULES / f"{kind}.json").read_text())
        golden = tmp_path / f"{kind}.jsonl"
        answer = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4.1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
        }
        golden.write_text(
            "".join(
                json.dumps({"request": doc[k], "response": answer}) + "\n" for k in doc if k in ("previous", "current")
            )
        )
        agent = [sys.executable, str(ROOT / "tests" / "gate_agent.py"), str(golden), "2"]
        cmd = [sys.executable, "-m", "ctxwright", "gate", str(golden), "--json", "--keep", "constraints", "--", *agent]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, cwd=ROOT)
        out = json.loads(done.stdout)
        assert done.returncode == status, (kind, out)
        rules = [r["rule"] for r in out["regressions"]]
        assert rules == (["compaction_lost_item"] if status else []), out
    bad = subprocess.run(
        [sys.executable, "-m", "ctxwright", "gate", str(golden), "--keep", "todos", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 2 and "holds no TODO list" in bad.stderr and "Traceback" not in bad.stderr
