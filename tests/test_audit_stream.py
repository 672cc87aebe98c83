"""``ctxwright audit`` in constant memory as it reads, and never raising on input: malformed
session exports reported with their line and event seq, a hypothesis fuzz over malformed
exports and random bytes, memory that does not grow with the log, rows written before the log
ends, lone surrogates, and an 80-column terminal."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import tempfile
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console

from ctxwright.audit.compare import AuditLimits
from ctxwright.cli.audit import run_audit
from ctxwright.cli.main import main
from test_audit import A, U, hand_built_export, openai, tool, write_jsonl


def run_cli(*args: str) -> tuple[int, str, str]:
    """``ctxwright audit ...`` in-process, its stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["audit", *args])
    return code, out.getvalue(), err.getvalue()


def export_file(tmp_path: Path, exp: dict[str, Any], name: str = "export.jsonl") -> Path:
    """A JSONL of two exports: the broken one on line 2, a good one around it on lines 1 and 3."""
    good = hand_built_export()
    return write_jsonl(tmp_path / name, [good, exp, good])


def compaction(exp: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in exp["events"] if e["kind"] == "compaction")


def message_of(exp: dict[str, Any], seq: int) -> dict[str, Any]:
    return next(e for e in exp["events"] if e["seq"] == seq)["message"]


# -- malformed session exports ------------------------------------------------------------------

# (what is wrong, how to break the export, what the report says). The first six are the bad
# compaction records of the issue; fuzzing the command found the last five raising before the
# fix (OverflowError, AttributeError, TypeError, TypeError, and a non-string content that only
# rendered by luck).
MALFORMED = [
    (
        "replace keyed by a non-integer",
        lambda e: compaction(e).update(replace={"x": "summary"}),
        "line 2: session abc123: compaction event 5: 'replace' names 'x', which is not an event seq (a whole number); "
        "skipped",
    ),
    (
        "drop not a list",
        lambda e: compaction(e).update(drop=3),
        "line 2: session abc123: compaction event 5: 'drop' must be a list of event seqs; skipped",
    ),
    (
        "note not an object",
        lambda e: compaction(e).update(note="gone"),
        "line 2: session abc123: compaction event 5: 'note' needs before_seq and text; skipped",
    ),
    (
        "seq pointing nowhere",
        lambda e: compaction(e).update(replace={"99": "summary"}, drop=[42, 4]),
        "line 2: session abc123: compaction event 5: 'replace' names event(s) 99, which are not message events "
        "recorded before it; ignored",
    ),
    (
        "note.before_seq missing",
        lambda e: compaction(e).update(note={"text": "older turns were summarized"}),
        "line 2: session abc123: compaction event 5: 'note' needs before_seq and text; skipped",
    ),
    (
        "replace value not a string",
        lambda e: compaction(e).update(replace={"0": 7}),
        "line 2: session abc123: compaction event 5: 'replace' must map event seqs to texts; skipped",
    ),
    (
        "drop seq overflowing an integer (was OverflowError)",
        lambda e: compaction(e).update(drop=[float("inf")]),
        "line 2: session abc123: compaction event 5: 'drop' names inf, which is not an event seq (a whole number); "
        "skipped",
    ),
    (
        "drop seq not whole",
        lambda e: compaction(e).update(drop=[1.5]),
        "line 2: session abc123: compaction event 5: 'drop' names 1.5, which is not an event seq (a whole number); "
        "skipped",
    ),
    (
        "tool call not an object (was AttributeError)",
        lambda e: message_of(e, 1).update(tool_calls=[1]),
        "line 2: session abc123: assistant event 1: its message's 'tool_calls' must be a list of objects with a "
        "'function' object; skipped",
    ),
    (
        "calls not an array (was TypeError)",
        lambda e: e.update(calls=True),
        "line 2: session abc123: 'calls' is a JSON boolean, not an array; usage unknown",
    ),
    (
        "children not an array (was TypeError)",
        lambda e: e.update(children=5),
        "line 2: session abc123: 'children' is a JSON number, not an array; skipped",
    ),
    (
        "content not a string",
        lambda e: message_of(e, 4).update(content={"text": "谢谢"}),
        "line 2: session abc123: user event 4: its message's 'content' is dict, not a string; skipped",
    ),
    (
        "note before no event",
        lambda e: compaction(e).update(note={"before_seq": 77, "text": "older turns were summarized"}),
        "line 2: session abc123: compaction event 5: its note is placed before event 77, which does not exist; "
        "shown last",
    ),
]


@pytest.mark.parametrize(("what", "breaks", "report"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_export_is_reported_with_its_line_and_event_seq(tmp_path, what, breaks, report):
    exp = hand_built_export()
    breaks(exp)
    path = export_file(tmp_path, exp)
    for mode in ((), ("--json",)):
        code, _out, err = run_cli(str(path), *mode)
        assert code == 0, err
        assert report in err.splitlines(), err
        assert "unexpected" not in err and "Traceback" not in err
    doc = json.loads(run_cli(str(path), "--json")[1])
    # everything recorded stays: both good exports whole, and the broken one's readable calls
    assert doc["summary"]["requests"] >= 10
    assert doc["summary"]["conversations"] == 3


def test_a_nested_export_a_thousand_deep_is_read_without_recursion(tmp_path):
    exp = hand_built_export()
    node = exp
    for k in range(300):
        child = hand_built_export()
        child["id"] = f"child{k}"
        node["children"] = [child]
        node = child
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(exp))
    code, out, err = run_cli(str(path), "--json")
    assert code == 0 and err == ""
    assert json.loads(out)["summary"]["conversations"] == 301


# -- never raising on input: a fuzz over exports and bytes -------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
KEYS = ["replace", "drop", "note", "seq", "kind", "message", "call_index", "mode", "role", "content", "tool_calls"]
keys = st.sampled_from(KEYS) | st.text(max_size=6)


def _containers(value: Any, out: list[Any]) -> None:
    if isinstance(value, (dict, list)):
        out.append(value)
        for v in value.values() if isinstance(value, dict) else value:
            _containers(v, out)


@st.composite
def malformed_exports(draw: st.DrawFn) -> dict[str, Any]:
    """The hand-built export with a few values replaced or added anywhere in it."""
    exp = hand_built_export()
    for _ in range(draw(st.integers(1, 4))):
        places: list[Any] = []
        _containers(exp, places)
        place = draw(st.sampled_from(places))
        value = draw(json_values)
        if isinstance(place, dict):
            place[draw(st.sampled_from(sorted(place, key=str)) | keys if place else keys)] = value
        elif place:
            place[draw(st.integers(0, len(place) - 1))] = value
        else:
            place.append(value)
    return exp


def assert_reported_not_raised(path: Path) -> None:
    for mode in ((), ("--json",)):
        code, out, err = run_cli(str(path), *mode)
        assert code in (0, 2), err
        assert "unexpected" not in err and "Traceback" not in err, err
        if code == 0 and mode:
            json.loads(out)  # a whole document, whatever the input


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exp=malformed_exports(), pretty=st.booleans())
def test_fuzz_malformed_exports_never_raise(exp, pretty):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "export.json"
        path.write_text(json.dumps(exp, indent=1 if pretty else None))
        assert_reported_not_raised(path)


good_line = json.dumps(openai("s", [U("你好")], [tool("t")]), ensure_ascii=False).encode()


@settings(max_examples=150, deadline=None)
@given(
    chunks=st.lists(
        st.binary(max_size=60) | st.sampled_from([good_line, b"\n", b"{", b"[", b"\xef\xbb\xbf", b'"\\ud800"']),
        max_size=8,
    )
)
def test_fuzz_random_bytes_never_raise(chunks):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        path.write_bytes(b"".join(chunks))
        assert_reported_not_raised(path)


def test_lone_surrogates_are_audited_not_fatal(tmp_path):
    """JSON allows an escaped lone surrogate; UTF-8 cannot encode it, and encoding it strictly
    used to end the audit with a UnicodeEncodeError."""
    lines = [
        '{"messages": [{"role": "system", "content": "s\\ud800"}, {"role": "user", "content": "q\\udfff"}]}',
        '{"messages": [{"role": "system", "content": "s\\ud800"}, {"role": "user", "content": "q\\udfff"}, '
        '{"role": "assistant", "content": "a", "\\ud801": 1}]}',
        '{"messages": [{"role": "system", "content": "t\\ud800"}, {"role": "user", "content": "q\\udfff"}, '
        '{"role": "assistant", "content": "b", "\\ud801": 2}]}',
    ]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    for mode in ((), ("--json",)):
        code, _out, err = run_cli(str(path), *mode)
        assert code == 0 and err == "", err
    doc = json.loads(run_cli(str(path), "--json")[1])
    assert [r["cause"] for r in doc["requests"]] == ["first", "append", "system_changed"]


# -- constant memory ----------------------------------------------------------------------------


def small_log(path: Path, requests: int, seed: int = 3) -> Path:
    """Interleaved conversations growing by appends, a new one every few requests (none longer
    than 12 requests: the longest line is what one request costs, whatever the log's length)."""
    rng = random.Random(seed)
    live: list[list[str]] = []
    started = 0
    with path.open("w") as f:
        for _ in range(requests):
            live = [m for m in live if len(m) <= 12]
            if len(live) < 3 or rng.random() < 0.1:
                started += 1
                live.append([json.dumps(U(f"task {started} " + "x" * rng.randint(20, 60)))])
                if len(live) > 3:
                    live.pop(0)
            msgs = rng.choice(live)
            f.write('{"messages": [{"role": "system", "content": "s"}, ' + ", ".join(msgs) + "]}\n")
            msgs.append(json.dumps(A(f"step {len(msgs)} " + "y" * rng.randint(20, 60))))
    return path


#: limits small enough that a log of a thousand requests fills every bounded structure
SMALL = AuditLimits(index_bytes=128 * 1024, open_conversations=4, open_bytes=64 * 1024, token_memo=256)


def peak_bytes(path: Path) -> int:
    """The peak of Python allocations while ``ctxwright audit --json`` reads ``path``."""
    with open(os.devnull, "w") as null:
        tracemalloc.start()
        try:
            code = run_audit(path, as_json=True, prices=None, console=Console(file=null), limits=SMALL)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert code == 0


def test_memory_does_not_grow_with_the_log(tmp_path):
    """4x the requests, about the same peak: nothing per request is kept (rows, requests, text),
    and what is kept stays within its limits (small here, so both logs fill them)."""
    small = peak_bytes(small_log(tmp_path / "small.jsonl", 1_000))
    large = peak_bytes(small_log(tmp_path / "large.jsonl", 4_000))
    assert large < small * 1.2, (small, large)


# -- streaming ----------------------------------------------------------------------------------


class _Watch(io.StringIO):
    """An output that says when the first row arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.first_row = threading.Event()

    def write(self, s: str) -> int:
        if '"index": 0' in s or s.lstrip().startswith("0 "):
            self.first_row.set()
        return super().write(s)


@pytest.mark.parametrize("as_json", [True, False])
def test_rows_are_written_before_the_log_ends(tmp_path, as_json):
    """Read from a pipe whose writer waits for the first row: an audit that held its rows until
    the end of the log would never print it, and the writer would give up."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    out = _Watch()
    seen = []

    def writer() -> None:
        with fifo.open("w") as f:
            f.write(json.dumps(openai("s", [U("q")])) + "\n")
            f.flush()
            seen.append(out.first_row.wait(timeout=20))
            f.write(json.dumps(openai("s", [U("q"), A("a"), U("b")])) + "\n")

    t = threading.Thread(target=writer)
    t.start()
    code = run_audit(fifo, as_json=as_json, prices=None, console=Console(file=out, width=120))
    t.join()
    assert code == 0 and seen == [True]


def test_the_json_document_is_whole_and_in_order(tmp_path, capsys):
    path = write_jsonl(tmp_path / "log.jsonl", [openai("s", [U("q")]), openai("s", [U("q"), A("a")])])
    assert main(["audit", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('{"requests": [{"index": 0,') and out.endswith("}\n")
    assert list(json.loads(out)) == ["requests", "conversations", "rules", "summary"]


# -- an 80-column terminal ------------------------------------------------------------------------


@pytest.mark.parametrize("terminal", [False, True])
def test_rows_fit_an_80_column_terminal(tmp_path, terminal):
    q = U("你好世界，请帮我查一下订单" * 3)
    log = [openai("s", [q, A("a")]), openai("s", [q, A("b" * 200), U("c")]), openai("t" * 90, [q])]
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=terminal, color_system=None)
    assert run_audit(write_jsonl(tmp_path / "log.jsonl", log), as_json=False, prices=None, console=console) == 0
    rows = out.getvalue().split("\n1 ")[0].splitlines()
    assert rows and all(cell_len(line) <= 80 for line in rows), [line for line in rows if cell_len(line) > 80]
    assert any(line.startswith(" " * 8 + "msg#2 content @") for line in rows)  # the divergence on its own line
