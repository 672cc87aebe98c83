"""When a served backend retries a failed call, and how long it waits first: one rule for
every backend that talks HTTP (``openai_compat.py``, ``openai_responses.py``, ``anthropic.py``).

The official SDKs run with ``max_retries=0`` here, because they retry in silence; the backends
announce each retry instead (a ``Retry`` event before its wait). What is retried follows the
SDKs' own rule, which the OpenAI and Anthropic SDKs share: the server's ``x-should-retry``
header when it sends one, else HTTP 408, 409, 429 and every 5xx (Anthropic's 529
"overloaded" included). A ``retry-after-ms`` / ``retry-after`` of up to 60 s is honoured; a
longer one means the server does not want the call again soon, so it is not retried at all.
Otherwise the wait is the SDKs' schedule: 0.5 s doubling to at most 8 s, minus up to 25% jitter.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
MAX_RETRY_AFTER_S = 60.0


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...)."""
    return min(INITIAL_BACKOFF_S * 2.0 ** (attempt - 1), MAX_BACKOFF_S) * (1 - 0.25 * random.random())


def should_retry(status: int, headers: Mapping[str, str]) -> tuple[bool, float | None]:
    """Whether an HTTP error of ``status`` is retried, and the server's wait in seconds when it
    gave one of up to :data:`MAX_RETRY_AFTER_S` (``None``: use :func:`backoff`)."""
    wait: float | None = None
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            wait = float(value) / divisor
        except ValueError:
            continue
        break
    if wait is not None and wait > MAX_RETRY_AFTER_S:
        return False, None
    if wait is not None and wait < 0:
        wait = None
    flag = headers.get("x-should-retry")
    if flag in ("true", "false"):
        return flag == "true", wait
    return status in (408, 409, 429) or status >= 500, wait
