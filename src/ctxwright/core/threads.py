"""How many CPU threads a local model (llama.cpp, the embedding model's ONNX runtime) may use.

Why one setting: llama.cpp's worker threads spin while they wait for each other, so two models
that each take every core of a small machine do not share it -- each waits for threads the
other is running (on a 2-core machine, one test of the attention reader took 8 s alone and
343 s in a parallel test run beside other jobs).
Several agents, a test suite run in parallel, or a proxy beside an agent on one machine set
``CTXWRIGHT_THREADS`` (for instance to 1) so that together they ask for no more threads than
there are cores.
"""

from __future__ import annotations

import os

from ctxwright.errors import ConfigError

#: The environment variable that caps every local model's threads.
THREADS_ENV = "CTXWRIGHT_THREADS"
#: The default without it: two threads (these models are small; more threads gain little on
#: their matrix sizes), never more than the machine has.
DEFAULT_MAX = 2


def default_threads() -> int:
    """``CTXWRIGHT_THREADS`` when set (a whole number of at least 1; anything else is a one-line
    error naming the variable), else ``min(2, cores)``."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(DEFAULT_MAX, os.cpu_count() or 1)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{THREADS_ENV}={raw!r}: give a whole number of threads of at least 1, or unset it")
    return value


__all__ = ["DEFAULT_MAX", "THREADS_ENV", "default_threads"]
