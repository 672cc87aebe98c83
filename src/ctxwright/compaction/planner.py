"""When to compact and how deep: the cost rule (``policy="cost"``).

Why: a compaction rewrites tokens the provider has cached. Everything after its cut -- the
first position whose bytes change -- must be prefilled again at the uncached price (Anthropic
and OpenAI bill it as fresh input; a local server recomputes the KV cache from there). What
it buys is fewer tokens on every later call, read at the cached price ratio α (cached price
÷ uncached price; 0.1 on Anthropic and GPT-5, 0 for a local model). So:

* **price** of a compaction: (1−α)·R, R the tokens after its cut that are prefilled again
  (at most the request it leaves, minus the system prompt, tools and first user message,
  which stay cached);
* **benefit**: α per token removed, on every call until the next compaction (which would
  remove them anyway). With D the tokens grown since the last compaction over N calls, the
  stale tokens cost about α·D·N/2 so far.

Keeping them pays while α·D·N/2 < (1−α)·R -- the status bar's update-mode rule
(``status/bar.py``), one rule in ``cache/stale_cost.py``. With D = g·N (g tokens a call) it
turns at N* = √(2(1−α)R/(α·g)) calls: the larger R (a deep compaction leaves a short
suffix, so R is small -- but it also re-prefills rarely), the longer to wait; at α = 0 never,
only the window decides.

The window decides first: the request must fit, and the next call adds about g tokens, so
past ``window − g`` the planner compacts whatever the cost. And every compaction goes *deep*
(down to ``target_ratio`` of the window, every tier in one pass, so the cache pays the
re-prefill once), leaving room for a long stretch before the next one -- rarely and deeply,
not often and shallowly: each shallow compaction re-prefills almost the whole request for
a few hundred tokens saved.

``policy="eager"`` is the earlier rule (``pipeline.PassState.triggered``): compact at
``trigger_ratio`` of the window, at most every ``min_calls_between`` calls, each tier only
while the request is over the trigger.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from ctxwright.cache.stale_cost import break_even_calls, keeping_pays

Reason = Literal["over_window", "window", "cost", "wait"]


@dataclass(frozen=True)
class Decision:
    """What the planner decided before one call, with the numbers it decided on."""

    compact: bool
    reason: Reason
    #: the request's tokens now, and the effective window
    tokens: int
    window: int
    #: how deep: the tiers run while the request is over this
    target: int
    #: D and N: tokens grown since the last compaction, over this many calls
    grown: int
    calls: int
    #: R: tokens a compaction now would prefill again (estimated: the target minus what stays cached)
    reprefill: int
    alpha: float
    #: the request size at which the planner compacts: the window's (window − one call's growth)
    #: or, earlier, the cost rule's (where α·D·N/2 reaches (1−α)·R at this stretch's pace)
    trigger: int

    @property
    def price(self) -> float:
        """(1−α)·R, in uncached-token units."""
        return (1 - self.alpha) * self.reprefill

    @property
    def stale_cost(self) -> float:
        """α·D·N/2, in uncached-token units: what keeping the grown tokens has cost so far."""
        return self.alpha * self.grown * self.calls / 2

    def describe(self) -> str:
        """One line for the per-call table and the report."""
        head = (
            f"{self.reason} {self.tokens:,}>{self.trigger:,}"
            if self.compact
            else f"wait {self.tokens:,}<{self.trigger:,}"
        )
        return f"{head} → {self.target:,} (α·D·N/2={self.stale_cost:,.0f} vs (1−α)·R={self.price:,.0f})"

    def to_dict(self) -> dict[str, Any]:
        """What the ``compaction`` event records of it (``planner`` in its payload)."""
        return {
            "reason": self.reason,
            "tokens": self.tokens,
            "window": self.window,
            "trigger": self.trigger,
            "target": self.target,
            "grown": self.grown,
            "calls": self.calls,
            "reprefill": self.reprefill,
            "alpha": self.alpha,
        }


def from_record(data: object) -> Decision | None:
    """A decision as a ``compaction`` event recorded it (``to_dict``); ``None`` when there is
    none (policy eager, an older event) or it is not one this build can read."""
    if not isinstance(data, dict):
        return None
    try:
        reason = str(data["reason"])
        if reason not in ("over_window", "window", "cost", "wait"):
            return None
        ints = {k: int(data[k]) for k in ("tokens", "window", "target", "grown", "calls", "reprefill", "trigger")}
        return Decision(compact=reason != "wait", reason=reason, alpha=float(data["alpha"]), **ints)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError):
        return None


def decide(
    *, tokens: int, window: int, target: int, grown: int, calls: int, pinned: int, alpha: float, spaced: bool = True
) -> Decision:
    """The cost rule before one call.

    ``tokens``: the request now; ``window``: the effective window; ``target``: how deep a
    compaction goes; ``grown``/``calls``: D and N since the last compaction (or the session's
    start); ``pinned``: the tokens that stay cached whatever is compacted (system prompt,
    tools, first user message); ``spaced``: the cost reason needs the last compaction far
    enough back (``min_calls_between``); the window's never waits."""
    grown = max(0, grown)
    calls = max(0, calls)
    reprefill = max(0, target - pinned)
    step = grown / calls if calls else 0.0
    window_trigger = window - math.ceil(step)
    n_star = break_even_calls(alpha, step, reprefill)
    base = tokens - grown
    cost_trigger = base + step * n_star if math.isfinite(n_star) else math.inf
    trigger = int(min(window_trigger, cost_trigger))
    reason: Reason
    if tokens > window:
        reason = "over_window"
    elif tokens > window_trigger and tokens > target:
        reason = "window"
    elif spaced and calls and tokens > target and not keeping_pays(alpha, grown, calls, reprefill):
        reason = "cost"
    else:
        reason = "wait"
    return Decision(
        compact=reason != "wait",
        reason=reason,
        tokens=tokens,
        window=window,
        target=target,
        grown=grown,
        calls=calls,
        reprefill=reprefill,
        alpha=alpha,
        trigger=trigger,
    )
