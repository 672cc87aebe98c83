"""The content-aware compressors (``compaction/compress/``): each rule, its determinism, that
nothing is dropped, hostile input in bounded time and memory, and the original recoverable
after a run through the result budget."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc

from ctxwright.agent.loop import Agent, AgentConfig
from ctxwright.backends.scripted import ScriptedBackend, call
from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.budget import apply_budget
from ctxwright.compaction.compress import (
    Compressed,
    Earlier,
    compress_result,
    json_table,
    logs,
    names_in,
    outline,
    repeats,
)
from ctxwright.compaction.identifiers import extract
from ctxwright.compaction.offload import ResultFiles
from ctxwright.compaction.retrieval import ResultReader
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens
from ctxwright.defence.marking import unwrap
from ctxwright.tools.registry import ToolRegistry, tool


def A(*calls: ToolCall) -> Message:
    return Message(role="assistant", content=None, tool_calls=tuple(calls))


def _listing(n: int) -> list[dict[str, object]]:
    return [
        {"id": i, "name": f"svc-{i}", "port": 8000 + i, "ratio": "0.50", "weight": 1.50, "tags": ["a", {"b": i}]}
        for i in range(n)
    ]


def _log(n: int) -> str:
    lines = [f"2026-12-06 12:{i // 60:02d}:{i % 60:02d} Downloading layer {i} of {n} ({i * 3} kB)" for i in range(n)]
    lines[n // 2] = "2026-12-06 12:00:30 ERROR: checksum mismatch in layer 17"
    lines[n // 3] = "2026-12-06 12:00:20 Downloading layer from https://registry.example.com/v2/app/blobs/7f3a9c1"
    lines.append("build id 4be1a9e0c2 finished; warnings: 2")
    return "\n".join(lines)


# -- json_table --------------------------------------------------------------------------
def test_json_array_becomes_a_table_that_parses_back_to_the_same_items():
    items = _listing(40)
    text = json.dumps(items, indent=2)
    c = compress_result(text, call_id="c1")
    assert c.rule == "json_table" and c.saved_chars == len(text) - len(c.text) and c.saved_chars > len(text) // 2
    keys, back = json_table.parse_table(c.text)
    assert keys == ["id", "name", "port", "ratio", "weight", "tags"]
    assert back == json.loads(text)
    literal = "[" + ",".join(f'{{"v": 1.50, "big": 1e400, "n": {i}, "pad": "padding"}}' for i in range(20)) + "]"
    out = json_table.compress(literal)
    assert out is not None and "\n1.50,1e400,0," in out  # a number keeps its literal form


def test_the_largest_array_inside_an_object_is_tabled_and_the_rest_kept():
    doc = {"total": 30, "page": {"next": "cursor-9", "items": _listing(30)}, "small": [{"x": 1}, {"x": 2}]}
    text = json.dumps(doc, indent=1)
    out = json_table.compress(text)
    assert out is not None
    _, back = json_table.parse_table(out)
    assert back == doc["page"]["items"]
    rest = json.loads(out.split("\n")[-1])
    assert rest == {**doc, "page": {"next": "cursor-9", "items": json_table.PLACEHOLDER}}


def test_objects_with_different_keys_keep_each_key_they_have():
    items = [{"a": 1, "b": "x"}] * 10 + [{"c": None}, {"a": "", "c": [1, 2]}]
    text = json.dumps(items, indent=4)
    out = json_table.compress(text)
    assert out is not None and json_table.parse_table(out)[1] == items


def test_json_that_a_table_would_not_shorten_or_that_has_a_duplicate_key_is_left_alone():
    assert json_table.compress(json.dumps([{"a": 1}, {"a": 2}])) is None  # too small to save 15 %
    dup = "[" + ",".join('{"k": 1, "k": 2, "other": "padding padding padding"}' for _ in range(30)) + "]"
    assert json_table.compress(dup) is None  # a parser would keep only one "k"
    assert json_table.compress('{"a": [1, 2, 3], "b": "no objects"}') is None


# -- repeats -------------------------------------------------------------------------------
def _apply_diff(old: str, ref: str) -> str:
    """Rebuild a result from the earlier text and the repeat rule's form (nothing dropped)."""
    lines = old.split("\n")
    out: list[str] = []
    pos = 0
    body = ref.split("\n")[1:]
    i = 0
    while i < len(body):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", body[i])
        assert m, body[i]
        start, count = int(m.group(1)), int(m.group(2) or 1)
        first = start - 1 if count else start
        out.extend(lines[pos:first])
        pos = first + count
        i += 1
        while i < len(body) and body[i][:1] in "-+" and not body[i].startswith("@@"):
            if body[i][0] == "+":
                out.append(body[i][1:])
            i += 1
    out.extend(lines[pos:])
    return "\n".join(out)


def test_a_near_repeat_is_a_reference_plus_the_lines_that_differ():
    first = "\n".join(f"tests/test_mod{i}.py::test_case PASSED [{i}%]" for i in range(60))
    second = first.replace("test_mod7.py::test_case PASSED", "test_mod7.py::test_case FAILED")
    second += "\nFAILED tests/test_mod7.py::test_case - AssertionError: 41 != 42"
    e = Earlier()
    e.add("call_1", first)
    c = compress_result(second, call_id="call_2", earlier=e)
    assert c.rule == "repeat" and c.text.startswith("[same as the result of call call_1 except")
    assert "+tests/test_mod7.py::test_case FAILED [7%]" in c.text and "AssertionError: 41 != 42" in c.text
    assert _apply_diff(first, c.text) == second
    assert compress_result(second, call_id="call_2", earlier=e) == c  # deterministic


def test_an_identical_repeat_names_the_first_call_and_a_result_never_refers_to_itself():
    text = "\n".join(f"pod-{i} Running 0 {i}d" for i in range(50))
    e = Earlier()
    e.add("k1", text)
    e.add("k2", text)
    assert compress_result(text, call_id="k3", earlier=e).text == repeats.identical("k1")
    assert "k1" not in compress_result(text, call_id="k1", earlier=e).text  # k2 is the same text


def test_earlier_keeps_a_bounded_number_of_texts_but_every_hash():
    e = Earlier(max_texts=2, max_text_chars=100)
    for k in range(5):
        e.add(f"c{k}", f"result {k}\n" * 5)
    e.add("big", "x" * 101)
    assert [cid for cid, _ in e.recent()] == ["c4", "c3"]
    assert compress_result("result 0\n" * 5, call_id="new", earlier=e).text == repeats.identical("c0")
    assert compress_result("x" * 101, call_id="new", earlier=e).text == repeats.identical("big")


# -- logs ----------------------------------------------------------------------------------
def test_a_log_folds_runs_and_keeps_every_error_and_identifier_line():
    text = _log(400)
    c = compress_result(text, call_id="l1")
    assert c.rule == "log_fold" and c.saved_chars > len(text) // 2
    out = c.text.split("\n")
    for line in text.split("\n"):
        if re.search("error|warn", line, re.I) or "https://" in line:
            assert line in out
    for ident in ("https://registry.example.com/v2/app/blobs/7f3a9c1", "4be1a9e0c2"):
        assert ident in c.text
    # every line is either shown or counted
    shown = [line for line in out if not line.startswith("[… ")]
    counted = sum(int(m.group(1)) for m in re.finditer(r"\[… (\d+) more like this\]", c.text))
    assert len(shown) + counted == len(text.split("\n"))
    assert out[0] == text.split("\n")[0] and "Downloading layer 399 of 400" in c.text  # a run's last line
    assert compress_result(text, call_id="l1") == c


def test_every_identifier_of_a_log_is_still_shown_after_folding():
    lines = [f"fetched commit {i:07x}a0 ok" for i in range(300)] + ["done"]
    text = "\n".join(lines)
    out = logs.compress(text)
    assert out is None or all(i in out for i in extract(text, limit=10_000))


def test_source_code_is_never_folded_and_outlined_only_on_request():
    src = "\n".join(
        [f"def handler_{i}(request):\n    value = table[{i}]\n    return value\n" for i in range(80)]
        + ["class ParseHeaderError(Exception):\n    pass\n", "def parse_header(raw):\n    raise ParseHeaderError(raw)"]
        + ["RETRIES = 3\n", "def fetch():\n    url = 'https://api.example.com/v2/items'\n    return url\n"]
    )
    assert compress_result(src, call_id="s1").rule == "none"  # kept exact: a model edits these bytes
    o = outline(src, names_in("why does parse_header fail?"))
    assert isinstance(o, Compressed) and o.rule == "code_outline"
    assert "def handler_42(request):" in o.text and "def parse_header(raw):" in o.text
    assert "raise ParseHeaderError(raw)" in o.text and "value = table" not in o.text
    assert "RETRIES = 3" in o.text and "https://api.example.com/v2/items" in o.text  # a constant, a fact
    assert outline("just some prose\n" * 50) is None


# -- hostile input ---------------------------------------------------------------------------
def test_deeply_nested_json_is_left_alone_in_bounded_memory():
    text = "[" * 200_000 + "]" * 200_000
    obj = '{"a":' * 100_000 + "1" + "}" * 100_000
    tracemalloc.start()
    try:
        for t in (text, obj):
            c = compress_result(t, call_id="n", earlier=Earlier())
            assert c.rule == "none" and c.text is t
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024


def test_a_table_of_a_huge_array_parses_back():
    items = [{"id": i, "v": f"x{i}"} for i in range(60_000)]
    text = json.dumps(items)
    c = compress_result(text, call_id="h")
    assert c.rule == "json_table" and json_table.parse_table(c.text)[1] == items


def test_a_100_mb_single_line_log_costs_a_bounded_time_and_memory(tmp_path):
    """In a subprocess with a generous timeout: it finishes, unchanged, without a copy."""
    script = textwrap.dedent(
        """
        import tracemalloc
        from ctxwright.compaction.compress import Earlier, compress_result, outline
        text = "2026-12-06 ERROR 0xdeadbeef " * (100 * 1024 * 1024 // 28)
        e = Earlier()
        tracemalloc.start()
        c = compress_result(text, call_id="big", earlier=e)
        e.add("big", text)
        c2 = compress_result(text, call_id="again", earlier=e)
        o = outline(text)
        peak = tracemalloc.get_traced_memory()[1]
        assert c.rule == "none" and c.text is text and o is None, c.rule
        assert c2.text == "[same as the result of call big]", c2.text
        # and through the result budget: the repeat form is recorded, the original offloaded
        import sys
        from pathlib import Path
        from ctxwright.compaction.budget import apply_budget
        from ctxwright.compaction.offload import ResultFiles
        from ctxwright.core.tokens import estimate_tokens
        files = ResultFiles(Path(sys.argv[1]))
        content, rec = apply_budget(text, tool_name="sh", result_id="r2", cap_tokens=25_000, count=estimate_tokens,
                                    files=files, head_chars=1200, tail_chars=400, earlier=e)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        assert rec.compress_rule == "repeat" and rec.offload.chars == len(text), rec
        assert files.read("r2", len(text) - 50, 50)[0] == text[-50:]
        print(peak)
        """
    )
    cmd = [sys.executable, "-c", script, str(tmp_path / "files")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) < 32 * 1024 * 1024  # slices, never a second 100 MB copy


def test_invalid_utf8_is_sanitized_before_compressing_and_the_original_is_recoverable(tmp_path):
    raw = "\n".join(f"step {i} ok \udcff" for i in range(500)).encode("utf-8", "surrogateescape")
    files = ResultFiles(tmp_path / "s")
    content, rec = apply_budget(
        raw,
        tool_name="sh",
        result_id="b1",
        cap_tokens=25_000,
        count=estimate_tokens,
        files=files,
        head_chars=1200,
        tail_chars=400,
        earlier=Earlier(),
    )
    assert rec.compress_rule == "log_fold" and rec.invalid_utf8 == 500 and "\udcff" not in content
    assert "not valid UTF-8" in content.split("\n")[0]
    assert rec.offload is not None
    original = files.read("b1", 0, rec.offload.chars)[0]
    assert original == raw.decode("utf-8", "replace") and rec.compress_saved == len(original) - len(content)
    json.dumps(content)  # sendable to any provider


# -- in a run ----------------------------------------------------------------------------------
def _run(store, tmp_path, replies, **cfg):
    reg = ToolRegistry()
    reader = ResultReader()

    @tool
    def services() -> str:
        """List the services."""
        return json.dumps(_listing(60), indent=2)

    @tool
    def pull(variant: int) -> str:
        """Pull the image.

        Args:
            variant: which run
        """
        return _log(300) + ("" if variant == 0 else f"\nretry {variant}: layer 17 ok")

    reg.register(services)
    reg.register(pull)
    reg.register(reader.tool())
    config = AgentConfig(compaction=CompactionConfig(results_dir=tmp_path, window_tokens=32_768, **cfg))
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    agent = Agent(s, ScriptedBackend(replies), reg, config, counter=TokenCounter(estimate_tokens, "estimate"))
    agent.run("go")
    return s, agent.context


def test_a_run_records_the_rule_and_saving_and_read_result_returns_the_exact_original(store, tmp_path):
    s, _ = _run(
        store,
        tmp_path,
        [
            A(call("services", {}, "c1")),
            A(call("pull", {"variant": 0}, "c2")),
            A(call("pull", {"variant": 1}, "c3")),
            A(call("read_result", {"result_id": "c1", "offset": 0, "limit": 300}, "r1")),
            "done",
        ],
    )
    ev = {e.result_id: e for e in s.events if isinstance(e, ToolEvent)}
    assert [ev[k].compress_rule for k in ("c1", "c2", "c3")] == ["json_table", "log_fold", "repeat"]
    files = ResultFiles(tmp_path / s.id)
    for k, original in (("c1", json.dumps(_listing(60), indent=2)), ("c2", _log(300))):
        e = ev[k]
        assert e.compress_saved == len(original) - len(e.message.content or "") > 0
        assert e.offload is not None and files.read(k, 0, e.offload.chars)[0] == original
        assert f'read_result(result_id="{k}")' in (e.message.content or "")
    assert "call c2 except" in (ev["c3"].message.content or "")
    page = unwrap(ev["r1"].message.content or "")
    assert page is not None and page[2].split("\n", 1)[1] == json.dumps(_listing(60), indent=2)[:300]
    # stored and read back: the new fields survive, old events stay readable
    resumed = Session.resume(store, s.id)
    back = {e.result_id: e for e in resumed.events if isinstance(e, ToolEvent)}
    assert back["c3"].compress_rule == "repeat" and back["c3"].compress_saved == ev["c3"].compress_saved


def test_earlier_after_a_resume_compresses_as_the_live_run_would(store, tmp_path):
    replies = [A(call("services", {}, "c1")), A(call("pull", {"variant": 0}, "c2")), "done"]
    s, live = _run(store, tmp_path, replies)
    assert live is not None
    live._sync_earlier(s)  # what the next round would see
    resumed = ContextManager(CompactionConfig(results_dir=tmp_path), TokenCounter(estimate_tokens, "estimate"), 32_768)
    again = Session.resume(store, s.id)
    resumed.bind(again)
    resumed._sync_earlier(again)
    assert [cid for cid, _ in resumed.earlier.recent()] == [cid for cid, _ in live.earlier.recent()] == ["c2", "c1"]
    nxt = _log(300) + "\nretry 5: layer 17 ok"
    a = compress_result(nxt, call_id="c9", earlier=live.earlier)
    b = compress_result(nxt, call_id="c9", earlier=resumed.earlier)
    assert a == b and a.rule == "repeat" and "call c2" in a.text


def test_compress_off_records_results_as_before(store, tmp_path):
    s, _ = _run(store, tmp_path, [A(call("pull", {"variant": 0}, "c2")), "done"], compress=False)
    e = next(e for e in s.events if isinstance(e, ToolEvent))
    assert e.compress_rule is None and e.message.content == _log(300)


def test_source_over_the_cap_is_outlined_with_the_lines_the_task_names(store, tmp_path):
    body = "\n".join(f"    step_{k} = compute(step_{k - 1}, {k})  # arithmetic, nothing named" for k in range(1, 9))
    src = "\n\n".join(f"def handler_{i}(request):\n{body}\n    return step_8" for i in range(60))
    src += "\n\ndef parse_header(raw):\n    return raw.split(':')\n\ndef main(lines):\n    yield from map(parse_header, lines)\n"
    reg = ToolRegistry()

    @tool
    def cat() -> str:
        """Show the file."""
        return src

    reg.register(cat)
    reg.register(ResultReader().tool())
    config = AgentConfig(compaction=CompactionConfig(results_dir=tmp_path, window_tokens=8192))
    s = Session.start(Prefix.build("sys", reg.specs()), store=store)
    counter = TokenCounter(estimate_tokens, "estimate")
    Agent(s, ScriptedBackend([A(call("cat", {}, "f1")), "done"]), reg, config, counter=counter).run(
        "why does parse_header drop the port?"
    )
    e = next(e for e in s.events if isinstance(e, ToolEvent))
    content = e.message.content or ""
    assert e.compress_rule == "code_outline" and "def handler_59(request):" in content
    assert "def parse_header(raw):" in content and "step_3 = compute" not in content
    assert "yield from map(parse_header, lines)" in content  # a line naming what the task names
    assert e.offload is not None and ResultFiles(tmp_path / s.id).read("f1", 0, len(src))[0] == src


def test_a_log_whose_every_line_holds_a_new_id_gives_up_after_a_bounded_number_of_scans(monkeypatch):
    text = "\n".join(f"worker {i % 8} processed batch {i} id {i * 2654435761 % 2**32:08x}" for i in range(40_000))
    scans = 0
    real = logs.extract

    def counted(block: str, limit: int = 200) -> list[str]:
        nonlocal scans
        scans += 1
        return real(block, limit)

    monkeypatch.setattr(logs, "extract", counted)
    assert logs.compress(text) is None  # nothing to fold: every line is a fact
    assert 0 < scans <= logs.MAX_SCANS


def test_after_harness_resume_a_rerun_refers_to_a_result_from_before(tmp_path):
    from ctxwright import Harness

    def pull(variant: int) -> str:
        """Pull the image.

        Args:
            variant: which run
        """
        return _log(300) + f"\nretry {variant}: layer 17 ok"

    quiet = {"status": False, "todo": False, "delegate": False, "recall": False}
    first = ScriptedBackend([A(call("pull", {"variant": 1}, "p1")), "done"])
    with Harness("S.", [tool(pull)], backend=first, db=tmp_path / "s.db", **quiet) as h:
        h.run("pull it")
        sid = h.session_id
    again = ScriptedBackend([A(call("pull", {"variant": 2}, "p2")), "done"])
    with Harness.resume(sid, tools=[tool(pull)], backend=again, db=tmp_path / "s.db") as h2:
        h2.run("pull it again")
        ev = next(e for e in h2.session.events if isinstance(e, ToolEvent) and e.result_id == "p2")
    content = ev.message.content or ""
    assert ev.compress_rule == "repeat" and "same as the result of call p1 except" in content
    assert "+retry 2: layer 17 ok" in content and "-retry 1: layer 17 ok" in content


def test_the_same_bytes_in_processes_with_different_hash_seeds(tmp_path):
    """Set and dict order vary with PYTHONHASHSEED; the compressed bytes must not."""
    script = textwrap.dedent(
        """
        import hashlib, json
        from ctxwright.compaction.compress import Earlier, compress_result, outline
        items = [{"id": i, "name": f"n{i}", "tags": {"b": i, "a": [i]}} for i in range(50)]
        log = "\\n".join(f"12:00:{i % 60:02d} fetched {i} from /srv/{i % 3}/x.py" for i in range(300))
        e = Earlier()
        e.add("a", log)
        texts = [json.dumps(items, indent=2), log + "\\nERROR x", log + "\\nretry 9 ok"]
        outs = [compress_result(t, call_id="z", earlier=e).text for t in texts]
        src = "\\n".join(f"def f_{i}(x):\\n    y = x + {i}\\n    return y\\n" for i in range(40))
        outs.append(outline(src, ["f_3", "Beta", "alpha_b"]).text)
        print(hashlib.sha256("\\x00".join(outs).encode()).hexdigest())
        """
    )
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        digests.add(done.stdout.strip())
    assert len(digests) == 1


def test_lone_surrogates_given_directly_do_not_break_a_rule():
    """A caller that did not sanitize (the budget layer does) still gets an answer."""
    lines = [f"step {i} ok \udcff" for i in range(200)]
    c = compress_result("\n".join(lines), call_id="u1", earlier=Earlier())
    assert c.rule == "log_fold" and "\udcff" in c.text
    rows = json.dumps([{"k": f"v\udcff{i}", "n": i} for i in range(30)], ensure_ascii=False)
    t = compress_result(rows, call_id="u2")
    assert t.rule == "json_table" and json_table.parse_table(t.text)[1] == json.loads(rows)


def test_rows_of_numbers_are_data_and_never_folded():
    csv = "day,requests,p95_ms\n" + "\n".join(
        f"2026-11-{i % 28 + 1:02d},{1000 + i * 37},{12.5 + i / 10}" for i in range(300)
    )
    md = "| host | cpu | mem |\n|---|---|---|\n" + "\n".join(
        f"| web-{i} | {i % 97} | {i * 3 % 101}% |" for i in range(300)
    )
    for text in (csv, md):
        assert logs.compress(text) is None and compress_result(text, call_id="d").rule == "none"
    progress = "\n".join(f"fetched layer {i} of 300" for i in range(300))
    assert logs.compress(progress) is not None  # a progress line is not a row of data
