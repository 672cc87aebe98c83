"""ctxwright against llama-cpp-python's own server (``python -m llama_cpp.server``), started
by the test on a free 127.0.0.1 port with the bundled SmolLM2-135M (``tests/llamaserver.py``).

What a new user met there (issue 11): every tool loop died on its second call (the
assistant's tool-call turn went out with ``"content": null``, which that server answers
with HTTP 500); a streamed request with tools comes back as an empty 200; the server
reports no cached tokens, so the wall time is what shows reuse; with ``--chat_format
chatml`` it drops the tools without a word, which the ledger check now says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwright import Harness, tool
from ctxwright.core.progress import LedgerWarning, ProgressEvent, Retry, StreamFallback, ToolDone
from ctxwright.core.render import NULL_CONTENT_KEY
from ctxwright.store.sessions import Store
from llamaserver import LlamaServer

pytest.importorskip(
    "llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed (make test installs it)"
)
pytestmark = pytest.mark.slow


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_tool_loop_runs_against_llama_cpp_server(tmp_path: Path) -> None:
    """The whole loop, streamed: call 1 asks for ``add`` (the streamed request comes back
    empty, so the backend falls back to a plain one), the result goes back with the
    tool-call turn as ``"content": ""``, call 2 answers."""
    events: list[ProgressEvent] = []
    db = tmp_path / "loop.db"
    with LlamaServer(tmp_path / "server.log") as srv:
        with Harness(
            system="You add numbers with the add tool.",
            tools=[add],
            backend="openai",
            model=srv.model,
            base_url=srv.url,
            db=db,
            status=False,
            todo=False,
            delegate=False,
            read_result=False,
            recall=False,
            compaction=False,
            max_tool_rounds=1,
            max_tokens=48,
            stream=True,
            on_event=events.append,
        ) as h:
            result = h.run("What is 2 + 3? Use the add tool.")
            sid = h.session_id
        log = srv.tail()
    assert result.stop_reason == "final_answer", f"{result.error}\n{log}"
    assert [r.tool_calls for r in result.calls] == [1, 0]
    assert [e.content for e in events if isinstance(e, ToolDone)] == ["5"]
    assert [e.reason for e in events if isinstance(e, StreamFallback)] == [
        "the server answered the streamed request with an empty stream"
    ]
    assert not [e for e in events if isinstance(e, Retry)]
    store = Store(db)
    assert store.get_session(sid).meta[NULL_CONTENT_KEY] == "empty"
    calls = store.calls(sid)
    store.close()
    # what docs/servers.md says this server reports, as measured here: prompt and completion
    # tokens, no cached-token field, no timings -- so the wall time is stored with each call
    assert all(c.prompt_tokens and c.cached_tokens is None for c in calls)
    assert all("timings" not in c.usage["raw"] for c in calls)
    assert all(isinstance(c.wall_ms, float) and c.wall_ms > 0 for c in calls)


def test_a_server_that_drops_the_tools_is_warned_about(tmp_path: Path) -> None:
    """``--chat_format chatml`` renders no tools: the server counts ~390 prompt tokens
    where ctxwright counts ~1,160 (the default tools alone are ~800)."""
    events: list[ProgressEvent] = []
    with LlamaServer(tmp_path / "server.log", chat_format="chatml") as srv:
        with Harness(
            backend="openai",
            model=srv.model,
            base_url=srv.url,
            db=tmp_path / "drop.db",
            max_iterations=1,
            max_tokens=16,
            on_event=events.append,
        ) as h:
            result = h.run("What's the current time and weather in Vancouver?")
        log = srv.tail()
    assert result.stop_reason in ("final_answer", "max_iterations"), f"{result.error}\n{log}"
    (warning,) = [e.mismatch for e in events if isinstance(e, LedgerWarning)]
    assert warning.kind == "tools_dropped" and "dropped the tools" in warning.message
    (report,) = result.calls
    assert report.prompt_tokens is not None and report.prompt_tokens < report.ledger.total - report.ledger.tools // 2
