"""The Wilson score interval of a success rate.

Why Wilson and not ``p ± 1.96·sqrt(p(1-p)/n)``: an ablation has few runs per arm (20-30 tasks)
and rates near 0 or 1 (a tiny model, a strong one). There the normal approximation gives an
interval of width zero at 0/n or n/n and bounds below 0 or above 1; Wilson's stays inside
[0, 1], is never empty, and covers close to its nominal 95% at these sizes.
"""

from __future__ import annotations

import math

__all__ = ["Z95", "wilson"]

#: the normal quantile of a two-sided 95% interval
Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval ``(low, high)`` of ``successes`` out of ``n`` trials.
    ``n == 0`` knows nothing: ``(0.0, 1.0)``."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high
