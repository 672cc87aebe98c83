"""The minimum cacheable prompt length of each Anthropic model family, in tokens.

Provider rule protected: Anthropic caches a prefix only if it is at least the model's
minimum; a shorter one "will be processed without caching, and no error is returned"
(platform.claude.com, prompt caching: "Cache limitations"). Both cache fields of the usage
then stay 0 and the request pays full price, silently. A breakpoint below the minimum is
therefore a wasted slot (of four), and ctxwright places none there.

The table follows the documentation's list; the first pattern that matches the model name
wins, so the more specific names come first. A model the table does not know gets
:data:`DEFAULT_MINIMUM` (the smallest documented minimum: a breakpoint that might cache is
kept rather than dropped). Pass ``table=`` (or a fixed ``minimum=`` to the backend) for a
model the table does not know or one whose minimum changed.
"""

from __future__ import annotations

import re

__all__ = ["ANTHROPIC_MINIMUMS", "DEFAULT_MINIMUM", "minimum_tokens"]

#: (name pattern, minimum tokens), most specific first.
ANTHROPIC_MINIMUMS: tuple[tuple[str, int], ...] = (
    (r"opus-4-[5-9]|opus-4\.[5-9]", 4096),
    (r"haiku-4-5|haiku-4\.5", 4096),
    (r"sonnet-4-6|sonnet-4\.6", 2048),
    (r"haiku-3|3-5-haiku|3-haiku", 2048),
    (r"sonnet-4-5|sonnet-4\.5|opus-4-1|opus-4\.1|opus-4|sonnet-4|3-7-sonnet|sonnet-3-7", 1024),
    (r"sonnet|opus", 1024),
)

#: For a model the table does not know: the smallest documented minimum.
DEFAULT_MINIMUM = 1024


def minimum_tokens(model: str, table: tuple[tuple[str, int], ...] | None = None) -> int:
    """The minimum cacheable prefix of ``model`` in tokens (``table`` overrides the built-in one)."""
    name = model.lower()
    for pattern, minimum in ANTHROPIC_MINIMUMS if table is None else table:
        if re.search(pattern, name):
            return minimum
    return DEFAULT_MINIMUM
