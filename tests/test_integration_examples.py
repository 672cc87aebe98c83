"""The three framework examples (``examples/integrations/``) have one shape: the same arguments
in the same order (``--base-url``, ``--model``, ``--db``, the prompt), the same default store
(ctxwright's own, ``$CTXWRIGHT_DB``), the same output (the answer, then the session and the
command that audits it), and every adapter sends a tool-call turn's ``"content": null`` as ``""``
by default -- what llama-cpp-python's server needs (it answers the null with HTTP 500).

Each runs as written: against the loopback OpenAI server (``tests/fakeserver.py``, which rejects
what OpenAI rejects), and (slow) against llama-cpp-python's own server on the bundled model.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ctxwright.cli.main import main as cli
from ctxwright.proxy.store import ProxyLog
from ctxwright.store.sessions import Store
from fakeserver import FakeOpenAIServer as F

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "integrations"
#: each example, and the framework module it needs
NEEDS = {
    "openai_agents_agent": "agents",
    "pydantic_ai_agent": "pydantic_ai",
    "langchain_agent": "langchain.agents",
}
PROMPT = "What is 17 + 25? Use the add tool."


def load(name: str) -> ModuleType:
    pytest.importorskip(NEEDS[name], reason=f"the {name} example's framework is not installed")
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_is_tested_here() -> None:
    assert sorted(p.stem for p in EXAMPLES.glob("*.py")) == sorted(NEEDS)


def _arguments(help_text: str) -> list[str]:
    """The usage line and the argument sections of ``--help``, without the description."""
    blocks = help_text.strip().split("\n\n")
    return [re.sub(r"\s+", " ", b) for b in blocks if b.startswith(("usage:", "positional arguments:", "options:"))]


def test_the_examples_take_the_same_arguments_in_the_same_order(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", ["example"])  # one program name in every usage line
    shapes = {}
    for name in NEEDS:
        example = load(name)
        with pytest.raises(SystemExit) as done:
            example.main(["--help"])
        assert done.value.code == 0
        shapes[name] = _arguments(capsys.readouterr().out)
    usage = shapes["pydantic_ai_agent"][0]
    assert usage == "usage: example [-h] [--base-url BASE_URL] [--model MODEL] [--db DB] [prompt]"
    assert shapes["openai_agents_agent"] == shapes["pydantic_ai_agent"] == shapes["langchain_agent"]


def _rows(db: Path, sid: str) -> list[dict[str, Any]]:
    store = Store(db)
    try:
        return ProxyLog(store).exchange_rows(sid)
    finally:
        store.close()


@pytest.mark.parametrize("name", list(NEEDS))
def test_each_example_runs_into_the_default_store_with_null_content_filled(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    example = load(name)
    db = tmp_path / "default.db"
    monkeypatch.setenv("CTXWRIGHT_DB", str(db))  # ctxwright's own store: no --db given
    for var in ("OPENAI_BASE_URL", "AGENT_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    add_call = F.reply_tool_calls([("call_1", "add", json.dumps({"a": 17, "b": 25}))])
    with F([add_call, F.reply_text("17 + 25 = 42")]) as srv:
        assert example.main(["--base-url", srv.url, "--model", "fake-model", PROMPT]) == 0
    assert srv.rejected == [] and len(srv.requests) == 2
    first, second = srv.requests
    assert first["model"] == "fake-model"
    assert any(m["role"] == "user" and PROMPT in json.dumps(m) for m in first["messages"])
    turns = [m for m in second["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert len(turns) == 1 and turns[0]["content"] == ""  # the adapter's default: "" for null
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "17 + 25 = 42"
    sid = out[-1].split()[1].rstrip(":")
    assert out[-1] == f"session {sid}: ctxwright audit {sid} --db {db}"
    assert [r["audit"]["cause"] for r in _rows(db, sid)] == ["first", "append"]  # the prefix held
    assert cli(["audit", sid, "--json"]) == 0  # the default store: no --db needed
    assert [r["cause"] for r in json.loads(capsys.readouterr().out)["requests"]] == ["first", "append"]


@pytest.mark.slow
def test_the_pydantic_ai_example_runs_against_llama_cpp_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example as a new user runs it, on llama-cpp-python's server and the bundled model.
    Measured: the tiny model calls ``add``, so pydantic-ai sends the tool-call turn back -- with
    ``"content": null`` this server would answer HTTP 500; the adapter's default sends ``""``, and
    every call is answered and recorded append-only, with no frozen-prefix warning."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    from llamaserver import LlamaServer

    example = load("pydantic_ai_agent")
    db = tmp_path / "ctx.db"
    with LlamaServer(tmp_path / "server.log") as srv:
        assert example.main(["--base-url", srv.url, "--model", srv.model, "--db", str(db), PROMPT]) == 0
        log = srv.tail()
    out, err = capsys.readouterr()
    sid = out.splitlines()[-1].split()[1].rstrip(":")
    assert "ctxwright: call #" not in err  # no frozen-prefix warning: the clock is appended, not rewritten
    rows = _rows(db, sid)
    assert len(rows) > 1, log  # a tool-call turn went back
    assert all(r["status"] == 200 for r in rows), log
    assert [r["audit"]["cause"] for r in rows] == ["first"] + ["append"] * (len(rows) - 1)
    sent = json.loads(rows[-1]["request_body"])
    turns = [m for m in sent["messages"] if m["role"] == "assistant"]
    assert turns and all(m["content"] == "" and m["tool_calls"] for m in turns)
