"""What a call costs: each provider's price per model for uncached input, cache reads, cache
writes (per TTL) and output, applied to the provider's own usage fields.

Provider rules protected (public pricing pages, read 2026-12-02; each row names its page):

- Anthropic bills a 5-minute cache write at 1.25x the base input price, a 1-hour write at
  2x, and a cache read ("hit or refresh") at 0.1x; ``input_tokens`` is what is left.
- OpenAI bills cached input at the model's cached-input price (0.1x on the GPT-5 family,
  0.25x on GPT-4.1, 0.5x on GPT-4o); cache writes cost nothing extra before GPT-5.6 and
  1.25x the input price from GPT-5.6 on (its prompt-caching guide).
- DeepSeek bills prompt tokens at a cache-hit and a cache-miss price.

A model the table does not know has no price (``None``): ctxwright never guesses one. A
``--prices FILE`` (TOML, :func:`load_prices`) adds or overrides rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ctxwright.core.usage import CacheUsage


@dataclass(frozen=True)
class ModelPrice:
    """One model's prices in USD per million tokens.

    ``model`` is a prefix of the model names it covers ("claude-sonnet-4-5" prices
    "claude-sonnet-4-5-20250929"). ``source`` says where the numbers were read (page and date),
    or which file or flags gave them.
    """

    provider: str
    model: str
    input: float
    cached_read: float
    cache_write_5m: float
    cache_write_1h: float
    output: float
    source: str = ""

    @classmethod
    def flat(
        cls, input: float, cached: float | None = None, output: float = 0.0, *, provider: str = "", model: str = ""
    ) -> ModelPrice:
        """A price from the flat ``--price-input/--price-cached/--price-output`` flags: cache
        writes at the input price (the flags have no write price), reads at ``cached``
        (the input price when not given: no discount)."""
        read = input if cached is None else cached
        return cls(provider, model, input, read, input, input, output, source="--price-* flags")


@dataclass(frozen=True)
class PriceTable:
    """Rows by model prefix; the longest prefix of a model name that has a row prices it."""

    rows: tuple[ModelPrice, ...] = ()
    source: str = "built-in"

    def find(self, provider: str | None, model: str) -> ModelPrice | None:
        """The row whose ``model`` is the longest prefix of ``model`` (case-insensitive) that
        leaves only a snapshot suffix, among rows of ``provider``'s family when one is given;
        ``None`` when no row matches.

        A snapshot ("-20250929", "-2024-07-18", "-latest", Bedrock's "-v1:0") is the same
        model at the same price, so it falls to the row. A variant or a newer version
        ("-mini", "-pro", "-4-6" after "claude-sonnet-4", "[1m]") is a different price and
        never borrows its family's: an unknown model has no price rather than a wrong one.
        """
        name = _model_name(model)
        best: ModelPrice | None = None
        for row in self.rows:
            prefix = row.model.lower()
            if not name.startswith(prefix) or not _SNAPSHOT.fullmatch(name[len(prefix) :]):
                continue
            if provider and row.provider and _family(row.provider) != _family(provider):
                continue
            if best is None or len(prefix) > len(best.model):
                best = row
        return best

    def merged(self, other: PriceTable) -> PriceTable:
        """This table with ``other``'s rows added; a row of ``other`` for the same model
        replaces this one's (a user's file overrides the built-in table)."""
        theirs = {(r.model.lower()) for r in other.rows}
        kept = tuple(r for r in self.rows if r.model.lower() not in theirs)
        return PriceTable(kept + other.rows, source=f"{self.source} + {other.source}")


_SNAPSHOT = re.compile(r"(?:[-_@](?:\d{4}-\d{2}-\d{2}|\d{6,8}|latest|v\d+(?::\d+)?))*")
"""What may follow a row's model name: dated snapshots, ``latest``, a Bedrock version tag."""


def _model_name(model: str) -> str:
    """The model's own name: lower case, without a router's ``vendor/`` path or a cloud's
    region and vendor dots before ``claude`` ("us.anthropic.claude-...")."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    at = name.find("claude")
    return name[at:] if at > 0 and name[at - 1] == "." else name


def _family(provider: str) -> str:
    """Providers that share a price list: the OpenAI APIs (chat, Responses) price alike."""
    return "openai" if provider.startswith("openai") else provider


_ANTHROPIC = "platform.claude.com/docs/en/about-claude/pricing, read 2026-12-02"
_ANTHROPIC_OLD = "docs.anthropic.com/en/docs/about-claude/pricing, read 2026-12-02"
_ANTHROPIC_MODEL = "platform.claude.com/docs/en/models/{}/overview, read 2026-12-02"
_OPENAI = "developers.openai.com/api/docs/pricing (as quoted by {}), read 2026-12-02"
_DEEPSEEK = "api-docs.deepseek.com/quick_start/pricing-details-usd, read 2026-12-02"


def _claude(model: str, input: float, output: float, source: str) -> ModelPrice:
    """An Anthropic row from its base input and output prices: the page's write and read
    columns are exactly 1.25x / 2x / 0.1x the base input price."""
    return ModelPrice("anthropic", model, input, round(input * 0.1, 6), input * 1.25, input * 2.0, output, source)


def _gpt(model: str, input: float, cached: float, output: float, quoted: str, write: float | None = None) -> ModelPrice:
    """An OpenAI row; ``write`` is the cache-write price (the input price before GPT-5.6:
    a write costs no more than the uncached input it is)."""
    w = input if write is None else write
    return ModelPrice("openai", model, input, cached, w, w, output, _OPENAI.format(quoted))


BUILTIN_PRICES = PriceTable(
    rows=(
        # Anthropic: the pricing page's model table (base input, 5m write, 1h write, hit, output).
        _claude("claude-opus-5", 5.0, 25.0, _ANTHROPIC),
        _claude("claude-opus-4-8", 5.0, 25.0, _ANTHROPIC),
        _claude("claude-opus-4-7", 5.0, 25.0, _ANTHROPIC),
        _claude("claude-opus-4-6", 5.0, 25.0, _ANTHROPIC),
        _claude("claude-opus-4-5", 5.0, 25.0, _ANTHROPIC),
        _claude("claude-opus-4-1", 15.0, 75.0, _ANTHROPIC),
        _claude("claude-opus-4", 15.0, 75.0, _ANTHROPIC_OLD),
        _claude("claude-sonnet-5", 2.0, 10.0, _ANTHROPIC_MODEL.format("sonnet-5")),
        _claude("claude-sonnet-4-5", 3.0, 15.0, _ANTHROPIC_MODEL.format("sonnet-4-5")),
        _claude("claude-sonnet-4", 3.0, 15.0, _ANTHROPIC_OLD),
        _claude("claude-3-7-sonnet", 3.0, 15.0, _ANTHROPIC_OLD),
        _claude("claude-haiku-4-5", 1.0, 5.0, _ANTHROPIC_MODEL.format("haiku-4-5")),
        _claude("claude-3-5-haiku", 0.8, 4.0, _ANTHROPIC_OLD),
        # Haiku 3's page row rounds its read and 5m write (0.03, 0.30) instead of 0.1x/1.25x.
        ModelPrice("anthropic", "claude-3-haiku", 0.25, 0.03, 0.30, 0.50, 1.25, _ANTHROPIC_OLD),
        # OpenAI: Standard tier, short context. The official page itself was not in the
        # searchable index; each row is the page's figures as quoted, consistently, by the
        # named secondary pages. GPT-5.6 comes in three named models (there is no plain
        # "gpt-5.6" row): writes at 1.25x input (coder/mux#3705, a live call's
        # cache_write_tokens), the same rate for the 30m and 12h TTLs (no separate 12h rate
        # was found). Sol at its launch list price (2026-07-09); a promotional $4.00 input from
        # 2026-08-21 is not reflected. Terra and Luna at the reduced prices of 2026-07-30.
        _gpt("gpt-5.6-sol", 5.0, 0.50, 30.0, "PromptFuel v1.0.17 release notes", write=6.25),
        _gpt("gpt-5.6-terra", 2.0, 0.20, 12.0, "PromptFuel v1.0.19 release notes", write=2.50),
        _gpt("gpt-5.6-luna", 0.20, 0.02, 1.20, "PromptFuel v1.0.19 release notes", write=0.25),
        _gpt("gpt-5.5", 5.0, 0.50, 30.0, "tokenmix.ai, morphllm.com"),
        _gpt("gpt-5.4", 2.50, 0.25, 15.0, "tokenmix.ai, benchlm.ai"),
        _gpt("gpt-5.4-mini", 0.75, 0.075, 4.50, "tokenmix.ai, benchlm.ai"),
        _gpt("gpt-5.4-nano", 0.20, 0.02, 1.25, "tokenmix.ai, benchlm.ai"),
        _gpt("gpt-5.2", 1.75, 0.175, 14.0, "benchlm.ai, github/docs"),
        _gpt("gpt-5.1", 1.25, 0.125, 10.0, "benchlm.ai"),
        _gpt("gpt-4.1", 2.0, 0.50, 8.0, "github/docs, deploybase.ai"),
        _gpt("gpt-4o", 2.50, 1.25, 10.0, "chatgptpricing, aimodelcalc"),
        _gpt("gpt-4o-mini", 0.15, 0.075, 0.60, "chatgptpricing, aimodelcalc"),
        # DeepSeek: cache hit / cache miss / output; no write price (a miss is the write).
        ModelPrice("deepseek", "deepseek-chat", 0.27, 0.07, 0.27, 0.27, 1.10, _DEEPSEEK),
        ModelPrice("deepseek", "deepseek-reasoner", 0.55, 0.14, 0.55, 0.55, 2.19, _DEEPSEEK),
    ),
    source="built-in",
)


def price_for(provider: str, model: str, table: PriceTable | None = None) -> ModelPrice | None:
    """The price of ``model`` on ``provider``: the longest matching prefix in ``table``
    (the built-in table when ``None``; pass ``BUILTIN_PRICES.merged(load_prices(f))`` for a
    user's file). ``None`` when no row matches: an unknown model has no price."""
    return (table or BUILTIN_PRICES).find(provider or None, model or "")


def call_cost(u: CacheUsage, p: ModelPrice) -> float:
    """USD for one call: each part of the prompt at its own price, plus the output.

    ``u``'s parts never overlap (``core/usage.py``), so no cached token is also billed as input.
    """
    return (
        u.uncached_input * p.input
        + u.cache_read * p.cached_read
        + u.cache_write_5m * p.cache_write_5m
        + u.cache_write_1h * p.cache_write_1h
        + u.output * p.output
    ) / 1e6


def held_usage(u: CacheUsage, reusable_tokens: int) -> CacheUsage:
    """``u`` as it would have been had the cache held every reusable prefix token: up to
    ``min(reusable, prompt)`` tokens become reads, taken first from writes (a write of a
    prefix that was already cached is the miss itself) and then from uncached input.

    A call that already read at least that much is unchanged: holding cannot make it dearer.
    """
    target = min(max(reusable_tokens, 0), u.prompt)
    move = target - u.cache_read
    if move <= 0:
        return u
    parts = {"cache_write_1h": u.cache_write_1h, "cache_write_5m": u.cache_write_5m, "uncached_input": u.uncached_input}
    for name in ("cache_write_1h", "cache_write_5m", "uncached_input"):
        take = min(parts[name], move)
        parts[name] -= take
        move -= take
    return replace(u, cache_read=target, **parts)


def with_reads(u: CacheUsage, reads: int) -> CacheUsage:
    """``u`` re-split so exactly ``min(reads, prompt)`` tokens are cache reads: more reads
    as in :func:`held_usage`, fewer by moving the surplus reads to uncached input. For a
    hypothetical other than "the cache held" (the audit's "with a stable prefix": each request
    reusing exactly the previous one of its conversation)."""
    target = min(max(reads, 0), u.prompt)
    if target >= u.cache_read:
        return held_usage(u, target)
    return replace(u, cache_read=target, uncached_input=u.uncached_input + u.cache_read - target)


def cost_if_held(u: CacheUsage, p: ModelPrice, reusable_tokens: int) -> float:
    """What the call would have cost had every reusable prefix token been a cache read
    (:func:`held_usage`), at the same prices."""
    return call_cost(held_usage(u, reusable_tokens), p)


@dataclass(frozen=True)
class Pricing:
    """How ctxwright prices calls: by provider and model from ``table`` (the built-in table,
    a ``--prices`` file over it), or every call at ``flat`` (the ``--price-*`` flags, which
    override the table). One object for ``show``, ``report``, ``audit`` and ``run``."""

    table: PriceTable = BUILTIN_PRICES
    flat: ModelPrice | None = None

    def price(self, provider: str | None, model: str | None) -> ModelPrice | None:
        """The price of one call; ``None`` when neither the flags nor the table price it."""
        if self.flat is not None:
            return self.flat
        if not model:
            return None
        return price_for(provider or "", model, self.table)

    def describe(self, p: ModelPrice) -> str:
        """One line: the prices applied and where they come from."""
        return (
            f"{p.input:g} input / {p.cached_read:g} cached / {p.cache_write_5m:g} 5m write / "
            f"{p.cache_write_1h:g} 1h write / {p.output:g} output per million tokens ({p.model or 'all calls'}: "
            f"{p.source or self.table.source})"
        )


def pricing_of(prices: str | Path | PriceTable | None = None, flat: ModelPrice | None = None) -> Pricing:
    """The :class:`Pricing` of a ``prices`` option: a TOML file laid over the built-in
    table (:func:`load_prices`), a :class:`PriceTable` likewise, or the built-in table alone;
    ``flat`` (the ``--price-*`` flags) overrides them all."""
    if prices is None:
        table = BUILTIN_PRICES
    elif isinstance(prices, PriceTable):
        table = BUILTIN_PRICES.merged(prices)
    else:
        table = BUILTIN_PRICES.merged(load_prices(prices))
    return Pricing(table=table, flat=flat)


def load_prices(path: str | Path) -> PriceTable:
    """A price table from a TOML prices file (``cache/prices_file.py``: its format, and
    everything it refuses with :class:`~ctxwright.errors.PricesFileError`)."""
    from ctxwright.cache.prices_file import read_prices_file

    return read_prices_file(path)


def table_with(files: Iterable[str | Path] = ()) -> PriceTable:
    """The built-in table with each file's rows laid over it, later files winning."""
    table = BUILTIN_PRICES
    for f in files:
        table = table.merged(load_prices(f))
    return table


__all__ = [
    "BUILTIN_PRICES",
    "ModelPrice",
    "PriceTable",
    "Pricing",
    "call_cost",
    "cost_if_held",
    "held_usage",
    "load_prices",
    "price_for",
    "pricing_of",
    "table_with",
    "with_reads",
]
