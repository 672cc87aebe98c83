"""The named rules where they are used: ``ctxwright audit`` (a line per finding, a count per
rule, ``--json``), the proxy's line per call, the CI gate (``named_regressions``, exit 1 and
``--max-tool-tokens``) and ``ctxwright lock --check`` (the rug pull), each through its real
entry point."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from ctxwright.audit.logs import read_records
from ctxwright.ci.judge import Tolerances, calls_of, judge, named_regressions
from ctxwright.proxy.log import proxy_session_requests
from ctxwright.proxy.serve import RecordingProxy
from ctxwright.proxy.server import ProxyConfig
from ctxwright.store.sessions import Store

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "rules"
TIMEOUT = 120


def pair(rule: str, kind: str = "fires") -> tuple[dict[str, Any], dict[str, Any]]:
    doc = json.loads((FIXTURES / rule / f"{kind}.json").read_text())
    return doc["previous"], doc["current"]


def answer(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4.1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


def write_log(path: Path, bodies: list[dict[str, Any]]) -> Path:
    """A request log (a golden): each body with an answer of its own, ``reply N``."""
    path.write_text(
        "".join(json.dumps({"request": b, "response": answer(f"reply {i}")}) + "\n" for i, b in enumerate(bodies))
    )
    return path


def ctxwright(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwright", *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT
    )


# -- ctxwright audit ------------------------------------------------------------------------------


def test_audit_prints_each_finding_under_its_call_and_counts_them(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", [*pair("date_in_prefix"), pair("tools_reordered")[1]])
    done = ctxwright("audit", str(log), "--max-tool-tokens", "100")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "rule date_in_prefix: system prompt @" in out and "· fix: keep the date" in out
    assert "warning date_in_prefix:" in out  # the first request already holds a date
    assert "rule tool_budget: tools:" in out
    assert "rules: date_in_prefix 2 · tools_reordered 1 · tool_budget 2" in out
    assert "  tools_reordered: send the tools in one fixed order" in out

    done = ctxwright("audit", str(log), "--json")
    doc = json.loads(done.stdout)
    assert doc["rules"] == {"date_in_prefix": 2, "tools_reordered": 1}  # no budget given: no tool_budget
    per_call = [[f["rule"] for f in r["rules"]] for r in doc["requests"]]
    assert per_call == [["date_in_prefix"], ["date_in_prefix"], ["tools_reordered"]]
    assert doc["requests"][2]["rules"][0]["fix"].startswith("send the tools in one fixed order")


def test_a_clean_log_has_no_finding(tmp_path: Path) -> None:
    log = write_log(tmp_path / "log.jsonl", list(pair("reminder_moved", "quiet")))
    doc = json.loads(ctxwright("audit", str(log), "--json").stdout)
    assert doc["rules"] == {} and all(r["rules"] == [] for r in doc["requests"])
    assert "rules:" not in ctxwright("audit", str(log)).stdout


def test_a_bad_tool_budget_is_one_line() -> None:
    done = ctxwright("audit", "x.jsonl", "--max-tool-tokens", "lots")
    assert done.returncode == 2 and "give a number of tokens" in done.stderr and "Traceback" not in done.stderr


def test_audit_keep_names_a_request_that_lost_a_declared_item(tmp_path: Path) -> None:
    """``--keep`` is the gate's survival contract on the audit too: the request after a
    summary that dropped the user's constraints is named; without ``--keep``, nothing is."""
    log = write_log(tmp_path / "log.jsonl", list(pair("compaction_lost_item")))
    doc = json.loads(ctxwright("audit", str(log), "--json", "--keep", "constraints", "--keep", "files").stdout)
    assert doc["rules"].get("compaction_lost_item") == 1, doc["rules"]
    assert [f["rule"] for f in doc["requests"][1]["rules"]] == ["compaction_lost_item"]
    assert "compaction_lost_item" not in json.loads(ctxwright("audit", str(log), "--json").stdout)["rules"]
    bad = ctxwright("audit", str(log), "--keep", "todos")
    assert bad.returncode == 2 and "a request holds no TODO list" in bad.stderr and "Traceback" not in bad.stderr


# -- the proxy's line -----------------------------------------------------------------------------


def test_the_proxy_line_names_the_rule_and_its_fix(upstream: Any, tmp_path: Path) -> None:
    store = Store(tmp_path / "proxy.db")
    lines: list[str] = []
    config = ProxyConfig(upstream=upstream.url, max_tool_tokens=100)
    with RecordingProxy.start(config, store, printer=lines.append) as p:
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0)
        previous, current = pair("tools_reordered")
        after = copy.deepcopy(current)
        after["messages"] += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
        for body in (previous, current, after):
            client.chat.completions.create(**body)
        assert p.recorder.wait_idle(30, at_least=3)
    assert len(lines) == 3, lines
    assert "[tool_budget] tools:" in lines[0] and "over --max-tool-tokens 100" in lines[0]
    assert (
        "[tools_reordered] tools[0]: 'run_tests'" in lines[1] and "(fix: send the tools in one fixed order" in lines[1]
    )
    assert "[" not in lines[2].split("tok")[-1]  # an append with the same tools: no rule, the budget not said again
    sid = lines[1].split()[0]
    stored = [r["proxy"]["audit"] for r in proxy_session_requests(store, sid)]
    assert [f["rule"] for f in stored[1]["rules"]] == ["tools_reordered", "tool_budget"]
    assert "rules" not in stored[2]
    store.close()


def test_the_proxy_line_names_a_lost_declared_item(upstream: Any, tmp_path: Path) -> None:
    """``proxy --keep``: each call is held to the survival contract, as in the audit and the gate.
    A compacted request no longer extends the one before it, so the client names its session
    (``x-ctxwright-session``, as an agent that compacts would) for the two to be compared."""
    store = Store(tmp_path / "proxy.db")
    lines: list[str] = []
    config = ProxyConfig(upstream=upstream.url, keep=("constraints",))
    with RecordingProxy.start(config, store, printer=lines.append) as p:
        client = openai.OpenAI(base_url=p.url + "/v1", api_key="sk-test", max_retries=0)
        for body in pair("compaction_lost_item"):
            client.chat.completions.create(**body, extra_headers={"x-ctxwright-session": "agent-1"})
        assert p.recorder.wait_idle(30, at_least=2)
    store.close()
    assert len(lines) == 2, lines
    assert "[compaction_lost_item]" not in lines[0] and "[compaction_lost_item]" in lines[1]


# -- the gate -------------------------------------------------------------------------------------


def calls(*bodies: dict[str, Any]) -> list[Any]:
    found, problems = calls_of([("c", [{"request": b, "response": answer()} for b in bodies])])
    assert not problems
    return found


def test_a_rule_that_fires_on_the_run_and_not_on_the_golden_is_a_regression() -> None:
    previous, current = pair("ttl_changed")
    quiet_prev, quiet_cur = pair("ttl_changed", "quiet")
    golden, run = calls(quiet_prev, quiet_cur), calls(previous, current)
    regs = named_regressions(golden, run, Tolerances())
    # within the run (call 2 after call 1), and, where the run's TTLs differ from the golden's at
    # the same place, against the golden too
    ttls = [r for r in regs if r.rule == "ttl_changed"]
    assert ttls and {r.rule for r in regs} == {"ttl_changed"}
    ttl = next(r for r in ttls if "on call 2 of c" in r.line)
    assert "on call 2 of c" in ttl.line and "fix: send one cache_control TTL" in ttl.line
    assert ttl.details["named_rule"] is True
    j = judge(golden, run)
    assert j.exit_code == 1 and any(r.rule == "ttl_changed" for r in j.regressions)
    # the golden making the same mistake at the same place: not this change's regression
    assert not [r for r in named_regressions(run, run, Tolerances()) if r.rule == "ttl_changed"]


def test_the_tool_budget_fails_the_gate_whatever_the_golden_did() -> None:
    _, body = pair("tool_budget")
    golden = calls(body)
    assert named_regressions(golden, golden, Tolerances()) == []
    regs = named_regressions(golden, golden, Tolerances(max_tool_tokens=1000))
    assert [r.rule for r in regs] == ["tool_budget"] and "over --max-tool-tokens 1,000" in regs[0].line


@pytest.mark.slow
def test_gate_max_tool_tokens_end_to_end(tmp_path: Path) -> None:
    _, body = pair("tool_budget")
    body["messages"] = body["messages"][:2]  # system and the task: the replay's first call of a conversation
    second = copy.deepcopy(body)
    second["messages"] += [{"role": "assistant", "content": "reply 0"}, {"role": "user", "content": "and now?"}]
    golden = write_log(tmp_path / "golden.jsonl", [body, second])
    agent = [sys.executable, str(ROOT / "tests" / "gate_agent.py"), str(golden), "2"]
    done = ctxwright("gate", str(golden), "--json", "--max-tool-tokens", "1000", "--", *agent)
    out = json.loads(done.stdout)
    assert done.returncode == 1, out
    assert [r["rule"] for r in out["regressions"]] == ["tool_budget"], out
    assert "fix: load fewer tools" in out["regressions"][0]["line"]
    done = ctxwright("gate", str(golden), "--json", "--", *agent)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the lock: a rug pull -------------------------------------------------------------------------


def test_lock_check_names_a_rug_pull_and_reads_an_old_lock(tmp_path: Path) -> None:
    approved, pulled = pair("mcp_rug_pull")
    lock = tmp_path / "ctxwright.lock"
    src = write_log(tmp_path / "approved.jsonl", [approved])
    assert ctxwright("lock", str(src), "--file", str(lock)).returncode == 0
    text = lock.read_text()
    assert "version = 2" in text and text.count("description_sha256 = ") == 4  # one per tool
    changed = write_log(tmp_path / "pulled.jsonl", [pulled])
    done = ctxwright("lock", str(changed), "--file", str(lock), "--check")
    assert done.returncode == 1
    assert "rug pull: tool 'mcp__notes__search': its description changed after it was approved" in done.stdout
    assert "fix: review the tool's new description" in done.stdout
    doc = json.loads(ctxwright("lock", str(changed), "--file", str(lock), "--check", "--json").stdout)
    assert [f["tool"] for f in doc["rug_pulls"]] == ["tool 'mcp__notes__search'"]
    # a schema change that leaves the descriptions alone is a change, not a rug pull
    quiet = write_log(tmp_path / "quiet.jsonl", [pair("mcp_rug_pull", "quiet")[1]])
    done = ctxwright("lock", str(quiet), "--file", str(lock), "--check")
    assert done.returncode == 1 and "rug pull" not in done.stdout
    # a version 1 lock (no description hashes) is still read and checked
    old = "".join(
        line.split(", description_sha256")[0] + " },\n" if "description_sha256" in line else line + "\n"
        for line in text.splitlines()
    ).replace("version = 2", "version = 1")
    lock.write_text(old)
    assert ctxwright("lock", str(src), "--file", str(lock), "--check").returncode == 0
    assert ctxwright("lock", str(changed), "--file", str(lock), "--check").returncode == 1


def test_records_reader_keeps_ttls_for_the_judge() -> None:
    previous, _ = pair("ttl_changed")
    (req,) = list(read_records([{"request": previous, "response": answer()}]))
    assert req.cache_ttls == (("system[0]", "1h"), ("msg#3 block 0", "1h"))
