"""Two tools for per-turn work that does not grow with the session.

Why: a session is one request after another over a history that only grows. Anything that
walks the whole history on every call -- to count it, hash it, scan it for a kind of event --
makes each turn cost more than the last, so a long session gets slower turn by turn. Two
facts let that work be done once per message or event instead:

* the events of a session are only ever appended (``core/session.py``), so a state kept
  over them (a counter, the last event of a kind) is brought up to date by feeding it the
  events appended since it last looked -- :class:`EventFold`;
* a request's messages are, but for a compaction or a replaced status, the previous
  request's messages plus a few new ones, and a message is frozen once recorded, so a value
  kept per position of the previous list (a running total, a rolling hash) stays valid up
  to the first message that differs -- :func:`common_prefix_len`. A compaction changes the
  view, not the messages: the values are kept by message, never by position alone, and
  recomputed from the first change on.

Both only ever return what a recomputation from scratch would: they are caches, and the
tests compare them with the full computation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ctxwright.core.events import Event

T = TypeVar("T")
S = TypeVar("S")


#: How far back from the end :func:`common_prefix_len` looks, one item at a time, for where
#: two lists part before it searches (a turn changes the last few messages, not more).
_TAIL = 8


def common_prefix_len(old: Sequence[T], new: Sequence[T]) -> int:
    """How many leading items ``old`` and ``new`` share (the same object, or equal: a frozen
    message equal to another has the same bytes and tokens).

    The usual cases cost a few item comparisons and one comparison of the leading run: the new
    list extends the old one (a turn appended), or parts from it near the end (a status
    replaced, the last turn's messages), so the place where they part is looked for from the
    end, one item at a time, and only the run before it is compared as a whole. Lists of the
    same objects compare in C without calling ``__eq__``. A compaction early in the history
    costs a binary search of a few more such comparisons."""
    n = min(len(old), len(new))
    j = n
    for _ in range(_TAIL):  # step back over the items that differ at the end
        if not j:
            return 0
        x, y = old[j - 1], new[j - 1]
        if x is y or x == y:
            if _same_run(old, new, j):
                return j  # and old[j] != new[j], when j < n: it was stepped over
            hi = j - 1  # they part before j - 1
            break
        j -= 1
    else:
        hi = j + 1 if j < n else n  # old[j] != new[j]: they part at j or before
    a, b = list(old[:hi]), list(new[:hi])
    lo, step = 0, 1  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - step > lo:  # gallop back from the end, where lists usually part
        m = hi - step
        if a[:m] == b[:m]:
            lo = m
            break
        hi, step = m, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _same_run(old: Sequence[T], new: Sequence[T], j: int) -> bool:
    """Whether the first ``j`` items of ``old`` and ``new`` are the same, copying only what
    must be copied (a list's whole length is compared in place; a tuple never equals a list)."""
    a = old if len(old) == j else old[:j]
    b = new if len(new) == j else new[:j]
    if type(a) is not list:
        a = list(a)
    if type(b) is not list:
        b = list(b)
    return a == b


class PrefixScan(Generic[T, S]):
    """A running value over a list of items, kept after each item, so the next list that
    shares a leading run with the last one is scanned from the first item that differs.
    ``step(acc, item)`` returns the new value (values are never changed in place: each is
    kept for its position); ``start`` is the value of an empty list. :meth:`scan` returns
    exactly what folding ``step`` over all the items from ``start`` would."""

    def __init__(self, start: S, step: Callable[[S, T], S]) -> None:
        self._start = start
        self._step = step
        self._items: list[T] = []
        self._values: list[S] = []

    def scan(self, items: Sequence[T]) -> S:
        k = common_prefix_len(self._items, items)
        del self._items[k:], self._values[k:]
        acc = self._values[-1] if k else self._start
        step = self._step
        for i in range(k, len(items)):
            acc = step(acc, items[i])
            self._items.append(items[i])
            self._values.append(acc)
        return acc


class EventFold(Generic[S]):
    """A state folded over a session's events, fed only the events appended since the last
    read. ``start()`` makes a fresh state; ``step(state, event)`` takes one event in. Read with
    :meth:`over`: given another event list (another session, a resumed one) or one that does
    not continue the last one read, it starts over, so the state is always the fold of
    exactly the events given."""

    def __init__(self, start: Callable[[], S], step: Callable[[S, Event], None]) -> None:
        self._start = start
        self._step = step
        self._events: Sequence[Event] | None = None
        self._n = 0
        self._last: Event | None = None
        self.state: S = start()

    def over(self, events: Sequence[Event]) -> S:
        n = self._n
        if events is not self._events or len(events) < n or (n and events[n - 1] is not self._last):
            self.state, n, self._events = self._start(), 0, events
        step, state = self._step, self.state
        for i in range(n, len(events)):
            step(state, events[i])
        self._n = len(events)
        self._last = events[-1] if events else None
        return state


__all__ = ["EventFold", "PrefixScan", "common_prefix_len"]
