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
#: The most it takes: more threads than any machine's cores only slow a model down, and the
#: value goes to C code (llama.cpp's ``n_threads``, an ``int``).
MAX_THREADS = 1024


def default_threads() -> int:
    """``CTXWRIGHT_THREADS`` when set (a whole number from 1 to :data:`MAX_THREADS`; anything else is a one-line
    error naming the variable), else ``min(2, cores)``."""
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(DEFAULT_MAX, os.cpu_count() or 1)
    # digits only: int() would take "1_000" and "+2", and a value past a C int reaches llama.cpp
    value = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_THREADS)) else 0
    if not 1 <= value <= MAX_THREADS:
        shown = raw if len(raw) <= 20 else f"{raw[:20]}..."
        raise ConfigError(
            f"{THREADS_ENV}={shown!r}: give a whole number of threads from 1 to {MAX_THREADS}, or unset it"
        )
    return value


__all__ = ["DEFAULT_MAX", "MAX_THREADS", "THREADS_ENV", "default_threads"]
