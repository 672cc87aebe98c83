"""A lone digit is a search token: ``recall`` and tool search find "document 2", "step 3",
"v2". Real parts: a session with a compaction event hiding the results, the BM25 index both
searches share (``tools/search.py``)."""

from __future__ import annotations

from pathlib import Path

from ctxwright.compaction.offload import ResultFiles
from ctxwright.compaction.recall import Recall
from ctxwright.core.events import CompactionEvent, ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.prefix import Prefix
from ctxwright.core.request import ToolSpec
from ctxwright.core.session import Session
from ctxwright.tools.search import ToolIndex, numbered, tokenize

#: words without digits: only the document's number tells the passages apart
CODES = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "ivory", "jasper"]


def _hidden_documents(tmp_path: Path) -> Recall:
    s = Session.start(Prefix.build("sys"))
    s.add_user("read the documents")
    for n, code in enumerate(CODES, start=1):
        s.add_assistant(Message(role="assistant", tool_calls=(ToolCall(f"c{n}", "read_doc", f'{{"n": {n}}}'),)))
        s.add_tool_result(
            f"c{n}", f"Document {n}. The reference code of document {n} is {code}-{code}.", tool_name="read_doc"
        )
    seqs = [i for i, ev in enumerate(s.events) if isinstance(ev, ToolEvent)]
    s.append(CompactionEvent(layer="clear", replace={i: "[cleared]" for i in seqs}))
    recaller = Recall()
    recaller.bind(s, ResultFiles(tmp_path / s.id))
    return recaller


def test_recall_finds_a_document_by_its_number(tmp_path: Path) -> None:
    recaller = _hidden_documents(tmp_path)
    for n in (2, 7, 10):
        hits = recaller.search(f"reference code of document {n}", 3)
        assert hits and f"Document {n}." in hits[0].text, [h.text for h in hits]
    assert "ember-ember" in recaller.recall("reference code of document 5", 1).content


def test_recall_tokens_keep_lone_digits_tool_documents_keep_numbered_name_parts() -> None:
    assert tokenize("step 3 of v2.1, document 2", digits=True) == ["step", "3", "v2", "1", "document", "2"]
    assert tokenize("step 3 of v2.1, document 2") == ["step", "v2", "document"]  # BM25 documents, as measured
    assert tokenize("plan b x y", digits=True) == ["plan"]  # lone letters stay out
    assert numbered("report for stage 4") == ("stage_4",) and numbered("v2.1") == ("v2_1",)
    assert numbered("Weather_1_GetWeather") == ("weather_1",) and numbered("Buses_3_FindBus") == ("bus_3",)
    assert numbered("1 of 2, 10 5") == ()  # after a stopword or a number, a digit pairs with nothing


def test_tool_search_finds_a_tool_by_a_digit() -> None:
    specs = [
        ToolSpec.create(f"stage_{n}_report", f"Report for stage {n} of the pipeline", {"type": "object"})
        for n in range(1, 10)
    ]
    index = ToolIndex(specs)
    for n in (1, 4, 9):
        assert index.search(f"report for stage {n}", 3)[0].name == f"stage_{n}_report"
        assert index.search(f"stage {n}", 3)[0].name == f"stage_{n}_report"
    assert [h.name for h in index.search("report for stage 12", 3)] == [h.name for h in index.search("stage report", 3)]
