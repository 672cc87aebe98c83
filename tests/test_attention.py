"""``ctxwright attention``: the pinned llama.cpp tensor, the token-to-span mapping, the shares,
and the command's bad input.

The slow tests run the real embedded model (SmolLM2-135M in llama.cpp). One of them reads
``kq_soft_max-<layer>`` with its own ctypes callback, independently of ``attention/capture.py``,
so a llama.cpp that renames the tensor or changes its layout fails here by name.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright import Harness, ScriptedBackend, tool
from ctxwright.attention.capture import TENSOR_PREFIX, Capture, _GgmlTensor
from ctxwright.attention.model import AttentionMap, parse_layers
from ctxwright.attention.shares import build_map
from ctxwright.attention.spans import answer_text, assign_tokens, message_spans, token_starts
from ctxwright.backends.embedded import chat_template, render_request
from ctxwright.backends.scripted import call
from ctxwright.cli.main import main
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ChatRequest, ToolSpec
from ctxwright.errors import AttentionError

LOOKUP = ToolSpec.create("lookup", "Look up an order.", {"type": "object", "properties": {"id": {"type": "string"}}})
STATUS = "<agent_status>\ncalls.lookup: 2 calls\nlast_error: none\n</agent_status>"


def _request(system: str = "# Role\nYou help customers.\n\n# Rules\nBe brief. Ünïcode ✓.") -> ChatRequest:
    return ChatRequest(
        messages=(
            Message(role="system", content=system),
            Message(role="user", content="Check order A1 and A2"),
            Message(
                role="assistant",
                content=None,
                tool_calls=(ToolCall(id="c1", name="lookup", arguments='{"id":"A1"}'),),
            ),
            Message(role="tool", tool_call_id="c1", content='{"status":"shipped"}'),
            Message(role="user", content=STATUS),
            Message(role="user", content="How many times did I call lookup?"),
        ),
        tools=(LOOKUP,),
    )


def _chars(prompt: str, size: int = 3) -> tuple[list[int], dict[int, bytes]]:
    """A stand-in tokenizer: the prompt's bytes in chunks of ``size`` (crossing characters)."""
    raw = prompt.encode()
    chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
    return list(range(len(chunks))), dict(enumerate(chunks))


# -- spans (no model) -----------------------------------------------------------------------
def test_message_spans_partition_the_prompt_and_name_sections_and_status_lines():
    req = _request()
    prompt = render_request(chat_template({}), req)
    spans = message_spans(prompt, req)
    parts = [s for s in spans if s.kind in ("message", "answer")]
    assert [s.message_index for s in parts] == [0, 1, 2, 3, 4, 5, 6]
    assert parts[0].char_start == 0 and parts[-1].char_end == -1
    for a, b in itertools.pairwise(parts):
        assert a.char_end == b.char_start  # contiguous: nothing counted twice, nothing left out
    assert [s.label for s in parts[:6]] == [
        "#0 system",
        "#1 user",
        "#2 assistant → lookup",
        "#3 tool lookup",
        "#4 status bar",
        "#5 user",
    ]
    # the tool result's turn ends with the trailer the renderer adds: it belongs to the result
    assert prompt[parts[3].char_start : parts[3].char_end].rstrip().endswith("key values from these results.")
    fine = {s.label: prompt[s.char_start : s.char_end] for s in spans if s.kind not in ("message", "answer")}
    assert fine["status · calls.lookup"] == "calls.lookup: 2 calls\n"
    assert fine["status · last_error"] == "last_error: none\n"
    assert fine["system § Role"].startswith("# Role\n") and "Be brief" in fine["system § Rules"]
    assert fine["system § Tools"].startswith("# Tools") and "lookup" in fine["system § Tools"]


def test_a_template_that_rewrites_text_is_refused_not_mismapped():
    req = _request()
    prompt = render_request(chat_template({}), req).replace("Check order", "CHECK ORDER")
    with pytest.raises(AttentionError, match=r"message 1 \(user\) is not in the rendered prompt"):
        message_spans(prompt, req)


def test_token_starts_map_bytes_to_characters_and_check_the_pieces():
    prompt = "ab✓c Ünï"
    toks, pieces = _chars(prompt)
    starts = token_starts(prompt, toks, pieces.__getitem__)
    # every start is the character holding that token's first byte
    raw = prompt.encode()
    assert starts == [len(raw[:i].decode(errors="ignore")) for i in range(0, len(raw), 3)]
    with pytest.raises(AttentionError, match="tokenizer's pieces make"):
        token_starts(prompt + "x", toks, pieces.__getitem__)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5),
    st.integers(min_value=1, max_value=7),
)
def test_every_token_lands_in_exactly_one_message_span(contents, size):
    msgs = [Message(role="system", content="# S\nsys")] + [
        Message(role="user" if i % 2 == 0 else "assistant", content=c) for i, c in enumerate(contents)
    ]
    req = ChatRequest(messages=tuple(msgs))
    prompt = render_request(chat_template({}), req)
    toks, pieces = _chars(prompt, size)
    starts = token_starts(prompt, toks, pieces.__getitem__)
    total = len(toks) + 2  # two answer tokens after the prompt
    spans = [s for s in assign_tokens(message_spans(prompt, req), starts, total) if s.kind in ("message", "answer")]
    assert spans[0].start == 0 and spans[-1].end == total
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))


def test_answer_text_is_the_json_the_model_writes():
    assert answer_text("Paris") == '{"answer": "Paris"}'
    assert answer_text('{"answer":"Paris"}') == '{"answer":"Paris"}'  # raw generated JSON kept byte for byte
    assert answer_text('{"tool_calls": {"lookup": {"id": "A1"}}}').startswith('{"tool_calls"')
    assert answer_text('"just a string"') == '{"answer": "\\"just a string\\""}'


# -- shares (no model) ----------------------------------------------------------------------
def _capture(P: int, A: int, layers: int, rng: np.random.Generator) -> Capture:
    cap = Capture(layers, P, A, tuple(range(A)))
    for _ in range(layers):
        v = np.zeros(P + A - 1)
        v[1:] = rng.random(P + A - 2)
        v /= v.sum()
        cap.nonsink.append(v)
        cap.sink.append(float(rng.random()))
    return cap


def test_build_map_sums_message_shares_to_one_and_keeps_the_sink_apart():
    req = _request()
    prompt = render_request(chat_template({}), req)
    toks, pieces = _chars(prompt, 4)
    cap = _capture(len(toks), 5, 6, np.random.default_rng(1))
    spans = assign_tokens(message_spans(prompt, req), token_starts(prompt, toks, pieces.__getitem__), cap.n_keys)
    m = build_map("m", cap, spans, token_text=["t"] * len(toks), answer_tokens=["a"] * 5, strip_layers=(2, 3), meta={})
    totals = np.array([s.share_by_layer for s in m.messages()]).sum(axis=0)
    assert np.allclose(totals, 1.0, atol=1e-9)
    assert m.spans[0].sink_share_by_layer == tuple(cap.sink)  # the first span holds token 0
    assert all(s.sink_share_by_layer == (0.0,) * 6 for s in m.spans[1:] if s.start > 0)
    assert len(m.token_share) == len(toks)
    assert m.token_share[5] == pytest.approx((cap.nonsink[2][5] + cap.nonsink[3][5]) / 2)
    back = AttentionMap.from_json(json.loads(json.dumps(m.to_json())))
    assert [s.label for s in back.spans] == [s.label for s in m.spans]
    assert back.spans[3].share_by_layer == pytest.approx(m.spans[3].share_by_layer, abs=1e-6)
    only = m.restrict([1, 4])
    assert only.layers == (1, 4) and only.spans[2].share_by_layer == (
        m.spans[2].share_by_layer[1],
        m.spans[2].share_by_layer[4],
    )


def test_parse_layers():
    assert parse_layers("15-17", 30) == (15, 16, 17)
    assert parse_layers("3,5,7-8", 30) == (3, 5, 7, 8)
    assert parse_layers("all", 4) == (0, 1, 2, 3)
    for bad, says in (("9-3", "runs backwards"), ("x", "not a layer range"), ("31", "layers 0-29, not 31")):
        with pytest.raises(AttentionError, match=says):
            parse_layers(bad, 30)


def test_from_json_refuses_what_is_not_a_map():
    with pytest.raises(AttentionError, match="not an attention map"):
        AttentionMap.from_json({"model": "m"})


# -- the command's bad input (no model) ------------------------------------------------------
@pytest.mark.parametrize(
    "args,says",
    [
        ([], "name what to explain"),
        (["--request", "{req}"], "--request needs --answer"),
        (["--request", "{missing}", "--answer", "1"], "no such file"),
        (["--request", "{notjson}", "--answer", "1"], "is not JSON"),
        (["--request", "{nomsgs}", "--answer", "1"], 'has no "messages" list'),
        (["--request", "{deep}", "--answer", "1"], "nests too deeply"),
        (["--request", "{req}", "--answer", " "], "--answer is empty"),
        (["--request", "{req}", "--answer", "1", "--call", "2"], "a --request file is one call"),
        (["abc", "--request", "{req}", "--answer", "1"], "not both"),
        (["abc", "--answer", "1"], "--answer goes with --request"),
        (["--request", "{req}", "--answer", "1", "-o", "{tmp}"], "is a folder"),
        (["nosuchsession"], "no session 'nosuchsession'"),
        # half of a UTF-16 pair: the tokenizer's UTF-8 encoding failed on it after the model loaded
        (["--request", "{surrogate}", "--answer", "1"], "messages[1].content holds a lone UTF-16 surrogate"),
        (["--request", "{req}", "--answer", "a \udcff"], "--answer holds a character that is not text"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, args, says):
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    (tmp_path / "notjson.json").write_text("{]")
    (tmp_path / "nomsgs.json").write_text('{"messages": []}')
    (tmp_path / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "surrogate.json").write_text(
        '{"messages": [{"role": "user", "content": "ok \\ud83d\\ude00"}, {"role": "user", "content": "x \\ud800"}]}'
    )
    paths = {
        "req": req,
        "missing": tmp_path / "missing.json",
        "notjson": tmp_path / "notjson.json",
        "nomsgs": tmp_path / "nomsgs.json",
        "deep": tmp_path / "deep.json",
        "surrogate": tmp_path / "surrogate.json",
        "tmp": tmp_path,
    }
    from ctxwright.store.sessions import Store

    Store(tmp_path / "a.db").close()  # a store that exists (reading commands create none), without that session
    code = main(["attention", *(a.format(**paths) for a in args), "--db", str(tmp_path / "a.db")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_oversized_request_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    import ctxwright.cli.attention as cli

    monkeypatch.setattr(cli, "MAX_REQUEST_BYTES", 100)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"messages": [{"role": "user", "content": "x" * 200}]}))
    assert main(["attention", "--request", str(big), "--answer", "1"]) == 2
    assert "over 100" in capsys.readouterr().err


@tool
def lookup(id: str) -> str:
    """Look up an order.

    Args:
        id: the order id
    """
    return json.dumps({"id": id, "status": "shipped"})


def _scripted_session(db: Path) -> str:
    replies = [Message(role="assistant", tool_calls=(call("lookup", {"id": "A1"}, "c1"),)), "It has shipped."]
    with Harness(system="# Role\nYou help.", tools=[lookup], backend=ScriptedBackend(replies), db=db) as h:
        h.run("Where is order A1?")
        return h.session_id


def test_a_session_from_a_served_model_needs_the_gguf_that_answered(tmp_path, capsys):
    sid = _scripted_session(tmp_path / "a.db")
    assert main(["attention", sid, "--db", str(tmp_path / "a.db"), "--json"]) == 2
    assert "pass --gguf PATH of the model that answered" in capsys.readouterr().err


# -- the real model ------------------------------------------------------------------------
@pytest.mark.slow
def test_the_pinned_tensor_name_shape_causal_zeros_and_row_sums():
    """Read ``kq_soft_max-<layer>`` with a callback of this test's own: every layer once, shaped
    ``[n_kv >= keys, rows, heads, 1]`` float32, rows summing to 1, zero past each row's position."""
    import llama_cpp

    from ctxwright.backends.embedded import find_model_file

    llm = llama_cpp.Llama(model_path=str(find_model_file()), n_ctx=64, verbose=False)
    toks = llm.tokenize(
        b"<|im_start|>user\nName the capital of France.<|im_end|>\n<|im_start|>assistant\nParis", special=True
    )
    n_head = llama_cpp.llama_model_n_head(llm.model)
    n_layer = llama_cpp.llama_model_n_layer(llm.model)
    got: dict[str, np.ndarray] = {}

    def cb(ptr: int, ask: bool, _: int) -> bool:
        t = ctypes.cast(ptr, ctypes.POINTER(_GgmlTensor)).contents
        name = t.name.decode()
        if not name.startswith(TENSOR_PREFIX):
            return False
        if not ask:
            ne = tuple(t.ne)
            assert t.type == 0 and t.nb[0] == 4
            buf = (ctypes.c_float * (ne[0] * ne[1] * ne[2] * ne[3])).from_address(t.data)
            got[name] = np.ctypeslib.as_array(buf).reshape(ne[3], ne[2], ne[1], ne[0]).copy()
        return True

    keep = llama_cpp.ggml_backend_sched_eval_callback(cb)
    p = llama_cpp.llama_context_default_params()
    p.n_ctx = p.n_batch = p.n_ubatch = 256
    p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    p.cb_eval = keep
    ctx = llama_cpp.llama_init_from_model(llm.model, p)
    try:
        arr = (llama_cpp.llama_token * len(toks))(*toks)
        assert llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(toks))) == 0
    finally:
        llama_cpp.llama_free(ctx)
        llm.close()
    assert sorted(got) == sorted(f"{TENSOR_PREFIX}{i}" for i in range(n_layer))
    for a in got.values():
        assert a.shape[0] == 1 and a.shape[1] == n_head and a.shape[2] == len(toks) and a.shape[3] >= len(toks)
        assert np.allclose(a.sum(axis=-1), 1.0, atol=1e-3)
        for q in range(len(toks)):
            assert np.abs(a[0, :, q, q + 1 :]).max(initial=0.0) < 1e-6


@pytest.mark.slow
def test_attention_of_a_request_file_rows_sum_to_one_and_the_html_is_written(tmp_path, capsys):
    req = _request()
    body = {**req.to_wire("m")}
    path = tmp_path / "req.json"
    path.write_text(json.dumps(body))
    html = tmp_path / "a.html"
    assert main(["attention", "--request", str(path), "--answer", "2", "--json", "-o", str(html)]) == 0
    out = capsys.readouterr().out
    data = json.loads(out.splitlines()[0])
    assert data["layers"] == list(range(30)) and data["answer_tokens"][-2] == "2"
    messages = [s for s in data["spans"] if s["kind"] in ("message", "answer")]
    totals = np.array([s["share_by_layer"] for s in messages]).sum(axis=0)
    assert np.allclose(totals, 1.0, atol=1e-3)
    assert data["spans"][0]["sink_share_by_layer"] == data["sink_share_by_layer"]
    labels = {s["label"] for s in data["spans"]}
    assert {"#4 status bar", "status · calls.lookup", "system § Rules", "system § Tools"} <= labels
    assert sum(s["tokens"] for s in messages) == data["prompt_tokens"] + len(data["answer_tokens"]) - 1
    assert len(data["tokens"]["text"]) == data["prompt_tokens"] and len(data["answer_logprobs"]) == 6
    assert html.stat().st_size > 10_000
    page = html.read_text(encoding="utf-8")
    # "attention" once in the title; the answer rows read said as a count, not listed
    assert f"<title>ctxwright attention · request {path}</title>" in page
    (heading,) = re.findall(r'<div class="meta">model (.*?)</div>', page)
    assert heading.endswith("answer tokens read: all 6") and "rows" not in heading, heading
    # the table, over a layer range
    assert main(["attention", "--request", str(path), "--answer", "2", "--layers", "15-24", "-o", str(html)]) == 0
    table = capsys.readouterr().out
    assert "layers 15-24" in table and "status · calls.lookup" in table and "#4 status bar" in table


@pytest.mark.slow
def test_a_stored_call_is_explained_and_kept_for_the_report(tmp_path, capsys):
    from ctxwright.backends.embedded import find_model_file
    from ctxwright.store.sessions import Store

    db = tmp_path / "a.db"
    sid = _scripted_session(db)
    gguf = str(find_model_file())
    args = ["attention", sid[:10], "--gguf", gguf, "--db", str(db), "--json"]
    assert main([*args, "--call", "9"]) == 2
    assert "has no call 9; its calls are 0-1" in capsys.readouterr().err
    assert main([*args, "--call", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["meta"]["call"] == 0 and data["meta"]["answer"] == '{"tool_calls": {"lookup": {"id": "A1"}}}'
    assert [s["label"] for s in data["spans"] if s["kind"] == "message"] == ["#0 system", "#1 user", "#2 status bar"]
    assert main(args) == 0  # the last call: the answer after the tool result
    last = json.loads(capsys.readouterr().out)
    assert last["meta"]["answer"] == '{"answer": "It has shipped."}'
    store = Store(db)
    try:
        stored = store.attention_maps(sid)
    finally:
        store.close()
    assert [k for k, _ in stored] == [0, 1]
    assert AttentionMap.from_json(stored[1][1]).meta["call"] == 1


@pytest.mark.slow
def test_a_kept_context_gives_what_a_fresh_one_gives():
    """The reader keeps its context and prefills only past the common prefix: a second request
    sharing the first's history must read the same attention as a reader that never saw it."""
    from ctxwright.attention.capture import AttentionReader
    from ctxwright.attention.shares import attention_map

    first = _request()
    second = ChatRequest(
        messages=(*first.messages[:-1], Message(role="user", content="Which order did you check?")), tools=first.tools
    )
    with AttentionReader() as warm:
        attention_map(warm, first, "2")
        reused = attention_map(warm, second, "A1")
        again = attention_map(warm, second, "A1")
    with AttentionReader() as cold:
        fresh = attention_map(cold, second, "A1")
    for a, b, c in zip(reused.spans, fresh.spans, again.spans, strict=True):
        assert a.label == b.label
        assert a.share_by_layer == pytest.approx(b.share_by_layer, abs=1e-4)
        assert c.share_by_layer == pytest.approx(b.share_by_layer, abs=1e-4)
    assert reused.answer_logprobs == pytest.approx(fresh.answer_logprobs, abs=1e-3)
