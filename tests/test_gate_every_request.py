"""The gate judges every request the run sent, not only the calls the replay answered.

A rewrite of the history (a sliding window, a reply edited in place) often makes the request
leave the recording: the replay refuses it. The gate must still name the rewrite
(``history_removed``, ``history_edited``), at any tolerance -- not fail on a reuse "drop" that
only says the run stopped early, nor exit 2 as "could not be judged". The agent is
``tests/window_agent.py`` (the official ``openai`` SDK, chat completions); its golden is what
the honest agent sent to a scripted server and what that server replied.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import window_agent
from ctxwright.audit.logs import read_records
from ctxwright.ci.gate import GateResult, run_calls_of, run_gate
from ctxwright.ci.judge import ANSWERED, DIVERGED, UNPLACED, Call, Tolerances, calls_of, counted_here, judge
from ctxwright.replay.golden import load_golden
from ctxwright.replay.matching import Matcher
from ctxwright.replay.server import TraceRecord
from fakeserver import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]


def _reply(body: dict[str, Any], n: int) -> dict[str, Any]:
    """What the scripted model says to request ``n`` (1-based): in the tool loop a ``step``
    call until four tool results came back, then done; in the chat the square asked for."""
    results = sum(1 for m in body["messages"] if m.get("role") == "tool")
    if body.get("tools") and results < 4:
        args = json.dumps({"n": results + 1})
        return FakeOpenAIServer.completion_body(
            {
                "content": None,
                "tool_calls": [
                    {"id": f"call_{n}", "type": "function", "function": {"name": "step", "arguments": args}}
                ],
            },
            finish_reason="tool_calls",
            model="gpt-test",
            extra={"id": f"chatcmpl-{n}"},
        )
    if body.get("tools"):
        text = "Done. I counted to four."
    else:
        k = sum(1 for m in body["messages"] if m.get("role") == "user")
        text = f"{k} squared is {k * k}. That is the whole answer to question {k}."
    return FakeOpenAIServer.completion_body({"content": text}, model="gpt-test", extra={"id": f"chatcmpl-{n}"})


def record(tmp: Path, shape: str) -> Path:
    """The honest agent's five calls against a scripted server, as a golden request log."""
    replies: list[dict[str, Any]] = []

    def respond(body: Any) -> Any:
        replies.append(_reply(body, len(replies) + 1))
        return FakeOpenAIServer.reply_json(replies[-1])

    with FakeOpenAIServer(fallback=respond) as srv:
        env = {"OPENAI_BASE_URL": srv.url, "OPENAI_API_KEY": "sk-test"}
        assert window_agent.main(shape, "none", env) == 0
        requests = srv.requests
    assert len(requests) == 5 == len(replies)
    golden = tmp / f"{shape}.jsonl"
    golden.write_text(
        "".join(json.dumps({"request": q, "response": r}) + "\n" for q, r in zip(requests, replies, strict=True))
    )
    return golden


def agent(shape: str, rewrite: str) -> Any:
    def run(env: Mapping[str, str]) -> None:
        window_agent.main(shape, rewrite, env)

    return run


def gate(golden: Path, shape: str, rewrite: str, drop: float = 0.02) -> GateResult:
    return run_gate(load_golden(golden), agent(shape, rewrite), tolerances=Tolerances(max_reuse_drop=drop))


def append_lines(result: GateResult) -> list[str]:
    return [r.line for r in result.judgement.regressions if r.rule == "append_only"]


@pytest.fixture(scope="module")
def goldens(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("goldens")
    return {shape: record(tmp, shape) for shape in ("chat", "tools")}


def test_the_honest_agent_passes(goldens: dict[str, Path]) -> None:
    for shape in ("chat", "tools"):
        result = gate(goldens[shape], shape, "none")
        assert result.exit_code == 0, result.lines()
        assert result.judgement.run.calls == 5 and result.judgement.compared is None


@pytest.mark.parametrize("drop", [0.02, 0.5, 1.0])
def test_a_window_of_the_newest_question_fails_as_history_removed_at_any_reuse_tolerance(
    goldens: dict[str, Path], drop: float
) -> None:
    """Five questions, then only [system, newest question] from the 4th call: the replay
    places the request at its turn of the conversation (not "a new conversation") and
    answers it, so all five calls are judged and the window is named."""
    result = gate(goldens["chat"], "chat", "window", drop)
    assert result.exit_code == 1, result.lines()
    assert result.divergences == ()
    lines = append_lines(result)
    assert any(
        line.startswith("append-only: call 4 of conversation c1 is history_removed at msg#") for line in lines
    ), lines
    assert result.judgement.run.calls == 5
    rules = {r.rule for r in result.judgement.regressions}
    assert ("reuse" in rules) == (drop < 0.5), result.lines()  # the drop is real here: all 5 calls were made


@pytest.mark.parametrize("drop", [0.02, 0.5, 1.0])
def test_a_window_that_leaves_the_recording_is_named_where_it_left(goldens: dict[str, Path], drop: float) -> None:
    """The tool loop cut to [system, question] at its 4th call: placed in its conversation
    at call 4, where it diverges (400). That request is judged after call 3 -- named
    ``history_removed`` -- and the tolerances compare the 3 calls both sides made, so no
    reuse "drop" from judging 3 of 5 calls is reported, nor is the run "not judged"."""
    result = gate(goldens["tools"], "tools", "window", drop)
    assert result.exit_code == 1, result.lines()
    (left,) = result.divergences
    assert left.startswith("call 4 of conversation c1: "), left
    (line,) = append_lines(result)
    assert line.startswith("append-only: call 4 of conversation c1 is history_removed at msg#"), line
    assert line.endswith("-- where the run left the recording"), line
    assert {r.rule for r in result.judgement.regressions} == {"append_only"}, result.lines()
    compared = result.judgement.compared
    assert compared is not None and compared[0].calls == compared[1].calls == 3
    assert compared[0].reuse == pytest.approx(compared[1].reuse)
    assert result.judgement.run.calls == 4 and result.judgement.golden.calls == 5


def test_an_edit_in_place_that_leaves_the_recording_is_history_edited(goldens: dict[str, Path]) -> None:
    """Every earlier reply cut to its first sentence from the 4th call: the request holds no
    recorded reply any more and leaves the recording; it is named at the first reply edited,
    with the field, byte offset and both texts."""
    result = gate(goldens["chat"], "chat", "edit", 1.0)
    assert result.exit_code == 1, result.lines()
    (left,) = result.divergences
    assert left.startswith("call 4 of conversation c1: "), left
    (line,) = append_lines(result)
    # the reply of the 1st call (msg#2: the system prompt is msg#0) cut after its first sentence
    assert line == (
        "append-only: call 4 of conversation c1 is history_edited at msg#2 content @15: '1 squared is 1.' | '' "
        "-- where the run left the recording"
    ), line
    details = result.judgement.regressions[0].to_json()
    assert details["placed"] == DIVERGED and details["cause"] == "history_edited"


def test_the_cli_exits_1_naming_the_window_with_a_loose_reuse_tolerance(goldens: dict[str, Path]) -> None:
    """The case that exited 2 ("could not be judged"): ``--max-reuse-drop 0.5``, the agent
    a subprocess, as CI runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    argv = [sys.executable, str(ROOT / "tests" / "window_agent.py"), "tools", "window"]
    cmd = [
        sys.executable,
        "-m",
        "ctxwright",
        "gate",
        str(goldens["tools"]),
        "--json",
        "--max-reuse-drop",
        "0.5",
        "--",
        *argv,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert "src/ctxwright/" not in done.stderr, done.stderr
    out = json.loads(done.stdout)
    assert done.returncode == out["exit_code"] == 1, out
    assert [r["cause"] for r in out["regressions"]] == ["history_removed"], out
    assert out["regressions"][0]["placed"] == "diverged" and out["compared"]["run"]["calls"] == 3


# -- the parts on their own ------------------------------------------------------------------


def _calls(bodies: list[dict[str, Any]], conversation: str = "c1") -> list[Call]:
    return calls_of([(conversation, [{"request": b} for b in bodies])])[0]


def _bodies(golden: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["request"] for line in golden.read_text().splitlines()]


def test_a_run_that_stopped_early_is_compared_over_the_calls_it_made(goldens: dict[str, Path]) -> None:
    """3 of 5 calls, each identical to the golden's: not judged in full (exit 2), and no reuse
    or token "regression" -- a conversation's first calls reuse least, which is no change."""
    golden = _calls(_bodies(goldens["chat"]))
    j = judge(golden, golden[:3])
    assert j.regressions == () and j.exit_code == 2, j.to_json()
    assert j.unjudged == ("conversation c1: the run made 3 of its 5 recorded calls",)
    assert j.compared is not None and j.compared[0] == j.compared[1]
    assert j.run.reuse is not None and j.golden.reuse is not None and j.golden.reuse - j.run.reuse > 0.02


def test_an_unplaced_request_is_judged_after_the_runs_previous_one(goldens: dict[str, Path]) -> None:
    """A request in no recorded conversation: judged after the request before it in the run
    when it kept a whole message of it, else it is a new conversation (``first``)."""
    bodies = _bodies(goldens["chat"])
    golden = _calls(bodies)
    first3 = golden[:3]
    third = bodies[2]["messages"]
    cut = {**bodies[2], "messages": [third[0], {"role": "user", "content": "Context: numbers."}, *third[1:2]]}
    fresh = {**bodies[2], "messages": [third[0], {"role": "user", "content": "Something else entirely."}]}
    for body, cause in ((cut, "history_edited"), (fresh, None)):
        (item,) = read_records([{"request": body}])
        assert not hasattr(item, "message")
        unplaced = Call("", 3, counted_here(item, None), UNPLACED)
        j = judge(golden, [*first3, unplaced])
        lines = [r.line for r in j.regressions if r.rule == "append_only"]
        if cause is None:
            assert lines == [] and j.exit_code == 2, j.to_json()
        else:
            (line,) = lines
            assert line.startswith(
                f"append-only: request 4 of the run (in no recorded conversation; judged after the request before it) is {cause} at msg#1"
            ), line
        assert {r.rule for r in j.regressions} <= {"append_only"}, j.to_json()  # no prefix or tolerance verdict on it
        assert j.compared is not None and j.compared[1].calls == 3


def test_the_replay_places_a_recorded_question_at_the_next_call_of_its_conversation(goldens: dict[str, Path]) -> None:
    bodies = _bodies(goldens["chat"])
    m = Matcher(load_golden(goldens["chat"]))
    for pos in range(3):
        p = m.place("openai_chat", bodies[pos])
        assert (p.position, p.diverged) == (pos, None)
        m.answered(p)
    system, *rest = bodies[3]["messages"]
    window = {**bodies[3], "messages": [system, rest[-1]]}  # [system, the 4th question]: answered at its turn
    p = m.place("openai_chat", window)
    assert p.conversation is not None and (p.conversation.id, p.position, p.diverged) == ("c1", 3, None)
    m.answered(p)
    # the first question again is a recorded turn of c1 too: placed at the next call, where it diverges
    again = {**bodies[0]}
    p = m.place("openai_chat", again)
    assert p.conversation is not None and p.position == 4 and p.diverged is not None
    assert p.diverged.startswith("call 5 of conversation c1: the user message differs"), p.diverged
    # a question the conversation never asked is still a new conversation
    p = m.place("openai_chat", {**bodies[0], "messages": [system, {"role": "user", "content": "Unrecorded?"}]})
    assert p.conversation is None and p.diverged is not None and "new conversation" in p.diverged
    # a conversation at its end takes no more questions: a new run of the task is a new conversation
    m.answered(m.place("openai_chat", bodies[4]))
    p = m.place("openai_chat", bodies[0])
    assert p.conversation is None and "new conversation" in (p.diverged or "")


def test_the_run_is_read_in_arrival_order_with_each_placement(goldens: dict[str, Path]) -> None:
    """Answered, diverged and refused-before-placement requests are all kept, in arrival order."""
    bodies = _bodies(goldens["chat"])
    records = [
        TraceRecord("openai_chat", bodies[0], {}, "c1", 0, False, None),
        TraceRecord("openai_chat", bodies[1], {}, "c1", 1, False, "call 2 of conversation c1: ..."),
        TraceRecord("openai_chat", bodies[2], {}, None, None, False, None, 400),
    ]
    calls, problems = run_calls_of(records)
    assert problems == []
    assert [(c.conversation, c.position, c.placed) for c in calls] == [
        ("c1", 0, ANSWERED),
        ("c1", 1, DIVERGED),
        ("", 2, UNPLACED),
    ]
    assert [c.request.conversation for c in calls] == ["c1", "c1", None]
