"""The wire form of an assistant turn without text (``core/render.py``, session meta
``null_content``): ``empty`` sends ``"content": ""`` (every server takes it), ``omit`` leaves
the key out of a tool-call turn (OpenAI takes it, and the ``openai`` SDK's request transform
then walks one key less per turn), ``null`` is the form of sessions recorded before.

What is held here: each form's rendered request; the form is chosen by the backend when a
session starts and kept by a resumed session whatever the backend says then; the requests of
an ``omit`` session are audited as appends (no false break) and arrive at the server exactly
as rendered (the OpenAI backend hands the messages to the SDK in ``extra_body``); the
embedded backend and the replay's matching see the three forms alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxwright import Harness, tool
from ctxwright.backends.embedded import adapt_messages
from ctxwright.backends.external import ExternalBackend
from ctxwright.backends.openai_compat import OpenAIBackend
from ctxwright.core.events import AssistantEvent, MessageEvent
from ctxwright.core.messages import Message, ToolCall, assistant, tool_result, user
from ctxwright.core.prefix import Prefix
from ctxwright.core.progress import ProgressEvent, RequestSent
from ctxwright.core.render import NULL_CONTENT_KEY, NullContent, RenderSettings, render
from ctxwright.replay.matching import said
from ctxwright.replay.turns import CHAT
from fakeserver import FakeOpenAIServer as S


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CALL = ToolCall("c1", "add", '{"a":2,"b":3}')
FORMS: tuple[NullContent, ...] = ("null", "empty", "omit")


def _events() -> list[MessageEvent]:
    msgs = [
        user("2 + 3?"),
        assistant(None, [CALL]),  # a tool-call turn without text
        tool_result("c1", "5"),
        assistant("checking", [ToolCall("c2", "add", '{"a":5,"b":1}')]),  # with text
        tool_result("c2", "6"),
        assistant(None),  # neither text nor calls (a server needs content here)
    ]
    return [
        AssistantEvent(seq=i, message=m) if m.role == "assistant" else MessageEvent(seq=i, message=m)
        for i, m in enumerate(msgs)
    ]


def _assistant_wire(form: NullContent) -> list[dict[str, Any]]:
    out = render(Prefix.build("sys"), _events(), RenderSettings(null_content=form))
    return [m.to_wire() for m in out if m.role == "assistant"]


def test_each_form_renders_the_tool_call_turn_as_named() -> None:
    null, empty, omit = (_assistant_wire(f) for f in FORMS)
    assert [w.get("content", "ABSENT") for w in null] == [None, "checking", None]
    assert [w.get("content", "ABSENT") for w in empty] == ["", "checking", ""]
    # omit: no key on the tool-call turn; text kept; "" where there are no tool calls
    assert [w.get("content", "ABSENT") for w in omit] == ["ABSENT", "checking", ""]
    assert omit[0] == {"role": "assistant", "tool_calls": [CALL.to_wire()]}
    for forms in zip(null, empty, omit, strict=True):  # nothing else differs
        assert len({json.dumps({k: v for k, v in w.items() if k != "content"}) for w in forms}) == 1


def test_omit_content_is_refused_where_it_would_drop_something() -> None:
    with pytest.raises(ValueError, match="omit_content"):
        Message(role="assistant", content="text", tool_calls=(CALL,), omit_content=True)
    with pytest.raises(ValueError, match="omit_content"):
        Message(role="assistant", content=None, omit_content=True)


def test_an_unknown_form_in_the_meta_or_a_backend_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="'null', 'empty' or 'omit'"):
        RenderSettings.from_meta({NULL_CONTENT_KEY: "absent"})
    with pytest.raises(ValueError, match="null_content='absent'"):
        ExternalBackend("m", null_content="absent")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="null_content='absent'"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", null_content="absent")  # type: ignore[arg-type]


def test_the_openai_backend_omits_the_key_only_on_a_host_known_to_take_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIBackend("gpt-4o-mini").null_content == "omit"  # the SDK's default: api.openai.com
    assert OpenAIBackend("m", base_url="https://API.openai.com/v1").null_content == "omit"
    # anything else may be llama-cpp-python's server, which answers a missing key with HTTP 500
    assert OpenAIBackend("m", base_url="http://127.0.0.1:8080/v1").null_content == "empty"
    assert OpenAIBackend("m", base_url="https://api.deepseek.com").null_content == "empty"
    assert OpenAIBackend("m", base_url="http://127.0.0.1:8080/v1", null_content="omit").null_content == "omit"
    assert ExternalBackend("m").null_content == "empty"


def _harness(srv: S, db: Path, backend: OpenAIBackend, events: list[ProgressEvent], **kw: Any) -> Harness:
    return Harness(
        system="You add numbers with the add tool.",
        tools=[add],
        backend=backend,
        db=db,
        status=False,
        todo=False,
        delegate=False,
        read_result=False,
        compaction=False,
        on_event=events.append,
        **kw,
    )


def test_an_omit_session_sends_what_it_renders_audits_appends_and_keeps_its_form_on_resume(tmp_path: Path) -> None:
    db = tmp_path / "omit.db"
    events: list[ProgressEvent] = []
    with S(
        [
            S.reply_tool_calls([("c1", "add", '{"a":2,"b":3}')], usage=S.usage_openai(80, 9)),
            S.reply_text("5", usage=S.usage_openai(100, 1)),
            S.reply_tool_calls([("c2", "add", '{"a":5,"b":1}')], usage=S.usage_openai(120, 9)),
            S.reply_text("6", usage=S.usage_openai(140, 1)),
        ]
    ) as srv:
        backend = OpenAIBackend("m", base_url=srv.url, null_content="omit")
        with _harness(srv, db, backend, events) as h:
            first = h.run("2 + 3?")
            sid = h.session_id
            assert h.session.meta[NULL_CONTENT_KEY] == "omit"
        # resumed on a backend whose own choice is "empty": the session keeps "omit"
        resumed_backend = OpenAIBackend("m", base_url=srv.url)
        assert resumed_backend.null_content == "empty"
        with _harness(srv, db, resumed_backend, events, resume=sid) as h:
            second = h.run("and 5 + 1?")
            assert h.session.meta[NULL_CONTENT_KEY] == "omit"
        received = srv.recorded
    sent = [e.request for e in events if isinstance(e, RequestSent)]
    assert len(sent) == len(received) == 4
    for request, got in zip(sent, received, strict=True):
        # the messages reach the server exactly as rendered, in the same place of the body
        body = json.loads(got.raw)
        assert body["messages"] == [m.to_wire() for m in request.messages]
        assert list(body)[:2] == ["model", "messages"]  # where the SDK puts its own arguments
        assert body["tools"] and body["tool_choice"] == "auto"
    turns = [m for m in json.loads(received[3].raw)["messages"] if m["role"] == "assistant"]
    assert [("content" in t, bool(t.get("tool_calls"))) for t in turns] == [(False, True), (True, False), (False, True)]
    # no false break: every call after the first extends the one before, across the resume
    assert first.stop_reason == second.stop_reason == "final_answer"
    assert [c.cause for c in first.calls + second.calls][1:] == ["append", "append", "append"]


def test_the_embedded_backend_and_the_replay_see_every_form_alike() -> None:
    rendered = [render(Prefix.build("sys"), _events(), RenderSettings(null_content=f)) for f in FORMS]
    prompts = [adapt_messages(tuple(r), ()) for r in rendered]
    assert prompts[0] == prompts[1] == prompts[2]
    # a golden recorded with "" and a run sending no key: the same turns to the replay
    bodies = [{"messages": [m.to_wire() for m in r]} for r in rendered]
    assert said(CHAT, bodies[0]) == said(CHAT, bodies[1]) == said(CHAT, bodies[2])


def test_the_backend_sends_the_bytes_the_sdk_sends_for_messages_given_as_its_argument(tmp_path: Path) -> None:
    """The messages go to the SDK in ``extra_body`` (its request transform skipped): the body
    must stay byte for byte what the SDK sends when they are its ``messages`` argument."""
    import openai

    from ctxwright.core.request import ChatRequest

    request = ChatRequest(
        messages=(
            Message(role="system", content="sys"),
            user("2 + 3?"),
            assistant(None, [CALL]),
            tool_result("c1", "5"),
        ),
        max_tokens=16,
        temperature=0.0,
    )
    with S([S.reply_text("5"), S.reply_text("5")]) as srv:
        OpenAIBackend("m", base_url=srv.url).complete(request)
        body = request.openai_body("m")
        client = openai.OpenAI(api_key="k", base_url=srv.url, max_retries=0)
        client.chat.completions.create(model=body.pop("model"), messages=body.pop("messages"), extra_body=body)
        client.close()
        ours, theirs = (r.raw for r in srv.recorded)
    assert ours == theirs


@pytest.mark.slow
def test_llama_cpp_server_takes_the_default_form_and_refuses_the_key_left_out(tmp_path: Path) -> None:
    """Why ``empty`` is the default off OpenAI's API: llama-cpp-python's server answers the
    tool-call turn without a ``content`` key with HTTP 500, and takes ``""``. The requests are
    rendered here (no model decides anything), each form sent once."""
    pytest.importorskip("llama_cpp.server.app", reason="llama-cpp-python's server extra is not installed")
    from ctxwright.core.request import ChatRequest
    from ctxwright.errors import BackendError
    from llamaserver import LlamaServer

    prefix = Prefix.build("You add numbers with the add tool.", (add.spec,))
    events = _events()[:3]  # the question, the tool-call turn without text, its result
    with LlamaServer(tmp_path / "server.log") as srv:
        backend = OpenAIBackend(srv.model, base_url=srv.url, max_retries=0, timeout=300)
        assert backend.null_content == "empty"
        outcomes: dict[str, str] = {}
        for form in ("empty", "omit"):
            messages = render(prefix, events, RenderSettings(null_content=form))
            request = ChatRequest(tuple(messages), tools=prefix.tools, max_tokens=8)
            try:
                backend.complete(request)
                outcomes[form] = "ok"
            except BackendError as exc:
                outcomes[form] = str(exc)
        backend.close()
        log = srv.tail()
    assert outcomes["empty"] == "ok", f"{outcomes}\n{log}"
    assert "500" in outcomes["omit"], f"{outcomes}\n{log}"
