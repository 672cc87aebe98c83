"""The ``--prices FILE`` format: a TOML table of prices per model, read and checked.

Why strict: a price read wrong misstates every cost ctxwright prints, silently. So a file that
is not TOML, is too large, names a key ctxwright does not know (``cached`` for
``cached_read`` would otherwise leave reads at the input price), or gives a price that is
negative or not a number is refused with one line naming the file, the key and the fix. Only
a regular file is read, and at most :data:`MAX_PRICES_FILE_BYTES` of it (``core/toml_file.py``):
a FIFO, a device (``/dev/zero``) or a file that grows while read cannot stall or exhaust ctxwright.

```toml
[models."my-model"]        # a model name, or a prefix of the names it prices
provider = "openai"        # optional
input = 1.0                # required; USD per million tokens
cached_read = 0.1          # default: input
cache_write_5m = 1.25      # default: input
cache_write_1h = 2.0       # default: cache_write_5m
output = 4.0               # default: 0
```
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ctxwright.cache.prices import ModelPrice, PriceTable
from ctxwright.core.toml_file import TomlRefusal, read_bounded_toml
from ctxwright.errors import PricesFileError

MAX_PRICES_FILE_BYTES = 1_000_000
"""A prices file larger than this is refused: a price table is a few kilobytes, and tomllib
reads the whole file into memory."""

MAX_PRICE = 1_000_000.0
"""The highest price per million tokens accepted: above any model's, and low enough that no
session's cost overflows to ``inf`` (``1e308`` is a finite TOML float)."""

PRICE_KEYS = ("provider", "input", "cached_read", "cache_write_5m", "cache_write_1h", "output")


def _price(path: Path, model: str, key: str, value: Any) -> float:
    """A price from the file: a finite number, not negative, or one clear line."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PricesFileError(f"{path}: models.{model}.{key} = {value!r} is not a number; give USD per million tokens")
    if not math.isfinite(value) or value < 0 or value > MAX_PRICE:
        raise PricesFileError(
            f"{path}: models.{model}.{key} = {value!r}; a price must be a number >= 0 and <= {MAX_PRICE:g}"
        )
    return float(value)


def _row(path: Path, model: str, spec: Any) -> ModelPrice:
    if not isinstance(spec, Mapping):
        raise PricesFileError(f'{path}: [models."{model}"] must be a table of prices, not {type(spec).__name__}')
    unknown = sorted(set(spec) - set(PRICE_KEYS))
    if unknown:
        raise PricesFileError(
            f"{path}: models.{model} has unknown key(s) {', '.join(unknown)}; known: {', '.join(PRICE_KEYS)}"
        )
    provider = spec.get("provider", "")
    if not isinstance(provider, str):
        raise PricesFileError(f'{path}: models.{model}.provider must be a string such as "openai" or "anthropic"')
    if "input" not in spec:
        raise PricesFileError(f"{path}: models.{model} has no input price; add input = <USD per million tokens>")
    values = {k: _price(path, model, k, spec[k]) for k in PRICE_KEYS[1:] if k in spec}
    inp = values["input"]
    return ModelPrice(
        provider=provider,
        model=model,
        input=inp,
        cached_read=values.get("cached_read", inp),
        cache_write_5m=values.get("cache_write_5m", inp),
        cache_write_1h=values.get("cache_write_1h", values.get("cache_write_5m", inp)),
        output=values.get("output", 0.0),
        source=str(path),
    )


def read_prices_file(path: str | Path) -> PriceTable:
    """A price table from a TOML file of ``[models."<model prefix>"]`` tables (keys
    :data:`PRICE_KEYS`; ``input`` required; a missing read or write price is the input price,
    a missing 1h write the 5m one). Anything else is refused with :class:`PricesFileError`,
    one line naming the file, the key and the fix: a wrong price must never be read as zero.
    """
    p = Path(path)
    too_large = f"{p}: the prices file is too large (more than {MAX_PRICES_FILE_BYTES} is refused; a table is a few KB)"

    def refuse(kind: TomlRefusal, detail: str) -> NoReturn:
        raise PricesFileError(
            {
                "unreadable": f"{p}: cannot read the prices file ({detail})",
                # a FIFO would block the read forever, /dev/zero never ends: only a regular file is read
                "not_regular": f"{p}: not a regular file; give the path of a TOML file of prices",
                "too_large": too_large,
                "not_utf8": f"{p}: the prices file is not UTF-8 text; write it as TOML",
                "not_toml": f"{p}: not a TOML file ({detail}); see docs/prefix-cache.md for the format",
                "too_deep": f"{p}: the prices file nests too deep to be a price table",
            }[kind]
        ) from None

    data = read_bounded_toml(p, MAX_PRICES_FILE_BYTES, refuse)
    extra = sorted(set(data) - {"models"})
    if extra:
        raise PricesFileError(f'{p}: unknown top-level key(s) {", ".join(extra)}; put each model under [models."NAME"]')
    models = data.get("models", {})
    if not isinstance(models, Mapping) or not models:
        raise PricesFileError(f'{p}: no [models."NAME"] table; add one per model with its prices')
    return PriceTable(tuple(_row(p, str(m), spec) for m, spec in models.items()), source=str(p))


__all__ = ["MAX_PRICE", "MAX_PRICES_FILE_BYTES", "PRICE_KEYS", "read_prices_file"]
