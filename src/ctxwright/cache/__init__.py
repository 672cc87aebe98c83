"""The providers' own prompt caches: where breakpoints go, how long an entry lives, what a
call costs, and why a provider says it missed.

ctxwright keeps the prefix byte-stable for every backend (``core/prefix.py``); this package
holds the rules that differ by provider -- Anthropic caches only up to explicit
``cache_control`` breakpoints, OpenAI routes on a prefix hash plus ``prompt_cache_key``, both
expire an idle entry after a TTL and price reads, writes and misses differently. One rule per
module, each explained by the provider behaviour it protects.
"""
