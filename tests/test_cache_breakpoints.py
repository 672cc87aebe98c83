"""Breakpoint placement (``cache/breakpoints.py``) and the minimums table (``cache/minimums.py``):
never more than 4, none below the minimum, the frozen prefix and the end marked, every
cacheable block within the lookback of a breakpoint when the grid can cover it, and on a growing
append-only trajectory each call's lookback reaches the previous call's last breakpoint."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwright.cache.breakpoints import GRID, LOOKBACK, MAX_BREAKPOINTS, PromptBlock, place_breakpoints
from ctxwright.cache.minimums import DEFAULT_MINIMUM, minimum_tokens

blocks_st = st.lists(
    st.builds(PromptBlock, st.integers(min_value=0, max_value=400), st.booleans() | st.just(True)),
    min_size=1,
    max_size=150,
)


def prefix(blocks: list[PromptBlock], i: int) -> int:
    return sum(b.tokens for b in blocks[: i + 1])


@settings(max_examples=300, deadline=None)
@given(blocks_st, st.integers(min_value=-1, max_value=10), st.integers(min_value=0, max_value=3000))
def test_never_more_than_four_and_none_below_the_minimum(blocks: list[PromptBlock], frozen: int, minimum: int) -> None:
    frozen = min(frozen, len(blocks) - 1)
    for mode in ("ctxwright", "system", "none"):
        chosen = place_breakpoints(blocks, frozen, minimum, mode)
        assert len(chosen) <= MAX_BREAKPOINTS
        assert chosen == sorted(set(chosen))
        for i in chosen:
            assert blocks[i].cacheable and prefix(blocks, i) >= minimum
    assert place_breakpoints(blocks, frozen, minimum, "none") == []
    assert all(i <= frozen for i in place_breakpoints(blocks, frozen, minimum, "system"))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=8), st.integers(min_value=1, max_value=80))
def test_frozen_end_and_trajectory_end_are_marked_and_the_rest_is_within_the_lookback(frozen: int, n: int) -> None:
    blocks = [PromptBlock(100) for _ in range(frozen + 1 + n)]
    chosen = place_breakpoints(blocks, frozen, 50)
    assert chosen[0] == frozen and chosen[-1] == len(blocks) - 1
    # the end and two grid points cover at least LOOKBACK + GRID blocks, wherever the grid falls
    # (stability from call to call is worth more than covering blocks no entry was written at)
    if n <= LOOKBACK + GRID:
        for j in range(frozen + 1, len(blocks)):
            assert any(0 <= b - j <= LOOKBACK for b in chosen), (j, chosen)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=6),
    st.lists(st.integers(min_value=1, max_value=LOOKBACK + GRID - 2), min_size=2, max_size=40),
    st.lists(st.integers(min_value=0, max_value=12), min_size=1, max_size=20),
)
def test_each_call_reaches_the_previous_calls_last_breakpoint(
    frozen: int, steps: list[int], thinking_at: list[int]
) -> None:
    """An append-only tool loop: each call appends up to 34 blocks (a batch of parallel tool
    results), some of them thinking blocks that cannot carry a breakpoint."""
    total = frozen + 1 + sum(steps)
    no_mark = {frozen + 1 + 4 * t for t in thinking_at}
    trajectory = [PromptBlock(80, i not in no_mark) for i in range(total)]
    length = frozen + 1
    previous: list[int] | None = None
    for step in steps:
        length += step
        chosen = place_breakpoints(trajectory[:length], frozen, 50)
        assert len(chosen) <= MAX_BREAKPOINTS
        if previous:
            last = previous[-1]
            assert any(b - LOOKBACK <= last <= b for b in chosen), (previous, chosen)
        previous = chosen


def test_a_volatile_tail_moves_the_end_breakpoint_before_it() -> None:
    blocks = [PromptBlock(100) for _ in range(10)]
    assert place_breakpoints(blocks, 1, 50)[-1] == 9
    assert place_breakpoints(blocks, 1, 50, volatile_tail=1)[-1] == 8
    assert place_breakpoints(blocks[:3], 1, 50, volatile_tail=2)[-1] == 2  # nothing would be left: ignored


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown breakpoint mode"):
        place_breakpoints([PromptBlock(1)], 0, 0, "everywhere")


def test_minimums_by_family() -> None:
    assert minimum_tokens("claude-sonnet-4-5-20250929") == 1024
    assert minimum_tokens("claude-opus-4-6") == 4096
    assert minimum_tokens("claude-opus-4-1") == 1024
    assert minimum_tokens("claude-haiku-4-5") == 4096
    assert minimum_tokens("claude-3-5-haiku-latest") == 2048
    assert minimum_tokens("claude-sonnet-4-6") == 2048
    assert minimum_tokens("some-new-model") == DEFAULT_MINIMUM
    assert minimum_tokens("mine", table=((r"mine", 7),)) == 7
