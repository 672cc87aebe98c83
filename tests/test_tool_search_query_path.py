"""The hybrid query path's knobs: the query-vector cache and the ONNX threads that sleep.

Real parts: the shipped all-MiniLM-L6-v2 int8 model on onnxruntime, counted as it embeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from ctxwright.core.request import ToolSpec
from ctxwright.tools.embeddings import MiniLM, load_embedder
from ctxwright.tools.search import QUERY_CACHE, ToolIndex

CATALOG = [
    ToolSpec.create("get_weather", "Current weather for a city", {"type": "object", "properties": {}}),
    ToolSpec.create("send_email", "Send an email message to a recipient", {"type": "object", "properties": {}}),
    ToolSpec.create("convert_currency", "Convert money between currencies", {"type": "object", "properties": {}}),
]


class Counting:
    """The real model, counting the texts it embeds."""

    def __init__(self) -> None:
        self.inner = load_embedder()
        self.model_id = self.inner.model_id
        self.dim = self.inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_a_repeated_query_is_embedded_once_and_ranks_the_same() -> None:
    model = Counting()
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=model)
    model.texts.clear()
    first = index.search("is it going to rain in Paris", 3)
    second = index.search("is it going to rain in Paris", 3)
    assert model.texts == ["is it going to rain in Paris"]
    assert [(h.name, h.score) for h in first] == [(h.name, h.score) for h in second]
    assert first[0].name == "get_weather"
    # the cosines are the model's: the cached vector times the tool matrix
    _, _, cosine = index.scores("is it going to rain in Paris")
    direct = load_embedder().embed([CATALOG[0].name.replace("_", " ") + ": " + CATALOG[0].description])[0]
    query = load_embedder().embed(["is it going to rain in Paris"])[0]
    assert cosine[0] == pytest.approx(float(direct @ query), abs=1e-5)


def test_the_query_cache_is_bounded_least_recently_used_first() -> None:
    model = Counting()
    index = ToolIndex(CATALOG, ranker="embed", embedder=model, query_cache=2)
    model.texts.clear()
    for q in ("weather in Paris", "send a mail", "weather in Paris", "euros to dollars", "weather in Paris"):
        index.search(q, 1)
    # "send a mail" was the least recently used when "euros to dollars" came: it went, Paris stayed
    assert model.texts == ["weather in Paris", "send a mail", "euros to dollars"]
    index.search("send a mail", 1)
    assert model.texts[-1] == "send a mail" and len(model.texts) == 4
    assert QUERY_CACHE >= 2


def test_no_query_cache_embeds_every_search() -> None:
    model = Counting()
    index = ToolIndex(CATALOG, ranker="hybrid", embedder=model, query_cache=0)
    model.texts.clear()
    index.search("weather in Paris", 1)
    index.search("weather in Paris", 1)
    assert model.texts == ["weather in Paris", "weather in Paris"]


@pytest.mark.parametrize("spinning", [False, True])
def test_the_onnx_threads_spin_only_when_asked(spinning: bool) -> None:
    """Sleeping threads are the default: spinning ones fight every other process for the cores
    of a loaded machine. The session is configured as asked, and the vectors do not change."""
    model = MiniLM(threads=1, spinning=spinning)
    options = model._sessions[0].get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == ("1" if spinning else "0")
    shared = load_embedder()
    assert isinstance(shared, MiniLM) and shared.spinning is False
    text = ["kick the build off again"]
    assert np.allclose(model.embed(text), load_embedder().embed(text), atol=1e-5)
