"""Keep stale tokens in a cached prefix, or remove them and pay the re-prefill: one rule.

Why: a provider's prompt cache (Anthropic's cache reads, OpenAI's cached input, a local
server's KV cache) bills a token it has cached at a fraction α of the uncached input price
(α = cached price ÷ uncached price: 0.1 on Anthropic and the GPT-5 family, 0.25/0.5 on older
OpenAI models, 0 for a local model whose only cost is compute). Removing tokens from the
middle of a prompt breaks the cache at that point: every token after it is prefilled again at
full price. Keeping them costs α per token on every later call instead.

With S the stale tokens piled up over N calls (so about S·N/2 of them were read per call on
average, at price α) and R the tokens after the point where removing them would cut the
prefix, keeping was cheaper while

    α·S·N/2 < (1−α)·R

-- the cost model of the status bar's update mode (``status/bar.py``: S the status size, N
the updates, R the suffix between two updates) and of when to compact (``compaction/planner.py``:
S the tokens grown since the last compaction, R what the compaction re-prefills).
"""

from __future__ import annotations

import math


def keeping_pays(alpha: float, stale_tokens: float, calls: float, reprefill_tokens: float) -> bool:
    """Whether keeping ``stale_tokens`` (piled up over ``calls`` calls) still costs less than
    re-prefilling ``reprefill_tokens`` to remove them: α·S·N/2 ≤ (1−α)·R. A tie keeps them:
    a compaction that saves nothing is not made (with α = 0 and nothing to re-prefill, both
    sides are 0)."""
    return alpha * stale_tokens * calls / 2 <= (1 - alpha) * reprefill_tokens


def break_even_calls(alpha: float, growth_per_call: float, reprefill_tokens: float) -> float:
    """The N at which the rule turns when S grows by ``growth_per_call`` each call (S = g·N):
    α·g·N²/2 = (1−α)·R, so N = √(2(1−α)R / (α·g)); infinite when α or g is 0 (keeping is
    then always cheaper: only the window forces a removal)."""
    rate = alpha * growth_per_call  # a subnormal α times a small growth underflows to 0
    if alpha <= 0 or growth_per_call <= 0 or rate <= 0:
        return math.inf
    return math.sqrt(2 * (1 - alpha) * max(0.0, reprefill_tokens) / rate)
