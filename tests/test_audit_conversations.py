"""The audit on real logs: request options as a cause of their own, a log of several
conversations split into them (each new one ``first``, with per-conversation summaries), and
"the log has no usage" said only when no request had usage."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ctxwright.audit.compare import Auditor, AuditRow
from ctxwright.audit.logs import load_requests
from ctxwright.cli.audit import run_audit
from ctxwright.cli.main import main
from test_audit import A, U, openai, tool, write_jsonl

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "kv_cache_patterns_log.jsonl"


def audit_rows(path: Path) -> list[AuditRow]:
    reqs, problems = load_requests(path)
    assert problems == []
    a = Auditor()
    for r in reqs:
        a.add(r)
    return a.rows


def causes(rows: list[AuditRow]) -> list[str]:
    return [r.cause for r in rows]


def body(system: str, msgs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    return {**openai(system, msgs, [tool("lookup")]), **options}


def audit_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["audit", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# -- (a) request options ----------------------------------------------------------------------


def test_a_tool_choice_change_is_options_changed_naming_the_option(tmp_path, capsys):
    """llama.cpp's function-calling chat formats render the tool list into the prompt only when
    tool_choice is set and not "none": an append whose tool_choice changed is not a plain append."""
    q, a, more = U("q"), A("a"), U("more")
    log = [
        body("s", [q], tool_choice="required"),
        body("s", [q, a, more], tool_choice="auto"),
        body("s", [q, a, more, A("b"), U("c")], tool_choice="auto"),
    ]
    path = write_jsonl(tmp_path / "log.jsonl", log)
    rows = audit_rows(path)
    assert causes(rows) == ["first", "options_changed", "append"]
    assert rows[1].options_changed == ("tool_choice",)
    d = rows[1].first_divergence
    assert d is not None and (d.field, d.message_index) == ("options", None)
    assert (d.before, d.after) == ('"required"', '"auto"')
    doc = audit_json(path, capsys)
    assert [r["options_changed"] for r in doc["requests"]] == [[], ["tool_choice"], []]
    assert doc["summary"]["options_changed"] == {"tool_choice": 1}
    assert main(["audit", str(path)]) == 0
    out = capsys.readouterr().out
    assert "options: tool_choice" in out and '"required" → "auto"' in out
    assert "options_changed (1): look at the cached column on these rows" in out


@pytest.mark.parametrize(
    ("option", "before", "after"),
    [
        ("max_tokens", 64, 256),
        ("temperature", 0.0, 0.7),
        ("response_format", {"type": "text"}, {"type": "json_object"}),
        ("parallel_tool_calls", True, False),
        ("model", "m-small", "m-large"),
        ("tool_choice", "auto", {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_each_request_option_is_compared(tmp_path, option, before, after):
    """Each option is compared and listed; only one that is part of the cached prompt makes the
    cause ``options_changed`` (a sampling or length field is cached by no provider: an append)."""
    q = U("q")
    log = [body("s", [q], **{option: before}), body("s", [q, A("a"), U("b")], **{option: after})]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    neutral = option in ("max_tokens", "temperature")
    assert causes(rows) == ["first", "append" if neutral else "options_changed"]
    assert rows[1].options_changed == (option,)


def test_an_option_set_on_one_call_only_counts_and_several_are_named_together(tmp_path):
    q = U("q")
    log = [body("s", [q]), body("s", [q, A("a"), U("b")], parallel_tool_calls=False, model="m2", temperature=0.2)]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert rows[1].cause == "options_changed"
    assert rows[1].options_changed == ("model", "parallel_tool_calls", "temperature")
    d = rows[1].first_divergence  # the options of the cached prompt, named together
    assert d is not None and d.before.startswith("model=") and "parallel_tool_calls=(not set)" in d.before
    assert d.after.startswith('model="m2"') and "parallel_tool_calls=false" in d.after
    assert "temperature" not in d.after


def test_options_are_listed_when_another_cause_comes_first(tmp_path):
    """The first divergence in the messages stays the cause; the changed option is still named."""
    q = U("q")
    log = [body("s", [q, A("a1")], temperature=0), body("s", [q, A("a2"), U("b")], temperature=1)]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "history_edited"]
    assert rows[1].options_changed == ("temperature",)
    assert rows[1].first_divergence is not None and rows[1].first_divergence.field == "content"


def test_keys_a_logger_adds_are_not_options(tmp_path):
    """A positive list of options: a timestamp or request id next to the body changes every line."""
    q = U("q")
    log = [
        {**body("s", [q]), "timestamp": 1, "request_id": "r1", "stream": False},
        {**body("s", [q, A("a"), U("b")]), "timestamp": 2, "request_id": "r2", "stream": True},
    ]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "append"] and rows[1].options_changed == ()


# -- (b) several conversations in one log -----------------------------------------------------


def test_conversations_one_after_another_each_start_first(tmp_path, capsys):
    a1, b1 = U("plan a trip to Oslo"), U("fix the failing test")
    log = [
        body("s", [a1]),
        body("s", [a1, A("ok"), U("in May")]),
        body("s", [b1]),
        body("s", [b1, A("which one?"), U("test_x")]),
    ]
    path = write_jsonl(tmp_path / "log.jsonl", log)
    rows = audit_rows(path)
    assert causes(rows) == ["first", "append", "first", "append"]
    assert [r.conversation for r in rows] == [0, 0, 1, 1]
    assert rows[2].first_divergence is None
    doc = audit_json(path, capsys)
    assert doc["summary"]["conversations"] == 2
    assert [(c["conversation"], c["first_request"], c["requests"]) for c in doc["conversations"]] == [
        (0, 0, 2),
        (1, 2, 2),
    ]
    assert doc["conversations"][1]["causes"] == {"first": 1, "append": 1}


def test_interleaved_conversations_are_compared_within_each(tmp_path):
    """Two agents logging into one file: each request is compared with its own conversation's
    previous request, not with the line above it (which belongs to the other one)."""
    a, b = U("task A"), U("task B")
    log = [
        body("sys A", [a]),
        body("sys B", [b]),
        body("sys A", [a, A("a1"), U("a2")]),
        body("sys B", [b, A("b1"), U("b2")]),
        body("sys A", [a, A("a1"), U("a2 edited")]),
        body("sys B", [b, A("b1"), U("b2"), A("b3"), U("b4")]),
    ]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "first", "append", "append", "history_edited", "append"]
    assert [r.conversation for r in rows] == [0, 1, 0, 1, 0, 1]
    d = rows[4].first_divergence
    assert d is not None and (d.message_index, d.field, d.byte_offset) == (3, "content", 2)


def test_a_changed_system_prompt_stays_in_its_conversation(tmp_path):
    """A timestamp in the system prompt is the anti-pattern to report, not a new conversation."""
    q = U("q")
    log = [body("now 10:00", [q]), body("now 10:01", [q, A("a"), U("b")]), body("now 10:02", [q, A("a")])]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "system_changed", "system_changed"]
    assert {r.conversation for r in rows} == {0}


def test_a_lone_repeat_of_the_first_message_is_a_new_run_of_the_task(tmp_path):
    q = U("q")
    log = [body("s", [q]), body("s", [q, A("a"), U("b")]), body("s", [q]), body("s", [q, A("a2"), U("c")])]
    rows = audit_rows(write_jsonl(tmp_path / "log.jsonl", log))
    assert causes(rows) == ["first", "append", "first", "append"]
    assert [r.conversation for r in rows] == [0, 0, 1, 1]
    assert rows[2].reusable_prefix_bytes == rows[1].reusable_prefix_bytes  # the cache still serves it


def test_the_real_example_log_is_three_sessions(capsys):
    """examples/kv_cache_patterns_log.jsonl: three benchmark sessions back to back, the same task
    each time, the second with a timestamp in its system prompt, the third with a sliding window."""
    rows = audit_rows(EXAMPLE)
    assert [r.index for r in rows if r.cause == "first"] == [0, 7, 14]
    assert [r.conversation for r in rows] == [0] * 7 + [1] * 7 + [2] * 7
    assert causes(rows)[8:14] == ["system_changed"] * 6
    assert causes(rows)[16:] == ["history_removed"] * 5
    assert "history_edited" not in causes(rows)
    assert main(["audit", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "21 request(s) in 3 conversations" in out
    lines = out[out.index("\nconversations (") + 1 :].splitlines()
    assert [line.split()[:3] for line in lines[2:5]] == [["0", "7", "0"], ["1", "7", "7"], ["2", "7", "14"]]
    assert "system_changed 6" in lines[3] and "history_removed 5" in lines[4]


# -- (c) usage ----------------------------------------------------------------------------------


def usage_log(tmp_path: Path, usages: list[dict[str, Any] | None]) -> Path:
    q = U("q")
    records = []
    for k, u in enumerate(usages):
        msgs = [q] + [A("a"), U("b")] * k
        records.append({"request": body("s", msgs), **({"response": {"usage": u}} if u is not None else {})})
    return write_jsonl(tmp_path / "log.jsonl", records)


def summary_line(path: Path) -> str:
    out = io.StringIO()
    assert run_audit(path, as_json=False, prices=None, console=Console(file=out, width=200)) == 0
    return next(line for line in out.getvalue().splitlines() if "request(s)" in line)


def test_usage_without_a_cached_count_is_not_no_usage(tmp_path):
    """llama-cpp-python's server reports prompt_tokens but no cached-token field."""
    line = summary_line(usage_log(tmp_path, [{"prompt_tokens": 50, "completion_tokens": 5}] * 3))
    assert "no usage" not in line
    assert "cached unknown (the usage of 3 request(s) has no cached-token count)" in line


def test_usage_on_some_lines_only_gives_the_known_total(tmp_path):
    cached = {"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 32}}
    line = summary_line(usage_log(tmp_path, [None, cached, None, cached]))
    assert "no usage" not in line and "cached 64 (reported for 2 of 4 requests)" in line


def test_no_usage_at_all_says_so(tmp_path):
    line = summary_line(usage_log(tmp_path, [None, None]))
    assert "cached unknown (the log has no usage)" in line
