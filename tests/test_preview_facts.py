"""Previews that keep the facts: a result over its cap is recorded as a preview that shows,
besides a head and a tail, the lines between them holding identifiers and numbers, in
order, each elided run of lines marked with its count; deterministic, bounded on hostile
input, and the original stays readable (``read_result``)."""

from __future__ import annotations

import re

from ctxwright.compaction import CompactionConfig, ContextManager
from ctxwright.compaction.budget import FACT_CHARS, fact_lines, preview
from ctxwright.core.prefix import Prefix
from ctxwright.core.session import Session
from ctxwright.core.tokens import TokenCounter, estimate_tokens

FILLER = "the build step finished without anything worth noting here"
FACTS = {
    700: "connected to postgres://db.internal:5433/prod as svc_reader",
    1400: "ticket PROJ-4821 reopened: exit code 137 after 52.5 s",
    2100: "wrote /srv/app/out/report_2024.json (commit 9f3c2ab7e1)",
}


def _log(lines: int = 3000) -> str:
    return "\n".join(FACTS.get(i, f"{FILLER}") for i in range(lines))


def _manager(tmp_path, window: int = 32_768) -> ContextManager:
    cfg = CompactionConfig(results_dir=tmp_path, compress=False)  # the preview is under test, not the compressors
    return ContextManager(cfg, TokenCounter(estimate_tokens, "estimate"), window)


def test_facts_in_the_middle_are_kept_in_order_with_elided_runs_counted(tmp_path):
    m = _manager(tmp_path)
    m.bind(Session.start(Prefix.build("sys")))
    text = _log()
    body, rec = m.process_result("shell", "c1", text, True)
    assert rec.offload is not None and rec.offload.chars == len(text)
    where = [body.index(line) for line in FACTS.values()]
    assert where == sorted(where)  # all there, in their original order
    # the runs between them are counted, not shown: 699 filler lines before the first fact
    # less those the head shows, 699 between each pair
    markers = [int(n.replace(",", "")) for n in re.findall(r"\[… ([\d,]+) lines? …\]", body)]
    assert markers[1:3] == [699, 699] and markers[0] < 700
    assert body.count(FILLER) < 40  # the head and tail, not the 3,000 lines
    assert "the lines between them that hold identifiers or numbers" in body
    assert estimate_tokens(body) <= m.config.cap_for("shell", m.effective_window)
    # the original is exact on disk: read_result pages it back whole
    pages, offset = [], 0
    while offset < len(text):
        page = m.reader.read(rec.result_id, offset, 8000)
        pages.append(page.partition("\n")[2])
        offset += len(pages[-1])
    assert "".join(pages) == text


def test_a_head_and_tail_only_when_the_middle_holds_no_fact(tmp_path):
    m = _manager(tmp_path)
    m.bind(Session.start(Prefix.build("sys")))
    body, _ = m.process_result("shell", "c1", "\n".join([FILLER] * 3000), True)
    assert "characters not shown" in body and "[…" not in body


def test_the_same_text_gives_the_same_bytes(tmp_path):
    a, b = _manager(tmp_path / "a"), _manager(tmp_path / "b")
    a.bind(Session.start(Prefix.build("sys")))
    b.bind(Session.start(Prefix.build("sys")))
    text = _log()
    assert a.process_result("shell", "c1", text, True)[0] == b.process_result("shell", "c1", text, True)[0]


def test_fact_lines_stop_at_the_budget_and_count_what_is_left():
    text = "\n".join(f"request {i:05d} served in 0.{i % 10}3 s" for i in range(20_000))
    got = fact_lines(text, 0, len(text), FACT_CHARS)
    assert got is not None and len(got) <= FACT_CHARS + 40
    *shown, last = got.split("\n")
    assert shown[0] == "request 00001 served in 0.13 s"  # the line cut by the head is the head's
    assert re.fullmatch(r"\[… [\d,]+ lines …\]", last)
    assert int(last[2:].split()[0].replace(",", "")) == 20_000 - 1 - len(shown)


def _preview(text: str) -> str:
    return preview(
        text, tool_name="shell", result_id="r1", cap_tokens=4_000, tokens=None, head_chars=1200, tail_chars=400
    )


def test_a_100_mb_single_line_gets_its_head_and_tail():
    text = "a-" * 50_000_000  # one line, 100 MB, hostile to a backtracking pattern
    body = _preview(text)
    assert len(body) < 3000 and "characters not shown" in body and body.endswith("a-" * 200)


def test_many_hostile_lines_finish_bounded_and_keep_their_facts():
    # 200,000 lines (60 MB): the scan stops at its limits, the counts of the markers stay exact
    lines = ["a-" * 150] * 200_000
    lines[3] = "failed at /srv/app/main.py:42 with ERR-1234"
    body = _preview("\n".join(lines))
    assert "failed at /srv/app/main.py:42 with ERR-1234" in body
    counts = [int(n.replace(",", "")) for n in re.findall(r"\[… ([\d,]+) lines? …\]", body)]
    assert counts and counts[-1] > 190_000


def test_the_extractor_is_linear_on_a_long_run_of_name_characters_and_finds_the_same_names():
    from ctxwright.compaction.identifiers import extract_kinds
    from ctxwright.compaction.ledger import items_of

    # a 50,000-character run of "a-": the file-name pattern once tried every start in it
    # (the square of the run), now only the run's first; the names around it are unchanged
    got = extract_kinds("a-" * 25_000 + " x.py-y.py --/lib/z.md a.py.bak", 100)
    assert got == [("file", "x.py"), ("file", "-y.py"), ("path", "/lib/z.md"), ("file", "a.py")]
    assert items_of("a-" * 25_000) == []


def test_a_long_chain_of_folders_is_extracted_in_linear_time() -> None:
    """Each "/" of "/a/a/a..." starts the file pattern; unbounded, each start scanned the rest
    of the chain (the square of its length: 50,000 characters took 16 s, 100,000 would take a
    minute). Bounded folders make it linear: a subprocess must finish well inside 30 s, and a
    deep real path is still found by its last folders."""
    import subprocess
    import sys

    code = "from ctxwright.compaction.identifiers import extract; extract('/a' * 50_000 + ' x.py')"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
    from ctxwright.compaction.identifiers import FILE_DEPTH, extract

    deep = "/".join(f"d{i}" for i in range(FILE_DEPTH + 5)) + "/main.py"
    assert any(v.endswith("/main.py") and deep.endswith(v) for v in extract(f"see {deep} now"))
