"""The providers one proxy routes to and their official hosts, in a module that imports nothing.

The command line reads them to declare ``--anthropic-upstream`` and ``--openai-upstream``
(``cli/proxy.py``) for every ``ctxwright`` command's parser; importing them from
``proxy/server.py`` would load Starlette, uvicorn and httpx into ``ctxwright --help``.
"""

from __future__ import annotations

__all__ = ["DEFAULT_UPSTREAMS", "PROVIDERS"]

#: The providers one proxy routes to, each to its own upstream (``ProxyConfig.upstreams``).
PROVIDERS = ("anthropic", "openai")
#: Each provider's official host: ``ctxwright proxy`` with no ``--upstream`` serves both.
DEFAULT_UPSTREAMS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com"}
