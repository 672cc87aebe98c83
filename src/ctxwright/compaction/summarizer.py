"""One LLM summary request, checked: the only place ctxwright asks a model to compress.

Rules it enforces, each from a failure peer frameworks' users report:

* the summary runs on its *own* request (and, on the embedded backend, its own model
  object), so it never disturbs the main session's cached prefix;
* the input is cut to the summarizer's own budget first -- for a query-aware summary by
  keeping the sentences most relevant to the query (extractive), otherwise by keeping the
  head (and saying so) -- so a 150,000-character page never overflows its window;
* identifiers in the input are extracted before and checked after; any the summary lost
  are re-attached verbatim (``identifiers.py``);
* an error, a timeout, an empty summary or one that is not shorter than the input is a
  :class:`SummaryFailed` with the reason -- the caller falls back to the layers without an
  LLM and counts the failure in its circuit breaker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ctxwright.compaction.extractive import select_sentences
from ctxwright.compaction.identifiers import extract, missing, reattach
from ctxwright.core.messages import Message
from ctxwright.core.request import ChatRequest
from ctxwright.core.tokens import TokenCounter
from ctxwright.errors import SummaryFailed

SYSTEM = (
    "You compress text for an AI agent's memory. Keep facts exactly: names, dates, numbers, companies, "
    "decisions, errors, identifiers. Drop navigation, boilerplate and repetition. Write plain short lines."
)


@dataclass
class Summary:
    text: str
    identifiers_reattached: int


class Summarizer:
    """Summaries on ``backend`` (give it its own model object: ``EmbeddedBackend.fork()``)."""

    def __init__(
        self,
        backend: Any,
        counter: TokenCounter,
        *,
        input_budget_tokens: int = 3_000,
        max_output_tokens: int = 256,
        timeout_s: float = 120.0,
    ) -> None:
        self.backend = backend
        self.counter = counter
        self.input_budget_tokens = input_budget_tokens
        self.max_output_tokens = max_output_tokens
        self.timeout_s = timeout_s
        self.calls = 0
        self._busy = threading.Lock()

    def fit_input(self, text: str, query: str | None) -> str:
        """``text`` cut to the input budget: the sentences relevant to ``query``, else the head."""
        if len(text) <= self.input_budget_tokens * 8 and self.counter.count(text) <= self.input_budget_tokens:
            return text
        if query:
            return select_sentences(text, query, self.input_budget_tokens, self.counter.count)
        lo, hi = 0, min(len(text), self.input_budget_tokens * 8)
        while lo < hi:  # the longest head within the budget
            mid = (lo + hi + 1) // 2
            if self.counter.count(text[:mid]) <= self.input_budget_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo] + "\n[... input cut here: the rest did not fit the summarizer ...]"

    def summarize(self, text: str, instruction: str, *, max_chars: int, query: str | None = None) -> Summary:
        ids = extract(text)
        body = self.fit_input(text, query)
        req = ChatRequest(
            messages=(
                Message(role="system", content=SYSTEM),
                Message(role="user", content=f"{instruction}\n\n<text>\n{body}\n</text>"),
            ),
            tool_choice="none",
            max_tokens=self.max_output_tokens,
            temperature=0.0,
        )
        if not self._busy.acquire(blocking=False):
            raise SummaryFailed("busy", "an earlier summary on this model object is still running (timed out)")
        box: list[Any] = []

        def work() -> None:
            try:
                box.append(self.backend.complete(req))
            except Exception as exc:
                box.append(exc)
            finally:
                self._busy.release()

        worker = threading.Thread(target=work, daemon=True, name="ctxwright-summary")
        worker.start()
        worker.join(self.timeout_s)  # a hung call is abandoned; _busy stays held until it ends
        self.calls += 1
        if not box:
            raise SummaryFailed("timeout", f"no summary within {self.timeout_s:g} s")
        got = box[0]
        if isinstance(got, Exception):
            raise SummaryFailed("error", f"{type(got).__name__}: {got}")
        out = (got.message.content or "").strip()
        if not out:
            raise SummaryFailed("empty", "the model returned an empty summary")
        if len(out) > max_chars * 1.5 or len(out) >= len(text):
            raise SummaryFailed(
                "oversized", f"{len(out):,} characters for a limit of {max_chars:,} (input {len(text):,})"
            )
        lost = missing(ids, out)
        return Summary(reattach(out, lost), len(lost))
