"""Where the ``cache_control`` breakpoints of an Anthropic request go: a pure function.

Provider rules protected (platform.claude.com, prompt caching):

* Anthropic caches only up to an explicit breakpoint, and a request may carry at most 4
  (a fifth is an HTTP 400).
* At each breakpoint the lookup checks that block and walks back at most 20 blocks for an
  entry an earlier request wrote; an entry is written only where a request had a breakpoint.
  So in a long tool loop a single breakpoint that moves to the end of the trajectory finds
  the previous call's entry only while fewer than 20 blocks were appended since.
* A prefix shorter than the model's minimum (``cache/minimums.py``) is neither written nor
  read: a breakpoint there wastes one of the four.

The ``"ctxwright"`` placement therefore puts:

1. one breakpoint at the end of the frozen prefix (tools + system), which every later call
   reads whatever happens to the trajectory (a compaction, a rewrite, a fork);
2. one at the end of the trajectory, on every call, so the next call can read all of it --
   or, when the caller says the last blocks will not come back (``volatile_tail``: a status
   message that the next call replaces), on the last block before them: an entry that
   includes a block the next request drops is never read again;
3. up to two on a fixed grid of block positions (every :data:`GRID` blocks, counted from
   the end of the frozen prefix), the highest grid points below the end. A grid point does
   not move from call to call, and with a spacing below the lookback, the first grid point
   past the previous call's end reaches back to it: a call that appended more than 20
   blocks (a batch of parallel tool results) still finds the previous call's entry.

``"system"`` is one breakpoint at the end of the system prompt (what most callers write by
hand); ``"none"`` is no breakpoint. Both exist to be compared against in the benchmark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["GRID", "LOOKBACK", "MAX_BREAKPOINTS", "BreakpointMode", "PromptBlock", "place_breakpoints"]

#: Anthropic's limit of ``cache_control`` blocks per request.
MAX_BREAKPOINTS = 4
#: How many blocks before a breakpoint Anthropic's lookup checks.
LOOKBACK = 20
#: Spacing of the intermediate breakpoints' grid: below :data:`LOOKBACK`, leaving room for a
#: grid point that falls on a block that cannot carry a breakpoint (a thinking block) and
#: moves back to the cacheable one before it.
GRID = 16

BreakpointMode = Literal["ctxwright", "system", "none"]
MODES: tuple[str, ...] = ("ctxwright", "system", "none")


@dataclass(frozen=True)
class PromptBlock:
    """One block of the request in prompt order (a tool, a system text block, one content
    block of a message): its tokens by ctxwright's count, and whether it may carry a
    breakpoint (a thinking block or an empty text block may not)."""

    tokens: int
    cacheable: bool = True


def place_breakpoints(
    blocks: Sequence[PromptBlock], frozen_end: int, minimum: int, mode: str = "ctxwright", volatile_tail: int = 0
) -> list[int]:
    """The block indices to mark with ``cache_control`` (ascending, at most 4).

    ``frozen_end`` is the index of the last block of the tools + system prefix (``-1`` when
    there is none); ``minimum`` the model's minimum cacheable prefix in tokens. No index is
    returned whose prefix (the tokens of every block up to and including it) is below it.
    ``volatile_tail``: how many of the last blocks the next request is expected to replace
    (ignored when that would leave no trajectory before them)."""
    if mode not in MODES:
        raise ValueError(f"unknown breakpoint mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "none" or not blocks:
        return []
    prefix: list[int] = []
    total = 0
    for b in blocks:
        total += b.tokens
        prefix.append(total)

    def usable_at_or_before(i: int, floor: int) -> int | None:
        """The last block at or before ``i`` (and after ``floor``) that can carry a breakpoint
        whose prefix reaches the minimum."""
        for j in range(min(i, len(blocks) - 1), floor, -1):
            if blocks[j].cacheable and prefix[j] >= minimum:
                return j
            if prefix[j] < minimum:
                return None  # every earlier prefix is shorter still
        return None

    chosen: list[int] = []
    frozen = usable_at_or_before(frozen_end, -1) if frozen_end >= 0 else None
    if frozen is not None:
        chosen.append(frozen)
    if mode == "system":
        return chosen
    end = len(blocks) - 1
    if volatile_tail > 0 and end - volatile_tail > frozen_end:
        end -= volatile_tail
    last = usable_at_or_before(end, frozen_end)
    if last is not None:
        grid: list[int] = []
        g = frozen_end + GRID * ((last - frozen_end - 1) // GRID)
        while g > frozen_end and len(grid) < MAX_BREAKPOINTS - 1 - len(chosen):
            snapped = usable_at_or_before(g, frozen_end)
            if snapped is not None and snapped != last and snapped not in grid:
                grid.append(snapped)
            g -= GRID
        chosen.extend(sorted(grid))
        chosen.append(last)
    return sorted(set(chosen))[:MAX_BREAKPOINTS]
